"""Checks across a scenario's sections: what one key allows depends on others (a transport and its
loss, a topology and its traces, a mode and its selection, a codec and the ring or the downlink).

:func:`cross_checks` is called by :func:`aiotsim.config.scenario_from_dict` once every section is
valid on its own, and returns every problem at once, one line each. Like :mod:`aiotsim.config`, it
imports nothing of ``aiotsim.sim`` (the registries and readers it needs are imported where used, so
importing the configuration stays cheap).
"""

from __future__ import annotations

import math
from typing import Any

from aiotsim.errors import ConfigError

# An aiotsim.config.Scenario: not imported, since config imports this module (the package has no
# import cycles, type-only ones included).
Scenario = Any

# The most packet loss with transport = 'tcp': the TCP model simulates each transmission round (one
# event, ~90 us measured on a shared 2-core CPU), and a packet takes 1/(1 - loss) transmissions on
# average: at 0.99, 100 (tests/tiny.toml: +1 s of wall time per iteration), at 0.999999 a million
# (a run of hours for 3 iterations). 'ideal' charges a Bernoulli loss as an expected cost and takes
# any loss < 1; a Gilbert-Elliott chain samples every transmission with either transport (150
# packets at a mean loss of 0.99999: 2 s for one transfer), so its mean loss is bounded too.
MAX_TCP_LOSS = 0.99


def cross_checks(s: Scenario) -> list[str]:
    """Problems that involve more than one key."""
    return [
        *_network_problems(s),
        *_training_problems(s),
        *_topology_problems(s),
        *_codec_downlink_problems(s),
        *_data_file_problems(s),
        *_trace_problems(s),
        *_tcp_loss_problems(s),
        *_timeline_problems(s),
        *engine_problems(s),
    ]


def trace_paths(s: Scenario) -> list[tuple[str, str]]:
    """``(key, path)`` of every trace file the scenario names."""
    nw = s.network
    out = [(f"network.{k}", getattr(nw, k)) for k in ("uplink_trace", "downlink_trace") if getattr(nw, k)]
    for k, g in enumerate(s.nodes.group):
        out += [(f"nodes.group[{k}].{key}", getattr(g, key)) for key in ("uplink_trace", "downlink_trace")
                if getattr(g, key)]  # fmt: skip
    out += [(f"network.link[{k}].trace", link.trace) for k, link in enumerate(nw.link) if link.trace]
    return out


def _trace_problems(s: Scenario) -> list[str]:
    """Trace files that cannot be read, traces where the topology cannot use them, loss keys
    that a Gilbert-Elliott model would silently override."""
    from aiotsim.network.traces import MS, load_trace

    out = []
    for key, path in trace_paths(s):
        try:  # as the run loads it: averaged over trace_resolution_ms's windows (their count is bounded)
            load_trace(path, s.network.trace_resolution_ms * MS)
        except ConfigError as exc:
            out.extend(f"{key}: {p}" for p in exc.problems)
    nw = s.network
    node_traces = [key for key, _ in trace_paths(s) if not key.startswith("network.link")]
    if node_traces and nw.topology in ("shared-medium", "custom"):
        out.append(
            f"{node_traces[0]}: node link traces need topology = 'star', 'hierarchical' or 'ring' (got "
            f"{nw.topology!r}); a custom topology takes a trace per [[network.link]]"
        )
    if nw.topology == "ring" and any(key.endswith("downlink_trace") for key in node_traces):
        out.append("downlink_trace: a ring's links take the sending node's uplink_trace; remove downlink_trace")
    if nw.loss_model == "gilbert-elliott":
        out.extend(
            f"{key}: loss_model = 'gilbert-elliott' takes its loss from the ge_* keys; set {key.split('.')[-1]} = 0"
            for key, v in loss_keys(s)
            if v
        )
    return out


