"""The flow model against ns-3 where AIoT networks leave the calibration star: per-flow times by class.

``aiotsim calibrate --against ns3`` (:mod:`aiotsim.network.calibrate_ns3`) checks the model on
a star of equal links, flows that start together and deep (1,000-packet) queues, by the time the
last flow finishes. Real AIoT networks break all three, and a round's makespan hides how each
node fares. ``aiotsim calibrate --against ns3 --classes`` compares **each flow's completion time**
(from its own start to its last byte at the server) in classes of cases built to break one
assumption at a time:

* ``shallow buffer``: drop-tail queues of 10, 50 and 100 packets (8 x 250 KB at 50 ms; one 250 KB
  flow over 1 Mbit/s), with the same cases at 1,000 packets as the deep reference;
* ``mixed RTT``: 4 flows of 1 MB at one-way 5, 20, 50 and 150 ms sharing a 10 Mbit/s bottleneck
  behind 100 Mbit/s access links;
* ``staggered``: flows that start while others are in flight (a flow joining a loaded link);
* ``low rate``: 250 kbit/s and 1 Mbit/s links at 100 ms one way;
* ``hierarchy``: 8 nodes behind 2 gateways whose backhauls share the server's link;
* ``asymmetric reuse``: clients on 2 Mbit/s up / 20 Mbit/s down links that alternate a 250 KB
  upload and a 250 KB download over one connection, 3 times (what a synchronous round does with a
  reused connection); every transfer is compared. The model shares one connection between the
  directions (``network.tcp_connection = "duplex"``: one handshake) and restarts no window after
  idle here, as ns-3 does not (``network.tcp_idle_restart = false``; Linux and the model's
  default do).

Both sides are set up as in :mod:`~aiotsim.network.calibrate_ns3` (CUBIC, initial window 10,
1,448-byte segments, SACK, Linux's timers, RFC 6937's fast recovery, a handshake per transfer)
and carry no random loss. Yet a drop-tail buffer makes a case lossy: which flow's slow start loses
a burst, or which retransmission meets a full queue, turns on the order packets reach it, and a
start 1 ms later can make one flow's completion 3x another realisation's in ns-3 (8 x 250 KB
through 10 packets: 0.92-3.01 s, and which flow is fast changes with the starts). So every case runs in
:data:`REALISATIONS` realisations, each flow starting up to :data:`START_JITTER_S` later than
written (seeded, the same draws on both sides), and each flow's time is the mean over them, with
ns-3's standard error beside it: the model is judged against what a flow can expect, not against
one draw of the order. The model runs under both sharings: ``fair`` (the default) has no
shared buffer, so every queue size gives it the same times; ``fifo`` gives every link the case's
drop-tail queue (:mod:`aiotsim.network.queues`: queueing delay in the round trips, sharing by
window and RTT, overflow losses). ns-3 runs in a subprocess (``python -m aiotsim.network.calibrate_classes``),
like the star's calibration.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import simpy

from aiotsim.errors import AiotsimError
from aiotsim.network.calibrate_ns3 import HEADER_BYTES, NS3_PRELUDE, P2P_FRAMING, ns3_available
from aiotsim.network.flows import Network
from aiotsim.network.tcp import TcpParams
from aiotsim.network.topology import Topology

CLASSES = ("deep buffer", "shallow buffer", "mixed RTT", "staggered", "low rate", "hierarchy", "asymmetric reuse")
# runs of every case, each flow's start jittered (module docstring). ns-3's fast recovery by RFC
# 6937 (calibrate_ns3) turns a 1 ms later start into a flow time up to 3x another's in the shallow
# cases (8 x 250 KB through 10 packets: 0.92-3.01 s): 8 realisations left ns-3's per-flow means a
# median 9.6% standard error there, 32 leave about half
REALISATIONS = 32
# model seeds per realisation under fifo, whose overflow draws make a flow's time vary from seed to
# seed (8 x 250 KB through 100 packets: one seed set's per-flow means differed from another's by a
# median 9% over 8 realisations of one seed); 256 runs of a case in all, as with 8 realisations of
# 32 seeds before; fair draws nothing in these loss-free cases, one seed is its mean
MODEL_SEEDS = 8
START_JITTER_S = 1e-3  # s, the most a flow starts later than its case says


@dataclass(frozen=True)
class Flow:
    """One upload: ``size`` bytes from its own client, whose access link has one-way
    ``latency_ms``, starting at ``start_s`` (s of simulated time)."""

    size: int
    latency_ms: float
    start_s: float = 0.0


@dataclass(frozen=True)
class ClassCase:
    """One case of a class: its flows and links (Mbit/s, ms, packets).

    A star (``groups`` empty): each client's access link (``edge_mbps``, the flow's latency) to a
    hub, and one link from the hub to the server (``core_mbps``, no latency) that all flows share.
    A hierarchy: the clients of gateway k (``groups[k]`` of them, in order) reach it over their
    access links; each gateway's backhaul (``backhaul_mbps``, ``backhaul_latency_ms``) reaches the
    hub, then the shared core link. Every link's drop-tail queue holds ``queue_packets``."""

    klass: str
    label: str
    flows: tuple[Flow, ...]
    edge_mbps: float = 10.0
    core_mbps: float = 10.0
    queue_packets: int = 1000
    groups: tuple[int, ...] = ()
    backhaul_mbps: float = 10.0
    backhaul_latency_ms: float = 0.0
    down_mbps: float = 0.0  # > 0: the access links are asymmetric (edge_mbps up, down_mbps down) ...
    rounds: int = 0  # ... and each client alternates: upload, then download ``down_bytes``, ``rounds`` times
    down_bytes: int = 0

    @property
    def alternating(self) -> bool:
        """Whether each client alternates uploads and downloads over one reused connection."""
        return self.rounds > 0

    @property
    def stop_s(self) -> float:
        """Simulated time after which ns-3 gives up: far beyond any plausible completion."""
        total = sum(f.size + self.down_bytes for f in self.flows) * max(1, self.rounds) * 8
        return 120.0 + max(f.start_s for f in self.flows) + 50.0 * total / (min(self.edge_mbps, self.core_mbps) * 1e6)


