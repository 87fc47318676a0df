"""Calibration against ns-3: the TCP flow model vs packet-level TCP on the same star.

``aiotsim calibrate --against ns3`` (needs the optional extra ``aiotsim[ns3]``: the ``ns3`` package,
official Python bindings of ns-3.44) builds, for every case, the same topology in ns-3 and in
:class:`~aiotsim.network.flows.Network` and compares the time until the last flow's last byte has
arrived (the makespan: what a synchronous round waits for; TCP flows that start together finish
at different times -- ns-3's shares are not max-min fair over short spans -- but the bottleneck
is busy until the last byte either way, which the fluid model's total time captures):

* ``flows`` clients, each on its own point-to-point link (``rate``, one-way ``latency``, a drop-tail
  queue of ``queue_packets``, random packet loss ``loss`` on the data direction by a
  ``RateErrorModel``; queue 1,000 packets, Linux's default txqueuelen: with 100, a SYN dropped at a
  full queue under a synchronized start backs off for tens of seconds) to a hub, and one shared
  link (``server`` rate, no latency) from the hub to the server: aiotsim's ``star``;
* TCP CUBIC (ns-3's default; HyStart on), initial window 10, 1,448-byte segments (1,500-byte
  packets with TCP timestamps: ``header_bytes = 52``; the point-to-point header adds 2 bytes of
  framing), 4 MiB socket buffers, no queue disc (the device queue is the only buffer), and Linux's
  timers where ns-3's defaults differ: ``MinRto`` 200 ms (ns-3: 1 s), ``DelAckTimeout`` 40 ms
  (Linux's ``TCP_DELACK_MIN``; ns-3: 200 ms -- equal to the RTO floor, so that after a timeout the
  single segment in flight waits for a delayed ACK, the RTO fires first, and the connection crawls
  at one segment per 200 ms: 10 MB at 1% loss took 1,304 s instead of 8.4 s), ``ConnTimeout`` 1 s
  (a lost SYN is resent after RFC 6298's initial RTO, as in Linux; ns-3: 3 s); ``DelAckCount`` 2,
  ``ClockGranularity`` 200 ms (ns-3's RTO is ``max(MinRto, srtt + max(G, 4 rttvar))``, Linux's
  ``srtt + max(4 rttvar, 200 ms)``: G = 200 ms makes them one; with ns-3's 1 ms the RTO settles
  just above the RTT, a lone segment's delayed ACK comes later, and every retransmission times out
  spuriously again: 185 s instead of about 20 s for 1 MB x 4 flows at 300 ms and 1% loss);
  ``DelAckCount`` 2 and ``Sack`` on, stated explicitly; fast recovery by proportional rate
  reduction as RFC 6937 writes it and Linux runs it (``aiotsim_common::RfcPrr``), not ns-3.44's
  ``TcpPrrRecovery``, which counts a duplicate ACK's SACKed segment twice (it adds one segment per
  duplicate ACK, the estimate RFC 6937 gives only for connections without SACK) and divides by
  the pipe at the start of recovery instead of the flight size: it sends up to twice what PRR
  allows, refills the drop-tail buffer that caused the loss, loses its own retransmissions there
  and waits for the RTO (ns-3-dev fixed both later, citing RFC 9937). On shallow buffers this
  moves ns-3 by up to 25% per flow (8 x 250 KB through 50 packets: 2.36 s on average with
  ns-3.44's, 1.80 s with RFC 6937's; 250 KB over 1 Mbit/s through 10 packets: 2.775 s and 2.338 s);
* loss: the ``RateErrorModel`` (unit: packet) sits on the hub's receiving side of each client link,
  so it drops data packets and the client's SYN and ACKs, never the server's ACKs or SYN-ACK: the
  scenario's loss is data-direction packet loss, as in the model (``Topology.star(loss=...)``
  draws for data segments and the SYN);
* every client sends ``size`` bytes to the server at t = 0 over a new connection (``BulkSend``):
  the handshake is included on both sides (``tcp_connection = "per-transfer"`` in the model);
* with loss, both sides are averaged over ``realisations`` seeds (ns-3 ``RngRun`` 1..R, model seeds
  1..R): one realisation of a lossy transfer is a random variable, the model is compared with its
  mean. R = 5, and 20 where the case is cheap (at most 2 MB in all): a small transfer's time is a
  rare large penalty (a lost SYN costs 1 s on a base of milliseconds), whose mean needs many
  draws.

The ns-3 side runs in a subprocess (``python -m aiotsim.network.calibrate_ns3``: cases as JSON on
stdin, completion times as JSON on stdout) so that cppyy's interpreter and ns-3's global simulator
stay out of the caller's process.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import simpy

from aiotsim.errors import AiotsimError
from aiotsim.network.flows import Network
from aiotsim.network.tcp import TcpParams
from aiotsim.network.topology import Topology

HEADER_BYTES = 52  # bytes: IPv4 20 + TCP 20 + timestamps 12 -> 1,448-byte segments in 1,500
P2P_FRAMING = 2  # bytes: ns-3's point-to-point (PPP) header
SIZES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)  # bytes
FLOWS = (1, 4, 16)
LATENCIES_MS = (1.0, 10.0, 50.0, 150.0, 300.0)  # one way
LOSSES = (0.0, 0.01, 0.05)
QUICK = (  # (size, flows, latency_ms, loss): a few regimes, seconds of ns-3 time
    (246_824, 1, 50.0, 0.0),
    (246_824, 1, 150.0, 0.0),
    (1_000_000, 4, 10.0, 0.0),
    (100_000, 16, 50.0, 0.0),
    (246_824, 1, 50.0, 0.01),  # the lossy reference: 20 realisations, mean 0.94 s (+-9.5%)
)


@dataclass(frozen=True)
class Ns3Case:
    """One case of the grid (bytes, Mbit/s, ms)."""

    size: int
    flows: int
    latency_ms: float
    loss: float
    rate_mbps: float = 10.0
    server_mbps: float = 10.0
    queue_packets: int = 1000  # Linux default txqueuelen
    realisations: int = 1

    @property
    def stop_s(self) -> float:
        """Simulated time after which ns-3 gives up (a generous multiple of the lossless time)."""
        ideal = 8.0 * self.size * self.flows / (min(self.rate_mbps * self.flows, self.server_mbps) * 1e6)
        return 100.0 + 50.0 * ideal / max(1.0 - 20 * self.loss, 0.05) + 200.0 * self.latency_ms * 1e-3


@dataclass(frozen=True)
class Ns3Row:
    """A case with ns-3's and the model's mean flow completion time, s."""

    case: Ns3Case
    ns3_s: float
    model_s: float
    ideal_s: float  # the fluid model without TCP ("ideal" transport), for comparison
    ns3_se: float = 0.0  # standard error of ns-3's mean over its realisations, s (0 with one)

    @property
    def error(self) -> float:
        """Relative error of the TCP model, (model - ns3) / ns3."""
        return (self.model_s - self.ns3_s) / self.ns3_s


def ns3_available() -> bool:
    """Whether the ns-3 Python bindings (``pip install aiotsim[ns3]``) are importable."""
    return importlib.util.find_spec("ns") is not None and importlib.util.find_spec("cppyy") is not None


def _realisations(size: int, flows: int, loss: float, base: int) -> int:
    """Seeds per case: 1 without loss, ``base`` with, 4 x ``base`` where at most 2 MB move."""
    if loss <= 0:
        return 1
    return 4 * base if size * flows <= 2_000_000 else base


def grid(quick: bool = False, realisations: int = 5) -> list[Ns3Case]:
    """The cases: the quick few, or sizes x flows x latencies x losses (225 cases)."""
    if quick:
        return [Ns3Case(s, f, lat, p, realisations=_realisations(s, f, p, realisations)) for s, f, lat, p in QUICK]
    return [
        Ns3Case(s, f, lat, p, realisations=_realisations(s, f, p, realisations))
        for p in LOSSES
        for lat in LATENCIES_MS
        for f in FLOWS
        for s in SIZES
    ]


def model_time(case: Ns3Case, transport: str = "tcp", seed: int = 1) -> float:
    """Completion time of the case's last flow (s) in aiotsim's network model."""
    topo = Topology.star(
        case.flows, case.rate_mbps * 1e6, case.rate_mbps * 1e6, case.latency_ms * 1e-3, case.server_mbps * 1e6,
        mtu=1500, header_bytes=HEADER_BYTES, loss=case.loss,
        per_node=[{"framing_bytes": P2P_FRAMING}] * case.flows,
    )  # fmt: skip
    env = simpy.Environment()
    net = Network(env, topo, seed=seed, transport=transport, tcp=TcpParams(connection="per-transfer"))
    ends: list[float] = []

    def send(i: int):  # type: ignore[no-untyped-def]
        t = yield net.send(f"node{i}", "server", case.size)
        ends.append(t.end_s)

    for i in range(case.flows):
        env.process(send(i))
    env.run()
    return max(ends)


def run_ns3(cases: Sequence[Ns3Case], progress: str | None = None) -> list[list[list[float]]]:
    """Completion time (s) of every flow of every realisation of each case in ns-3, ``[case][run]
    [flow]`` (-1 where a flow did not finish); ``progress``: a file the worker appends each case to."""
    if not ns3_available():
        raise AiotsimError("ns-3 is not installed: pip install 'aiotsim[ns3]' (the ns3 package, ns-3.44)")
    payload = json.dumps([asdict(c) for c in cases])
    cmd = [sys.executable, "-m", "aiotsim.network.calibrate_ns3", *([progress] if progress else [])]
    proc = subprocess.run(cmd, input=payload, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AiotsimError(f"the ns-3 worker failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def makespan(runs: Sequence[Sequence[float]]) -> float:
    """Mean over realisations of the last flow's completion, s (NaN if a flow did not finish)."""
    if any(t < 0 for run in runs for t in run):
        return float("nan")
    return statistics.fmean(max(run) for run in runs)