def loss_keys(s: Scenario) -> list[tuple[str, float | None]]:
    """``(key, value)`` of every packet loss key: the network's, each group's, each custom link's."""
    nw = s.network
    losses = [("network.loss", nw.loss)] + [(f"nodes.group[{k}].loss", g.loss) for k, g in enumerate(s.nodes.group)]
    return losses + [(f"network.link[{k}].loss", link.loss) for k, link in enumerate(nw.link)]


def _tcp_loss_problems(s: Scenario) -> list[str]:
    """Losses over :data:`MAX_TCP_LOSS`: with ``transport = 'tcp'`` (the TCP model simulates every
    transmission round), and a Gilbert-Elliott chain's mean loss with either transport (every
    transmission is sampled); a packet takes 1/(1 - loss) transmissions on average."""
    from aiotsim.network.traces import GilbertElliott

    nw = s.network
    fix = (f"use a loss <= {MAX_TCP_LOSS:g}: each packet takes 1/(1 - loss) transmissions, each simulated "
           "(0.999999 is a million per packet, hours of wall time)")  # fmt: skip
    out = [f"{key}: {v!r} is over {MAX_TCP_LOSS:g} with transport = 'tcp'; {fix}, or transport = 'ideal' "
           "(loss as an expected cost)"
           for key, v in loss_keys(s) if nw.transport == "tcp" and v is not None and v > MAX_TCP_LOSS]  # fmt: skip
    if nw.loss_model == "gilbert-elliott":
        try:
            mean = GilbertElliott(nw.ge_p_good_bad, nw.ge_p_bad_good, nw.ge_loss_good, nw.ge_loss_bad).mean_loss
        except ConfigError:  # out-of-range ge_* keys: reported by their own checks
            return out
        if mean > MAX_TCP_LOSS:
            out.append(f"network.ge_loss_bad: the Gilbert-Elliott chain loses {mean:.6g} of the packets on "
                       f"average, over {MAX_TCP_LOSS:g}; {fix} (lower ge_loss_bad or ge_p_good_bad, raise "
                       "ge_p_bad_good)")  # fmt: skip
    return out


def _timeline_problems(s: Scenario) -> list[str]:
    """``scenario.trace_nodes`` as a list: every index names a node of the fleet."""
    listed, n = s.scenario.trace_nodes, s.nodes.count
    if isinstance(listed, int) or all(i < n for i in listed):
        return []
    bad = next(i for i in listed if i >= n)
    return [f"scenario.trace_nodes: node {bad} is not in the fleet of {n} nodes (nodes.count); list indices 0..{n - 1}"]


def _data_file_problems(s: Scenario) -> list[str]:
    """``[data]``: path, download and by-writer only where the data set can use them."""
    from aiotsim.learn.data.files import DOWNLOADABLE, FILE_DATASETS

    d, out = s.data, []
    if d.path and d.dataset not in FILE_DATASETS:
        out.append(f"data.path: dataset {d.dataset!r} reads no files; file data sets: {', '.join(FILE_DATASETS)}")
    if d.download and d.dataset not in DOWNLOADABLE:
        out.append(f"data.download: dataset {d.dataset!r} has no download; downloadable: {', '.join(DOWNLOADABLE)}")
    if d.partition == "by-writer" and d.dataset != "femnist":
        out.append(f"data.partition: 'by-writer' needs per-writer data (dataset 'femnist'), got {d.dataset!r}")
    return out


def _network_problems(s: Scenario) -> list[str]:
    out = []
    if s.network.header_bytes >= s.network.mtu:
        out.append(f"network.header_bytes: must be < network.mtu (={s.network.mtu}), got {s.network.header_bytes}")
    for k, link in enumerate(s.network.link):
        if link.header_bytes >= link.mtu:
            out.append(f"network.link[{k}].header_bytes: must be < its mtu (={link.mtu}), got {link.header_bytes}")
    return out