@dataclass(frozen=True)
class FlowRow:
    """One flow of one case: its completion time in ns-3 and in the model (``sharing = "fair"``,
    the default, and ``"fifo"``: drop-tail queues of the case's size), s; each the mean over the
    case's realisations (:func:`realisations`)."""

    case: ClassCase
    flow: int
    ns3_s: float
    model_s: float
    fifo_s: float = math.nan
    ns3_se: float = 0.0  # s, standard error of ns3_s (a mean over realisations)
    fifo_se: float = 0.0  # s, standard error of fifo_s (a mean over realisations and model seeds)

    @property
    def error(self) -> float:
        """Relative error of the model, (model - ns3) / ns3."""
        return (self.model_s - self.ns3_s) / self.ns3_s

    @property
    def fifo_error(self) -> float:
        """Relative error of the model under FIFO sharing, (fifo - ns3) / ns3."""
        return (self.fifo_s - self.ns3_s) / self.ns3_s


def grid() -> list[ClassCase]:
    """Every case of every class (the deep-buffer reference first)."""
    eight = (Flow(250_000, 50.0),) * 8
    one_slow = (Flow(250_000, 50.0),)
    mixed = tuple(Flow(1_000_000, ms) for ms in (5.0, 20.0, 50.0, 150.0))
    stagger = tuple(Flow(1_000_000, 10.0, 0.3 * k) for k in range(4))
    join = (Flow(4_000_000, 10.0), Flow(250_000, 10.0, 1.0))
    hier = (Flow(500_000, 10.0),) * 8
    cases: list[ClassCase] = []
    for q in (1000, 100, 50, 10):
        klass = "deep buffer" if q == 1000 else "shallow buffer"
        cases.append(ClassCase(klass, f"8 x 250 KB, 50 ms, queue {q}", eight, queue_packets=q))
        cases.append(ClassCase(klass, f"250 KB over 1 Mbit/s, 50 ms, queue {q}", one_slow, edge_mbps=1.0,
                               core_mbps=1.0, queue_packets=q))  # fmt: skip
    for q in (1000, 100):
        cases += [
            ClassCase("mixed RTT", f"4 x 1 MB at 5/20/50/150 ms, queue {q}", mixed, edge_mbps=100.0, queue_packets=q),
            ClassCase("staggered", f"4 x 1 MB, 10 ms, starts 0.3 s apart, queue {q}", stagger, queue_packets=q),
            ClassCase("staggered", f"250 KB joins a 4 MB upload at 1 s, queue {q}", join, queue_packets=q),
            ClassCase("hierarchy", f"2 gateways x 4 x 500 KB, queue {q}", hier, core_mbps=20.0, queue_packets=q,
                      groups=(4, 4), backhaul_mbps=10.0, backhaul_latency_ms=20.0),
        ]  # fmt: skip
    for n in (1, 4):
        for q in (1000, 100):
            cases.append(
                ClassCase("asymmetric reuse", f"{n} x (250 KB up, 250 KB down) x 3, 2/20 Mbit/s, 50 ms, queue {q}",
                          (Flow(250_000, 50.0),) * n, edge_mbps=2.0, down_mbps=20.0, core_mbps=100.0,
                          queue_packets=q, rounds=3, down_bytes=250_000)
            )  # fmt: skip
    for mbps in (0.25, 1.0):
        for n in (1, 4):
            label = f"{n} x 100 KB over {mbps:g} Mbit/s, 100 ms"
            cases.append(ClassCase("low rate", label, (Flow(100_000, 100.0),) * n, edge_mbps=mbps, core_mbps=mbps,
                                   queue_packets=100))  # fmt: skip
    return cases