def makespan_se(runs: Sequence[Sequence[float]]) -> float:
    """Standard error of :func:`makespan`'s mean, s (0 with one realisation)."""
    if len(runs) < 2:
        return 0.0
    return statistics.stdev(max(run) for run in runs) / len(runs) ** 0.5


def model_seeds(case: Ns3Case) -> int:
    """Seeds the model averages over: as many as ns-3's realisations, at least 200 for a cheap lossy
    case (the model costs little there, and its mean should carry no sampling noise of its own)."""
    cheap = case.loss > 0 and case.size * case.flows <= 2_000_000
    return max(case.realisations, 200) if cheap else case.realisations


def compare(cases: Sequence[Ns3Case]) -> list[Ns3Row]:
    """ns-3 against the model (TCP, and the ideal fluid model) for every case."""
    measured = run_ns3(cases)
    rows = []
    for case, runs in zip(cases, measured, strict=True):
        ns3_s = makespan(runs)
        seeds = range(1, model_seeds(case) + 1)
        model = statistics.fmean(model_time(case, "tcp", seed) for seed in seeds)
        rows.append(Ns3Row(case, ns3_s, model, model_time(case, "ideal"), makespan_se(runs)))
    return rows


def format_table(rows: Sequence[Ns3Row]) -> str:
    """The comparison as a text table, then median and worst absolute error (TCP and ideal)."""
    lines = [
        f"{'size':>10} {'flows':>5} {'lat ms':>6} {'loss':>5} {'ns-3 s':>10} {'+-se':>6} {'tcp s':>10} {'err':>7} "
        f"{'ideal s':>10} {'err':>7}"
    ]
    for r in rows:
        c = r.case
        ideal_err = (r.ideal_s - r.ns3_s) / r.ns3_s
        lines.append(
            f"{c.size:>10,} {c.flows:>5} {c.latency_ms:>6g} {c.loss:>5g} {r.ns3_s:>10.4g} "
            f"{r.ns3_se / r.ns3_s:>6.1%} {r.model_s:>10.4g} "
            f"{r.error:>+7.1%} {r.ideal_s:>10.4g} {ideal_err:>+7.1%}"
        )
    ok = [r for r in rows if r.ns3_s == r.ns3_s]  # NaN: ns-3 did not finish
    if ok:
        errs = [abs(r.error) for r in ok]
        ideal = [abs((r.ideal_s - r.ns3_s) / r.ns3_s) for r in ok]
        lines.append(
            f"tcp model: median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%}; "
            f"ideal model: median {statistics.median(ideal):.1%}, worst {max(ideal):.1%} ({len(ok)} cases)"
        )
        near = sum(abs(r.model_s - r.ns3_s) <= 2.0 * r.ns3_se for r in ok if r.ns3_se > 0)
        lossy = sum(r.ns3_se > 0 for r in ok)
        if lossy:
            lines.append(f"lossy cases where the model is within 2 standard errors of ns-3's mean: {near} of {lossy}")
    if len(ok) < len(rows):
        lines.append(f"{len(rows) - len(ok)} case(s) did not finish in ns-3 within the time limit")
    return "\n".join(lines)