def engine_problems(s: Scenario) -> list[str]:
    """What ``network.engine = 'ns3'`` cannot run (each with its fix); nothing for the flow engine.
    :func:`aiotsim.network.ns3_spec.world_spec` checks the built topology again."""
    nw = s.network
    if nw.engine != "ns3":
        return []
    import importlib.util

    flow = "or engine = 'flow'"
    out = []
    if importlib.util.find_spec("ns") is None or importlib.util.find_spec("cppyy") is None:
        out.append(f"network.engine: 'ns3' needs ns-3's Python bindings: pip install 'aiotsim[ns3]' (ns-3.44), {flow}")
    if nw.transport != "tcp":
        out.append(f"network.transport: {nw.transport!r} has no packet-level counterpart; ns-3 runs TCP: "
                   "set transport = 'tcp'")  # fmt: skip
    jitter = [("network.jitter_ms", nw.jitter_ms)]
    jitter += [(f"nodes.group[{k}].jitter_ms", g.jitter_ms) for k, g in enumerate(s.nodes.group)]
    jitter += [(f"network.link[{k}].jitter_ms", link.jitter_ms) for k, link in enumerate(nw.link)]
    out += [f"{key}: jitter has no ns-3 counterpart (a point-to-point channel has one fixed delay): set it to 0, "
            f"{flow}" for key, v in jitter if v]  # fmt: skip
    out += [f"{key}: bandwidth traces are not supported by the ns-3 engine yet: a constant rate, {flow}"
            for key, _ in trace_paths(s)]  # fmt: skip
    if nw.loss_model != "bernoulli":
        out.append(f"network.loss_model: {nw.loss_model!r} is not supported by the ns-3 engine: 'bernoulli', {flow}")
    both = f"the ns-3 engine needs both directions of a link (TCP's ACKs ride the reverse link): drop it, {flow}"
    out += [f"network.link[{k}].directed: {both}" for k, link in enumerate(nw.link) if link.directed]
    radios = {g.radio or s.nodes.radio for g in s.nodes.group} if s.nodes.group else {s.nodes.radio}
    for radio, cell in (("4g", "LTE cell"), ("802.15.4", "802.15.4 PAN")):
        if radio in radios and (nw.topology != "star" or radios != {radio}):
            out.append(f"nodes.radio: the ns-3 engine runs radio {radio!r} as one {cell}, for a star whose nodes are "
                       f"all on it (here: {nw.topology}, radios {', '.join(sorted(radios))}); {flow}")  # fmt: skip
    if nw.wifi_positions and len(nw.wifi_positions) != s.nodes.count:
        out.append(f"network.wifi_positions: {len(nw.wifi_positions)} positions for {s.nodes.count} nodes: give "
                   "one [x, y] per node, or [] for seeded ones")  # fmt: skip
    if nw.topology == "shared-medium" and nw.loss > 0:
        out.append("network.loss: the ns-3 engine's Wi-Fi cell loses what its channel loses (distance, collisions): "
                   f"set it to 0, {flow}")  # fmt: skip
    return out


def _training_problems(s: Scenario) -> list[str]:
    out = []
    if s.training.momentum_at == "nodes" and s.training.optimizer != "sgd":
        out.append(
            "training.momentum_at: 'nodes' applies SGD momentum on the nodes; "
            f"use optimizer = 'sgd', got {s.training.optimizer!r}"
        )
    n = s.nodes.count
    if s.training.mode == "partial" and s.training.partial_k > n:
        out.append(
            f"training.partial_k: must be in 1..nodes.count (={n}) for mode = 'partial' "
            f"(0 = half the nodes), got {s.training.partial_k}"
        )
    out.extend(_federated_problems(s))
    if s.nodes.straggler_mode == "transient" and s.nodes.straggler_kind != "compute":
        out.append(
            "nodes.straggler_kind: transient stragglers slow compute only; use straggler_kind = 'compute' "
            "or straggler_mode = 'fixed'"
        )
    return out


def per_round_count(s: Scenario) -> int:
    """Nodes a federated round wants (``nodes.per_round`` as a count, a fraction of the fleet
    rounded up, or the whole fleet when 0)."""
    k, n = s.nodes.per_round, s.nodes.count
    if k == 0:
        return n
    return math.ceil(k * n) if k < 1 else int(k)