def model_times(case: ClassCase, seed: int = 1, sharing: str = "fair") -> list[float]:
    """Each transfer's completion time (s, from its own start) in aiotsim's TCP flow model: one per
    flow, or for an alternating case each client's upload, download, upload ... in turn, over one
    connection that both directions share, opened once (``network.tcp_connection = "duplex"``, as
    ns-3's socket pair), that does not restart slow start when idle (ns-3's TCP does not;
    ``network.tcp_idle_restart = false``) and with ns-3's HyStart delay test. Every link's
    drop-tail queue holds the case's ``queue_packets`` (read by ``sharing = "fifo"``)."""
    per_node = [{"latency_s": f.latency_ms * 1e-3, "framing_bytes": P2P_FRAMING} for f in case.flows]
    up = case.edge_mbps * 1e6
    down = (case.down_mbps or case.edge_mbps) * 1e6
    if case.groups:
        topo = Topology.hierarchical(
            list(case.groups), up, down, 0.0, case.backhaul_mbps * 1e6, case.backhaul_mbps * 1e6,
            case.backhaul_latency_ms * 1e-3, server_bps=case.core_mbps * 1e6, mtu=1500,
            header_bytes=HEADER_BYTES, per_node=per_node, queue_packets=case.queue_packets,
        )  # fmt: skip
    else:
        topo = Topology.star(len(case.flows), up, down, 0.0, case.core_mbps * 1e6, mtu=1500,
                             header_bytes=HEADER_BYTES, per_node=per_node,
                             queue_packets=case.queue_packets)  # fmt: skip
    env = simpy.Environment()
    # as ns-3: no restart after idle, its HyStart delay test (which only queueing can trigger)
    tcp = TcpParams(connection="duplex" if case.alternating else "per-transfer", idle_restart=False, stack="ns3")
    net = Network(env, topo, seed=seed, transport="tcp", tcp=tcp, sharing=sharing)
    per = 2 * case.rounds if case.alternating else 1
    done = [0.0] * (len(case.flows) * per)

    def client(i: int, flow: Flow):  # type: ignore[no-untyped-def]
        yield env.timeout(flow.start_s)
        for k in range(per):
            src, dst, size = (
                (f"node{i}", "server", flow.size) if k % 2 == 0 else ("server", f"node{i}", case.down_bytes)
            )
            t = yield net.send(src, dst, size)
            done[i * per + k] = t.end_s - t.start_s

    for i, flow in enumerate(case.flows):
        env.process(client(i, flow))
    env.run()
    return done