def markdown_report(rows: Sequence[Ns3Row]) -> str:
    """The comparison summarised as Markdown (README's fidelity table): per one-way latency and
    loss, how many cases, the TCP model's median and worst |error|, how many lossy cases it has
    within two standard errors of ns-3's mean, and the fluid model's median and worst; then the
    whole grid's median, the cases within 5% and 15%, and the worst."""
    ok = [r for r in rows if r.ns3_s == r.ns3_s]

    def ideal(r: Ns3Row) -> float:
        return abs((r.ideal_s - r.ns3_s) / r.ns3_s)

    head = "| one-way latency | loss | cases | TCP model: median / worst | within 2 se |"
    lines = [head + " fluid model (`ideal`): median / worst |", "|---|---|---:|---:|---:|---:|"]
    groups = sorted({(r.case.loss, r.case.latency_ms) for r in ok})
    for loss, lat in groups:
        mine = [r for r in ok if (r.case.loss, r.case.latency_ms) == (loss, lat)]
        errs, fluid = [abs(r.error) for r in mine], [ideal(r) for r in mine]
        near = sum(abs(r.model_s - r.ns3_s) <= 2.0 * r.ns3_se for r in mine if r.ns3_se > 0)
        within = str(near) if any(r.ns3_se > 0 for r in mine) else "-"
        lines.append(
            f"| {lat:g} ms | {loss:.0%} | {len(mine)} | {statistics.median(errs):.1%} / {max(errs):.1%} | {within} "
            f"| {statistics.median(fluid):.1%} / {max(fluid):.1%} |"
        )
    errs = [abs(r.error) for r in ok]
    lossless = [abs(r.error) for r in ok if r.case.loss == 0]
    lossy = [abs(r.error) for r in ok if r.case.loss > 0]
    lines += [
        "",
        f"All {len(ok)} cases: median {statistics.median(errs):.1%} (fluid model "
        f"{statistics.median([ideal(r) for r in ok]):.1%}), {sum(e <= 0.05 for e in errs)} within 5%, "
        f"{sum(e <= 0.15 for e in errs)} within 15%, worst {max(errs):.1%}; lossless median "
        f"{statistics.median(lossless):.1%}, lossy median {statistics.median(lossy):.1%}.",
    ]
    return "\n".join(lines)