def _federated_problems(s: Scenario) -> list[str]:
    """Options that only mean something in federated mode, and its limits."""
    t, nd, out = s.training, s.nodes, []
    if t.mode != "federated":
        if nd.availability_trace:
            out.append("nodes.availability_trace: availability traces drive federated rounds; use "
                       f"training.mode = 'federated' or the dropout_prob chain, got mode {t.mode!r}")  # fmt: skip
        return out
    k = nd.per_round
    if k >= 1 and k != int(k):
        out.append(f"nodes.per_round: a count must be whole (or a fraction < 1 of the fleet), got {k:g}")
    elif k > nd.count:
        out.append(f"nodes.per_round: must be at most nodes.count (={nd.count}); lower per_round or "
                   f"give a fraction < 1, got {k:g}")  # fmt: skip
    if s.network.topology not in ("star", "shared-medium"):
        out.append("training.mode: federated rounds upload straight to the server; use network.topology = "
                   f"'star' or 'shared-medium', got {s.network.topology!r}")  # fmt: skip
    if s.compressor.downlink != "model":
        out.append("compressor.downlink: a federated node downloads the current global model; use "
                   f"downlink = 'model', got {s.compressor.downlink!r}")  # fmt: skip
    return out


def _topology_problems(s: Scenario) -> list[str]:
    out = []
    n, topo, mode = s.nodes.count, s.network.topology, s.training.mode
    if topo == "ring":
        if n < 2:
            out.append(f"nodes.count: a ring needs at least 2 nodes, got {n}")
        if mode != "sync":
            out.append(f"training.mode: ring all-reduce is synchronous; use mode = 'sync', got {mode!r}")
        if s.nodes.dropout_prob > 0:
            out.append("nodes.dropout_prob: a ring all-reduce needs every node; use 0 with topology = 'ring'")
        out.extend(_ring_codec_problems(s.compressor.name))
    if topo == "hierarchical":
        if s.network.gateways > n:
            out.append(f"network.gateways: must be <= nodes.count (={n}), got {s.network.gateways}")
        if mode != "sync":
            out.append(f"training.mode: hierarchical aggregation is synchronous; use mode = 'sync', got {mode!r}")
    if topo == "custom" and not s.network.link:
        out.append("network.link: topology = 'custom' needs [[network.link]] blocks (from, to, mbps, latency_ms)")
    if topo != "custom" and (s.network.link or s.network.vertex):
        out.append(f"network.link: [[network.link]]/[[network.vertex]] blocks need topology = 'custom', got {topo!r}")
    return out


def group_problems(s: Scenario) -> list[str]:
    """The groups' node counts must add up to ``nodes.count``."""
    groups = s.nodes.group
    total = sum(g.count for g in groups)
    if groups and total != s.nodes.count:
        return [f"nodes.count: must equal the sum of the groups' counts (={total}), got {s.nodes.count}"]
    return []


def _codec_downlink_problems(s: Scenario) -> list[str]:
    """A compressed downlink re-encodes the aggregate with the codec: a codec that applies
    momentum itself (DGC) would apply it a second time there."""
    from aiotsim.compress.registry import get_codec_class, is_codec

    name = s.compressor.name
    if s.compressor.downlink == "compressed" and is_codec(name) and get_codec_class(name).absorbs_momentum:
        return [
            f"compressor.downlink: 'compressed' would re-apply {name}'s momentum correction at the "
            "server; use downlink = 'union' or 'model'"
        ]
    return []


def _ring_codec_problems(name: str) -> list[str]:
    from aiotsim.compress.registry import codec_names, get_codec_class, is_codec

    if not is_codec(name):  # an unknown name or a plugin that does not load: reported already
        return []
    if get_codec_class(name).supports_ring():
        return []
    ok = [c for c in codec_names() if get_codec_class(c).supports_ring()]
    return [
        f"compressor.name: {name!r} cannot be summed hop by hop in a ring all-reduce; codecs that can: {', '.join(ok)}"
    ]