def run_ns3(cases: Sequence[ClassCase]) -> list[list[float]]:
    """Each flow's completion time (s, from its start; -1: not finished) of each case in ns-3."""
    if not ns3_available():
        raise AiotsimError("ns-3 is not installed: pip install 'aiotsim[ns3]' (the ns3 package, ns-3.44)")
    payload = json.dumps([asdict(c) for c in cases])
    cmd = [sys.executable, "-m", "aiotsim.network.calibrate_classes"]
    proc = subprocess.run(cmd, input=payload, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AiotsimError(f"the ns-3 worker failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def realisations(case: ClassCase, runs: int = REALISATIONS) -> list[ClassCase]:
    """``runs`` copies of ``case`` whose flows start up to :data:`START_JITTER_S` later, drawn
    uniformly from a generator seeded by the realisation's index (the same draws every time)."""
    out = []
    for k in range(runs):
        late = np.random.default_rng([0xCA5E, k]).uniform(0.0, START_JITTER_S, len(case.flows))
        flows = tuple(replace(f, start_s=f.start_s + float(d)) for f, d in zip(case.flows, late, strict=True))
        out.append(replace(case, flows=flows))
    return out


def compare(cases: Sequence[ClassCase], runs: int = REALISATIONS) -> list[FlowRow]:
    """ns-3 against the model under both sharings, one row per flow of every case: the mean of
    its time over ``runs`` realisations of the case (:func:`realisations`), on both sides; a flow
    ns-3 did not finish in some realisation is left out."""
    every = [r for case in cases for r in realisations(case, runs)]
    measured = run_ns3(every)
    rows = []
    for j, case in enumerate(cases):
        mine = every[j * runs : (j + 1) * runs]
        ns3 = np.array(measured[j * runs : (j + 1) * runs])  # [realisation, flow]
        fair = np.array([model_times(c, seed=k + 1) for k, c in enumerate(mine)])
        # seed k + 1 + runs * s: the first seed set is the one fair uses
        fifo = np.array([model_times(c, seed=k + 1 + runs * s, sharing="fifo")
                         for k, c in enumerate(mine) for s in range(MODEL_SEEDS)])  # fmt: skip
        for i in range(ns3.shape[1]):
            if (ns3[:, i] > 0).all():
                se = float(ns3[:, i].std(ddof=1) / math.sqrt(runs)) if runs > 1 else 0.0
                fifo_se = float(fifo[:, i].std(ddof=1) / math.sqrt(len(fifo))) if len(fifo) > 1 else 0.0
                rows.append(FlowRow(case, i, float(ns3[:, i].mean()), float(fair[:, i].mean()),
                                    float(fifo[:, i].mean()), se, fifo_se))  # fmt: skip
    return rows


@dataclass(frozen=True)
class ClassStats:
    """|error| of the flows of one class: median, 90th percentile, worst, how many, the mean
    signed error (negative: the model is too fast) and ns-3's own noise (the median standard
    error of its means, relative)."""

    klass: str
    median: float
    p90: float
    worst: float
    n: int
    bias: float
    noise: float = 0.0  # median relative standard error of ns-3's means (how exactly they are known)
    model_noise: float = 0.0  # the same of the model's means (fifo: over realisations and seeds)


def class_stats(rows: Sequence[FlowRow], sharing: str = "fair") -> list[ClassStats]:
    """:class:`ClassStats` per class, in :data:`CLASSES` order, of the model under ``sharing``."""
    out = []
    for klass in CLASSES:
        mine = [r for r in rows if r.case.klass == klass]
        errs = [r.error if sharing == "fair" else r.fifo_error for r in mine]
        if errs:
            mags = [abs(e) for e in errs]
            p90 = float(np.percentile(mags, 90))  # linear between order statistics
            noise = statistics.median(r.ns3_se / r.ns3_s for r in mine)
            model = statistics.median(r.fifo_se / r.fifo_s for r in mine) if sharing == "fifo" else 0.0
            out.append(ClassStats(klass, statistics.median(mags), p90, max(mags), len(errs), statistics.fmean(errs),
                                  noise, model))  # fmt: skip
    return out


def format_table(rows: Sequence[FlowRow]) -> str:
    """Every flow (the model under ``fair`` and ``fifo``), then the per-class summary of each."""
    width = max((len(r.case.label) for r in rows), default=4)
    models = f"{'fair s':>9} {'error':>8} {'fifo s':>9} {'error':>8}"
    lines = [f"{'class':<16} {'case':<{width}} {'flow':>4} {'ns-3 s':>9} {'± se':>7} {models}"]
    for r in rows:
        lines.append(
            f"{r.case.klass:<16} {r.case.label:<{width}} {r.flow:>4} {r.ns3_s:>9.3f} {r.ns3_se:>7.3f} "
            f"{r.model_s:>9.3f} {r.error:>+8.1%} {r.fifo_s:>9.3f} {r.fifo_error:>+8.1%}"
        )
    for sharing in ("fair", "fifo"):
        lines.append("")
        lines.append(f"sharing = {sharing}")
        head = f"{'median':>8} {'p90':>8} {'worst':>8} {'mean signed':>12} {'ns-3 se':>8} {'model se':>8}"
        lines.append(f"{'class':<16} {'flows':>5} {head}")
        for s in class_stats(rows, sharing):
            stats = f"{s.median:>8.1%} {s.p90:>8.1%} {s.worst:>8.1%} {s.bias:>+12.1%} {s.noise:>8.1%}"
            stats += f" {s.model_noise:>8.1%}"
            lines.append(f"{s.klass:<16} {s.n:>5} {stats}")
    return "\n".join(lines)


def markdown_report(rows: Sequence[FlowRow]) -> str:
    """The per-class summaries (``fair``, then ``fifo``) and every flow, as Markdown tables (the
    body of ``docs/CALIBRATION.md``)."""
    lines = []
    for sharing in ("fair", "fifo"):
        lines += [f'`sharing = "{sharing}"`:', ""]
        lines.append("| class | flows | median | 90th percentile | worst | mean signed | ns-3 se | model se |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for s in class_stats(rows, sharing):
            lines.append(
                f"| {s.klass} | {s.n} | {s.median:.1%} | {s.p90:.1%} | {s.worst:.1%} | {s.bias:+.1%} | {s.noise:.1%} "
                f"| {s.model_noise:.1%} |"
            )
        lines.append("")
    lines += ["Every flow:", "", "| class | case | transfer | ns-3 s | ± se | fair s | error | fifo s | error |"]
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lines.append(
            f"| {r.case.klass} | {r.case.label} | {r.flow} | {r.ns3_s:.3f} | {r.ns3_se:.3f} | {r.model_s:.3f} "
            f"| {r.error:+.1%} | {r.fifo_s:.3f} | {r.fifo_error:+.1%} |"
        )
    return "\n".join(lines)


NS3_SOURCE = (
    NS3_PRELUDE
    + r"""
namespace aiotsim_classes {
using namespace ns3;
using namespace aiotsim_common;

// Clients -- access links (edge_bps, latency[i]) -- [gateways -- backhauls (backhaul_bps,
// backhaul_s)] -- hub -- core link (core_bps, 0 s) -- server; drop-tail queues of `queue` packets
// on every device, no queue discs. Client i sends size[i] bytes at start[i] over a new
// connection. Returns each flow's completion time from its start (s; -1 if not finished).
std::vector<double> run_flows(std::vector<double> size, std::vector<double> latency, std::vector<double> start,
                              double edge_bps, double core_bps, int queue, std::vector<int> groups,
                              double backhaul_bps, double backhaul_s, double stop_s) {
  set_up_tcp(1);
  int n = size.size();
  NodeContainer clients; clients.Create(n);
  NodeContainer hub; hub.Create(1);
  NodeContainer server; server.Create(1);
  NodeContainer gws; gws.Create(groups.size());
  InternetStackHelper stack;
  stack.Install(clients); stack.Install(hub); stack.Install(server); stack.Install(gws);
  Ipv4Address to = link(hub.Get(0), server.Get(0), core_bps, 0.0, queue, "10.0.0.0").GetAddress(1);
  std::vector<Ptr<Node>> up(n, hub.Get(0));  // the node each client's access link ends at
  int first = 0;
  for (size_t k = 0; k < groups.size(); ++k) {
    link(gws.Get(k), hub.Get(0), backhaul_bps, backhaul_s, queue, "10.2." + std::to_string(k + 1) + ".0");
    for (int i = first; i < first + groups[k]; ++i) up[i] = gws.Get(k);
    first += groups[k];
  }
  Sink sink;
  sink.done.assign(n, -1.0); sink.got.assign(n, 0); sink.start = start;
  for (int i = 0; i < n; ++i) sink.size.push_back(uint64_t(size[i]));
  uint16_t port = 9000;
  for (int i = 0; i < n; ++i) {
    Ipv4InterfaceContainer ci = link(clients.Get(i), up[i], edge_bps, latency[i], queue,
                                     "10.1." + std::to_string(i + 1) + ".0");
    sink.which[ci.GetAddress(0).Get()] = i;
    bulk_send(clients.Get(i), to, port, uint64_t(size[i]), start[i]);
  }
  return sink_and_run(server.Get(0), port, &sink, stop_s);
}

// One client's alternation over one connection: it uploads `up` bytes; when the server has them all
// it sends `down` bytes back; when the client has them all it uploads again; `rounds` times.
// times: each transfer's duration from its start (the first upload's from the connect, so it
// includes the handshake, as in the model's first use of a connection).
struct Alternating {
  Ptr<Socket> cli, srv, sender, receiver;
  uint64_t up = 0, down = 0, left = 0, got = 0;
  size_t rounds = 0;
  double t0 = 0;
  std::vector<double> times;
  void Fill(Ptr<Socket> s, uint32_t) {
    if (s != sender) return;
    while (left > 0) {
      uint32_t n = std::min<uint64_t>(left, std::min<uint32_t>(s->GetTxAvailable(), 1448));
      if (n == 0) return;
      int sent = s->Send(Create<Packet>(n));
      if (sent <= 0) return;
      left -= sent;
    }
  }
  void Phase(Ptr<Socket> from, Ptr<Socket> to, uint64_t bytes) {
    sender = from; receiver = to; left = bytes; got = 0;
    Fill(from, 0);
  }
  void Recv(Ptr<Socket> s) {
    Ptr<Packet> p;
    while ((p = s->Recv())) if (s == receiver) got += p->GetSize();
    bool uploading = times.size() % 2 == 0;
    if (s != receiver || got < (uploading ? up : down)) return;
    times.push_back(Simulator::Now().GetSeconds() - t0);
    t0 = Simulator::Now().GetSeconds();
    if (times.size() == 2 * rounds) return;
    if (uploading) Phase(srv, cli, down); else Phase(cli, srv, up);
  }
  void Connected(Ptr<Socket> s) { Phase(cli, srv, up); }
  void Failed(Ptr<Socket> s) {}
  void Accepted(Ptr<Socket> s, const Address&) {
    srv = s;
    s->SetRecvCallback(MakeCallback(&Alternating::Recv, this));
    s->SetSendCallback(MakeCallback(&Alternating::Fill, this));
    if (receiver == nullptr) receiver = s;  // the first upload may arrive before Connected runs
  }
};

void connect_to(Ptr<Socket> s, Address to) { s->Connect(to); }

// Clients on asymmetric access links (up_bps, down_bps, latency[i]) -- hub -- core link (core_bps)
// -- server; drop-tail queues of `queue` packets. Client i connects at start[i] and alternates as
// above on port 9000 + i. Returns every transfer's time, client by client: up, down, up, ... (-1
// where not finished).
std::vector<double> run_alternating(std::vector<double> latency, std::vector<double> start, double up_bps,
                                    double down_bps, double core_bps, int queue, uint64_t up, uint64_t down,
                                    int rounds, double stop_s) {
  set_up_tcp(1);
  int n = latency.size();
  NodeContainer clients; clients.Create(n);
  NodeContainer hub; hub.Create(1);
  NodeContainer server; server.Create(1);
  InternetStackHelper stack; stack.Install(clients); stack.Install(hub); stack.Install(server);
  Ipv4Address to = link(hub.Get(0), server.Get(0), core_bps, 0.0, queue, "10.0.0.0").GetAddress(1);
  for (int i = 0; i < n; ++i) {
    NetDeviceContainer d;
    link(clients.Get(i), hub.Get(0), up_bps, latency[i], queue, "10.1." + std::to_string(i + 1) + ".0", &d);
    d.Get(1)->SetAttribute("DataRate", DataRateValue(DataRate(uint64_t(down_bps))));  // hub -> client
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();
  std::vector<Alternating*> alt;
  for (int i = 0; i < n; ++i) {
    Alternating* a = new Alternating();
    a->up = up; a->down = down; a->rounds = rounds;
    Ptr<Socket> listen = Socket::CreateSocket(server.Get(0), TcpSocketFactory::GetTypeId());
    listen->Bind(InetSocketAddress(Ipv4Address::GetAny(), 9000 + i));
    listen->Listen();
    listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                              MakeCallback(&Alternating::Accepted, a));
    a->cli = Socket::CreateSocket(clients.Get(i), TcpSocketFactory::GetTypeId());
    a->cli->Bind();
    a->cli->SetConnectCallback(MakeCallback(&Alternating::Connected, a), MakeCallback(&Alternating::Failed, a));
    a->cli->SetRecvCallback(MakeCallback(&Alternating::Recv, a));
    a->cli->SetSendCallback(MakeCallback(&Alternating::Fill, a));
    a->t0 = start[i];
    Simulator::Schedule(Seconds(start[i]), &connect_to, a->cli, Address(InetSocketAddress(to, 9000 + i)));
    alt.push_back(a);
  }
  Simulator::Stop(Seconds(stop_s));
  Simulator::Run();
  std::vector<double> out;
  for (Alternating* a : alt) {
    for (size_t k = 0; k < 2 * a->rounds; ++k) out.push_back(k < a->times.size() ? a->times[k] : -1.0);
    delete a;
  }
  Simulator::Destroy();
  return out;
}
}  // namespace aiotsim_classes
"""
)


def _worker() -> None:  # pragma: no cover - runs in the ns-3 subprocess
    """Read cases (JSON) on stdin, run each in ns-3, print every flow's completion time (JSON)."""
    import cppyy
    from ns import ns  # noqa: F401  (loads the ns-3 libraries and headers into cppyy)

    cppyy.cppdef(NS3_SOURCE)
    vec = cppyy.gbl.std.vector

    def doubles(values: Sequence[float]):  # type: ignore[no-untyped-def]
        return vec["double"]([float(v) for v in values])

    out = []
    for raw in json.loads(sys.stdin.read()):
        c = ClassCase(**{**raw, "flows": tuple(Flow(**f) for f in raw["flows"]), "groups": tuple(raw["groups"])})
        if c.alternating:
            done = cppyy.gbl.aiotsim_classes.run_alternating(
                doubles([f.latency_ms * 1e-3 for f in c.flows]), doubles([f.start_s for f in c.flows]),
                c.edge_mbps * 1e6, c.down_mbps * 1e6,
                c.core_mbps * 1e6, c.queue_packets, c.flows[0].size, c.down_bytes, c.rounds, c.stop_s,
            )  # fmt: skip
            out.append([float(t) for t in done])
            continue
        done = cppyy.gbl.aiotsim_classes.run_flows(
            doubles([f.size for f in c.flows]), doubles([f.latency_ms * 1e-3 for f in c.flows]),
            doubles([f.start_s for f in c.flows]), c.edge_mbps * 1e6, c.core_mbps * 1e6, c.queue_packets,
            vec["int"](list(c.groups)), c.backhaul_mbps * 1e6, c.backhaul_latency_ms * 1e-3, c.stop_s,
        )  # fmt: skip
        out.append([float(t) for t in done])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":  # pragma: no cover
    _worker()