# The C++ both ns-3 programs start with (this module's star and
# :mod:`aiotsim.network.calibrate_classes`): headers, TCP as the calibration sets it up (see the
# module docstring), point-to-point links, bulk senders and a per-flow sink. Each program is
# compiled by cppyy in its own subprocess, so each defines these once.
NS3_PRELUDE = r"""
#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/internet-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/applications-module.h"
#include "ns3/traffic-control-module.h"
#include <vector>
#include <map>

namespace aiotsim_common {
using namespace ns3;

// Fast recovery by proportional rate reduction as RFC 6937 writes it (and Linux's
// tcp_cwnd_reduction runs it): DeliveredData is what an ACK newly acknowledges or SACKs, nothing
// more; RecoverFS is the flight size when recovery starts (SND.NXT - SND.UNA); while the pipe
// exceeds ssthresh the sender sends ssthresh / RecoverFS of what is delivered, below it it
// catches up to ssthresh by at most what is delivered (+ 1 segment on an ACK of a retransmission:
// slow-start reduction bound); the first ACK always releases the fast retransmission. ns-3.44's
// TcpPrrRecovery adds a segment per duplicate ACK to a SACK connection's DeliveredData and divides
// by the pipe: see the module docstring of aiotsim.network.calibrate_ns3. Sizes in bytes.
class RfcPrr : public TcpClassicRecovery {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("aiotsim_common::RfcPrr").SetParent<TcpClassicRecovery>()
                            .SetGroupName("Internet").AddConstructor<RfcPrr>();
    return tid;
  }
  RfcPrr() = default;
  RfcPrr(const RfcPrr& o) : TcpClassicRecovery(o), m_delivered(o.m_delivered), m_out(o.m_out), m_fs(o.m_fs) {}
  void EnterRecovery(Ptr<TcpSocketState> tcb, uint32_t, uint32_t unacked, uint32_t delivered) override {
    m_delivered = 0;
    m_out = 0;
    m_fs = std::max<uint32_t>(unacked, tcb->m_segmentSize);
    DoRecovery(tcb, delivered, true);
  }
  void DoRecovery(Ptr<TcpSocketState> tcb, uint32_t delivered, bool) override {
    if (delivered == 0) return;
    m_delivered += delivered;
    int64_t seg = tcb->m_segmentSize, ssthresh = tcb->m_ssThresh, pipe = tcb->m_bytesInFlight, send;
    if (pipe > ssthresh) {  // proportional: ceil(delivered x ssthresh / RecoverFS) - sent so far
      send = int64_t((m_delivered * uint64_t(ssthresh) + m_fs - 1) / m_fs) - int64_t(m_out);
    } else {
      int64_t limit = std::max<int64_t>(int64_t(m_delivered) - int64_t(m_out), delivered);
      if (tcb->m_isRetransDataAcked) limit += seg;
      send = std::min<int64_t>(limit, ssthresh - pipe);
    }
    send = std::max<int64_t>(send, m_out > 0 ? 0 : seg);
    tcb->m_cWnd = uint32_t(pipe + send);
    tcb->m_cWndInfl = tcb->m_cWnd;
  }
  void ExitRecovery(Ptr<TcpSocketState> tcb) override { tcb->m_cWndInfl = tcb->m_cWnd; }
  void UpdateBytesSent(uint32_t bytes) override { m_out += bytes; }
  Ptr<TcpRecoveryOps> Fork() override { return CopyObject<RfcPrr>(this); }
  std::string GetName() const override { return "RfcPrr"; }

 private:
  uint64_t m_delivered = 0;  // bytes delivered since recovery began (prr_delivered)
  uint64_t m_out = 0;        // bytes sent since recovery began (prr_out)
  uint64_t m_fs = 1;         // RecoverFS, bytes
};

// The run's random stream and TCP: CUBIC, IW 10, 1,448-byte segments, 4 MiB buffers, SACK, RFC 6937 PRR.
void set_up_tcp(uint32_t run) {
  RngSeedManager::SetSeed(1);
  RngSeedManager::SetRun(run);
  Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue("ns3::TcpCubic"));
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
  Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(4194304));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(4194304));
  // Linux's timers instead of ns-3's defaults (see the module docstring): RTO floor 200 ms (ns-3:
  // 1 s); delayed-ACK timeout 40 ms (Linux's TCP_DELACK_MIN; ns-3: 200 ms, which equals the RTO
  // floor: after a timeout the window of 1 segment waits for a delayed ACK that never comes before
  // the next timeout, and the connection crawls at 1 segment per 200 ms for minutes); SYN
  // retransmission after 1 s (RFC 6298's initial RTO, Linux's; ns-3: 3 s).
  Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
  Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
  Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
  Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(Seconds(1)));
  Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
  Config::SetDefault("ns3::TcpL4Protocol::RecoveryType", TypeIdValue(RfcPrr::GetTypeId()));
  // ns-3's RTO is max(MinRto, srtt + max(ClockGranularity, 4 rttvar)); Linux's is srtt +
  // max(4 rttvar, 200 ms) (tcp_rto_min bounds rttvar's term, not the sum): a granularity of 200 ms
  // gives Linux's formula. With ns-3's 1 ms the RTO settles just above the RTT, below RTT + the
  // 40 ms delayed ACK of a lone segment, and after one timeout every retransmission times out
  // spuriously again (1 MB x 4 flows at 300 ms, 1% loss: 185 s instead of about 20 s).
  Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(200)));
}

// A point-to-point link a -- b (bps, delay_s) with drop-tail queues of `queue` packets and no
// queue disc (the device queue is the only buffer), on subnet `base`/24.
Ipv4InterfaceContainer link(Ptr<Node> a, Ptr<Node> b, double bps, double delay_s, int queue, std::string base,
                            NetDeviceContainer* devices = nullptr) {
  PointToPointHelper p2p;
  p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(bps))));
  p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay_s)));
  p2p.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue(std::to_string(queue) + "p"));
  NetDeviceContainer d = p2p.Install(a, b);
  Ipv4AddressHelper addr;
  addr.SetBase(base.c_str(), "255.255.255.0");
  Ipv4InterfaceContainer ifs = addr.Assign(d);
  TrafficControlHelper().Uninstall(d);
  if (devices) *devices = d;
  return ifs;
}

// Flow i is done when the server has size[i] bytes from it; its time counts from start[i].
struct Sink {
  std::vector<double> done, start;
  std::vector<uint64_t> got, size;
  std::map<uint32_t, int> which;  // peer IPv4 -> flow
  void OnRx(Ptr<const Packet> p, const Address& from) {
    int i = which[InetSocketAddress::ConvertFrom(from).GetIpv4().Get()];
    got[i] += p->GetSize();
    if (got[i] >= size[i] && done[i] < 0) done[i] = Simulator::Now().GetSeconds() - start[i];
  }
};

// `bytes` from `client` to `server`:`port` at `start_s`, over a new connection.
void bulk_send(Ptr<Node> client, Ipv4Address server, uint16_t port, uint64_t bytes, double start_s) {
  BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(server, port));
  bulk.SetAttribute("MaxBytes", UintegerValue(bytes));
  bulk.SetAttribute("SendSize", UintegerValue(1448));
  bulk.Install(client).Start(Seconds(start_s));
}

// Route, sink every flow on `server`:`port` into `sink`, run until `stop_s`: each flow's time
// (s; -1 if it did not finish).
std::vector<double> sink_and_run(Ptr<Node> server, uint16_t port, Sink* sink, double stop_s) {
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();
  PacketSinkHelper ps("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
  ApplicationContainer sa = ps.Install(server);
  sa.Start(Seconds(0.0));
  sa.Get(0)->TraceConnectWithoutContext("Rx", MakeCallback(&Sink::OnRx, sink));
  Simulator::Stop(Seconds(stop_s));
  Simulator::Run();
  std::vector<double> out = sink->done;
  Simulator::Destroy();
  return out;
}
}  // namespace aiotsim_common
"""

