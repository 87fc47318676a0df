"""The calibration's ns-3 fast recovery (``aiotsim_common::RfcPrr`` in the shared ns-3 prelude) is
proportional rate reduction as RFC 6937 writes it, checked by hand on single ACKs, and it is what
every ns-3 program of the project runs (skips without ns-3)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aiotsim.network import calibrate_classes as cc
from aiotsim.network.calibrate_ns3 import ns3_available

pytestmark = pytest.mark.skipif(not ns3_available(), reason="ns-3 (the ns3 package) is not installed")

SEG = 1000  # bytes, the segment size of the hand-computed cases

# Drive one recovery object ACK by ACK: each step (pipe, delivered, sent after it) -> the window
# it leaves, bytes. Runs in a subprocess: cppyy's interpreter and ns-3 stay out of pytest's.
_DRIVE_CPP = """
template <class R>
std::vector<uint32_t> drive(uint32_t seg, uint32_t ssthresh, uint32_t flight, std::vector<uint32_t> pipe,
                            std::vector<uint32_t> delivered, std::vector<uint32_t> sent) {
  using namespace ns3;
  Ptr<TcpRecoveryOps> prr = CreateObject<R>();
  Ptr<TcpSocketState> tcb = CreateObject<TcpSocketState>();
  tcb->m_segmentSize = seg;
  tcb->m_ssThresh = ssthresh;
  std::vector<uint32_t> out;
  for (size_t k = 0; k < pipe.size(); ++k) {
    tcb->m_bytesInFlight = pipe[k];
    if (k == 0) prr->EnterRecovery(tcb, 3, flight, delivered[k]);
    else prr->DoRecovery(tcb, delivered[k], true);
    out.push_back(tcb->m_cWnd);
    if (sent[k]) prr->UpdateBytesSent(sent[k]);
  }
  return out;
}
"""
_DRIVER = r"""
import json, sys
import cppyy
from ns import ns
from aiotsim.network.calibrate_ns3 import NS3_PRELUDE
cppyy.cppdef(NS3_PRELUDE)
cppyy.cppdef(sys.argv[2])
g = cppyy.gbl
plan = json.loads(sys.argv[1])
kind = g.aiotsim_common.RfcPrr if plan["ours"] else g.ns3.TcpPrrRecovery
u32 = g.std.vector["uint32_t"]
pipe, delivered, sent = (u32([a[i] for a in plan["acks"]]) for i in range(3))
print(json.dumps([int(w) for w in g.drive[kind](plan["seg"], plan["ssthresh"], plan["flight"], pipe, delivered, sent)]))
"""


def _windows(ours: bool, acks: list[tuple[int, int, int]], flight: int, ssthresh: int) -> list[int]:
    plan = {"ours": ours, "seg": SEG, "ssthresh": ssthresh, "flight": flight, "acks": acks}
    proc = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(plan), _DRIVE_CPP], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rfc6937_prr_by_hand_and_what_ns3_44_sends_instead() -> None:
    # 20 segments in flight (RecoverFS = 20,000 B), ssthresh 14,000 B; each duplicate ACK SACKs one
    # segment (delivered 1,000 B) and the pipe stays above ssthresh (18,000 B).
    acks = [(18 * SEG, SEG, SEG), (18 * SEG, SEG, 0), (18 * SEG, SEG, 0)]
    # RFC 6937: sndcnt = ceil(prr_delivered x ssthresh / RecoverFS) - prr_out
    # ACK 1: ceil(1,000 x 14,000 / 20,000) = 700, but the first ACK sends the fast retransmission: 1,000
    # ACK 2: ceil(2,000 x 0.7) - 1,000 = 400; ACK 3: ceil(3,000 x 0.7) - 1,000 = 1,100
    assert _windows(True, acks, 20 * SEG, 14 * SEG) == [19_000, 18_400, 19_100]
    # ns-3.44's TcpPrrRecovery adds a segment per duplicate ACK (2,000 B delivered each) and divides
    # by the pipe (18,000 B): ceil(2,000 x 14 / 18) = 1,556; ceil(4,000 x 14 / 18) - 1,000 = 2,112;
    # ceil(6,000 x 14 / 18) - 1,000 = 3,667: up to three times what PRR sends
    assert _windows(False, acks, 20 * SEG, 14 * SEG) == [19_556, 20_112, 21_667]


def test_below_ssthresh_prr_catches_up_by_what_is_delivered() -> None:
    # the pipe (8,000 B) under ssthresh (14,000 B): sndcnt = min(ssthresh - pipe, max(prr_delivered
    # - prr_out, delivered)) (the conservative bound; no retransmission is acknowledged here)
    acks = [(8 * SEG, 2 * SEG, SEG), (8 * SEG, SEG, 0)]
    # ACK 1: min(6,000, max(2,000, 2,000)) = 2,000; ACK 2: min(6,000, max(3,000 - 1,000, 1,000)) = 2,000
    assert _windows(True, acks, 20 * SEG, 14 * SEG) == [10_000, 10_000]


def test_ns3_programs_run_rfc6937_prr_and_it_moves_a_shallow_buffer() -> None:
    # the lone 250 KB flow over 1 Mbit/s through a 10-packet queue: with ns-3.44's recovery it lost
    # its retransmissions in the full buffer and timed out (2.775 s); with RFC 6937's it recovers
    # (2.338 s); 1,000 packets lose nothing, so both recoveries give 2.244 s there
    shallow = cc.ClassCase("shallow buffer", "q10", (cc.Flow(250_000, 50.0),), edge_mbps=1.0, core_mbps=1.0,
                           queue_packets=10)  # fmt: skip
    deep = cc.ClassCase("deep buffer", "q1000", shallow.flows, edge_mbps=1.0, core_mbps=1.0, queue_packets=1000)
    got = cc.run_ns3([shallow, deep])
    assert got[0][0] == pytest.approx(2.338, abs=0.01)
    assert got[1][0] == pytest.approx(2.244, abs=0.01)