NS3_SOURCE = (
    NS3_PRELUDE
    + r"""
namespace aiotsim_ns3 {
using namespace ns3;
using namespace aiotsim_common;

// Star: `flows` clients -- (rate_bps, latency_s; loss on the data direction) -- hub -- (server_bps, 0 s)
// -- server. Every client sends `size` bytes to the server at t = 0 over a fresh connection.
// Returns each flow's completion time (s; -1 if it did not finish before `stop_s`).
std::vector<double> run_case(int flows, uint64_t size, double rate_bps, double server_bps, double latency_s,
                             double loss, int queue_packets, uint32_t run, double stop_s) {
  set_up_tcp(run);
  NodeContainer clients; clients.Create(flows);
  NodeContainer hub; hub.Create(1);
  NodeContainer server; server.Create(1);
  InternetStackHelper stack; stack.Install(clients); stack.Install(hub); stack.Install(server);
  Ipv4Address to = link(hub.Get(0), server.Get(0), server_bps, 0.0, queue_packets, "10.0.0.0").GetAddress(1);
  Sink sink;
  sink.done.assign(flows, -1.0); sink.start.assign(flows, 0.0);
  sink.got.assign(flows, 0); sink.size.assign(flows, size);
  uint16_t port = 9000;
  for (int i = 0; i < flows; ++i) {
    NetDeviceContainer d;
    Ipv4InterfaceContainer ci = link(clients.Get(i), hub.Get(0), rate_bps, latency_s, queue_packets,
                                     "10.1." + std::to_string(i + 1) + ".0", &d);
    if (loss > 0) {
      Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
      em->SetAttribute("ErrorRate", DoubleValue(loss));
      em->SetAttribute("ErrorUnit", StringValue("ERROR_UNIT_PACKET"));
      em->AssignStreams(i);  // the same draws for this flow whatever ran before in the process
      d.Get(1)->SetAttribute("ReceiveErrorModel", PointerValue(em));  // data direction: client -> hub
    }
    sink.which[ci.GetAddress(0).Get()] = i;
    bulk_send(clients.Get(i), to, port, size, 0.0);
  }
  return sink_and_run(server.Get(0), port, &sink, stop_s);
}
}  // namespace aiotsim_ns3
"""
)


def _worker() -> None:  # pragma: no cover - runs in the ns-3 subprocess
    """Read cases (JSON) on stdin, run each in ns-3, print every flow's completion time (JSON)."""
    import cppyy
    from ns import ns  # noqa: F401  (loads the ns-3 libraries and headers into cppyy)

    cppyy.cppdef(NS3_SOURCE)
    out = []
    for raw in json.loads(sys.stdin.read()):
        c = Ns3Case(**raw)
        runs = []
        for run in range(1, c.realisations + 1):
            done = list(
                cppyy.gbl.aiotsim_ns3.run_case(
                    c.flows, c.size, c.rate_mbps * 1e6, c.server_mbps * 1e6, c.latency_ms * 1e-3, c.loss,
                    c.queue_packets, run, c.stop_s,
                )
            )  # fmt: skip
            runs.append([float(t) for t in done])
        out.append(runs)
        if len(sys.argv) > 1:
            with open(sys.argv[1], "a") as f:
                f.write(json.dumps({"case": raw, "runs": runs}) + "\n")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":  # pragma: no cover
    _worker()
