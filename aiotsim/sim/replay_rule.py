"""When a run's timing may be replayed under other settings: the one rule, written once.

A replay (:mod:`aiotsim.replaying`) re-runs a run's order of events and its network with new
settings, taking every learning value (losses, payload sizes, evaluations, compute and codec
costs) from the run's timing record. That is exact only when the new settings cannot change what
is learned. What is learned is a function of:

* the learning configuration: ``[data]``, ``[model]``, ``[training]``, ``[compressor]``, the seed,
  the iterations and who the nodes are (everything in ``[nodes]`` but the device profiles and the
  radio, which only price the work: a straggler or drop-out setting moves the seeded draws that
  decide who takes part);
* the aggregation tree: which aggregator each node and gateway reports to (``network.topology``,
  ``network.gateways``, ``network.gateway_mode``, a custom topology's vertices and links), since a
  gateway re-encodes what it forwards with residuals of its own;
* a strategy whose participants and update order do not depend on time: synchronous rounds (any
  tree), the ring, and federated rounds with a fixed selection (no deadline, no overcommit, no
  availability trace). ``async`` and ``partial`` take whatever has arrived, so the network decides
  what is learned: never replayed.

Within a synchronous aggregation the arrival order does not matter either: the stacked form
combines the uploads in node order (:meth:`aiotsim.sim.aggregate.Aggregation.add`). The streamed
form adds in arrival order (float64 sums that keep no messages), so a replay of a streamed run
checks, aggregation by aggregation, that the uploads arrive in the recorded order, and stops with
a clear message where they do not (:class:`~aiotsim.sim.tape.Tape`).

Everything else (every other ``[network]`` key: rates, latencies, loss, jitter, traces, transport,
TCP, drop-tail buffers (``*queue_packets``) and how flows share a bottleneck (``sharing``);
``[energy]``; ``nodes.device``, ``nodes.server_device``, ``nodes.gateway_device``,
``nodes.radio``; ``scenario.name``, ``scenario.trace_nodes``) changes only the clock and the
energy, and may be replayed; so may the devices, radio, links (their buffers included) and
slowdown of a ``[[nodes.group]]`` (its size, name and data share decide what is learned).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiotsim.config import Scenario

# keys that change only time and energy (a prefix ending in "." takes a whole section)
TIMING_KEYS = (
    "network.",
    "energy.",
    "nodes.device",
    "nodes.server_device",
    "nodes.gateway_device",
    "nodes.radio",
    "scenario.name",
    "scenario.trace_nodes",
)
# fields of a [[nodes.group]] that price the work or the links only (the group's size, name and
# data share decide what is learned)
GROUP_TIMING_FIELDS = frozenset(
    "device radio uplink_mbps downlink_mbps latency_ms loss jitter_ms slowdown uplink_trace downlink_trace "
    "trace_offset_s queue_packets".split()
)
# network keys that shape the aggregation tree: part of the learning configuration
# (a custom topology's vertices and links decide its tree too: compared as the tree itself, since
# a link's rate may change freely)
TREE_KEYS = ("network.topology", "network.gateways", "network.gateway_mode")

_WHY = {
    "scenario.seed": "it seeds the data, the model, the codecs and the network",
    "scenario.iterations": "it changes how long the model learns",
    "network.topology": "it changes the aggregation tree (who aggregates whose gradients)",
    "network.gateways": "it changes which gateway aggregates (and re-encodes) whose gradients",
    "network.gateway_mode": "it changes what a gateway forwards (re-encoded or dense)",
    "nodes.group": "it changes a group's size, name or data share (its devices, radio, links and slowdown may change)",
    "nodes.": "it changes who takes part or what the nodes compute (seeded draws of drop-outs and stragglers included)",
    "training.": "it changes the learning itself",
    "compressor.": "it changes the codec, so the bytes and what is learned",
    "data.": "it changes the data the nodes learn from",
    "model.": "it changes the model",
}


def flat_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A scenario dict as ``{"section.key": value}`` (a list of blocks is one value)."""
    return {f"{section}.{key}": value for section, table in data.items() for key, value in table.items()}


def learning_items(s: Scenario) -> dict[str, Any]:
    """The keys of ``s`` that decide what is learned, ``{"section.key": value}``: every key but the
    timing keys, with each ``[[nodes.group]]`` block stripped of its timing fields."""
    out = {k: v for k, v in flat_keys(s.to_dict()).items() if not is_timing_key(k)}
    out["nodes.group"] = [{k: v for k, v in g.items() if k not in GROUP_TIMING_FIELDS} for g in out["nodes.group"]]
    return out


def is_timing_key(key: str) -> bool:
    """True when ``key`` (``"section.key"``) changes only the clock and the energy."""
    if key in TREE_KEYS:
        return False
    return any(key.startswith(p) if p.endswith(".") else key == p for p in TIMING_KEYS)


def time_dependence(s: Scenario) -> str | None:
    """Why ``s``'s learning depends on when messages arrive (so it is never replayed), or None."""
    t, nd = s.training, s.nodes
    if s.network.topology == "ring":
        return None
    if t.mode in ("async", "partial"):
        return f"training.mode = {t.mode!r} learns from whatever has arrived, so the network decides what is learned"
    if t.mode == "federated":
        if t.round_deadline_s > 0:
            return "training.round_deadline_s > 0: a deadline drops (or defers) the uploads that arrive late"
        if nd.overcommit > 0:
            return "nodes.overcommit > 0: a round takes the first uploads to arrive"
        if nd.availability_trace:
            return "nodes.availability_trace: who is online depends on the simulated time"
    return None


def aggregation_tree(s: Scenario) -> list[list[str]]:
    """``[vertex, aggregator]`` pairs of every node and gateway, sorted (ring: empty, every node
    is a peer)."""
    from aiotsim.sim.topologies import build_topology, node_layout, node_name

    if s.network.topology == "ring":
        return []
    topo = build_topology(s, node_layout(s))
    vertices = [node_name(i) for i in range(s.nodes.count)] + list(topo.gateways)
    return sorted([v, topo.aggregator_of(v)] for v in vertices)


def learning_key(s: Scenario) -> str | None:
    """A digest of everything that decides what ``s`` learns, or None when its learning depends on
    the network (:func:`time_dependence`). Two scenarios with equal keys learn exactly the same
    thing: a run of one can be replayed as the other."""
    if time_dependence(s) is not None:
        return None
    kept: dict[str, Any] = learning_items(s)
    kept["aggregation_tree"] = aggregation_tree(s)
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _why(key: str) -> str:
    for prefix, why in _WHY.items():
        if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
            return why
    return "it changes what is learned"


def replay_problem(recorded: Scenario, new: Scenario) -> str | None:
    """Why ``recorded``'s run cannot be replayed as ``new`` (naming the key and the reason), or
    None when the replay is exact."""
    dep = time_dependence(recorded)
    if dep is not None:
        return f"the recorded run cannot be replayed: {dep}; run the scenario in full instead"
    old, now = learning_items(recorded), learning_items(new)
    changed = [k for k in sorted(set(old) | set(now)) if old.get(k) != now.get(k)]
    if not changed:
        dep = time_dependence(new)
        if dep is not None:  # not reachable by timing keys today; kept as the rule's own check
            return f"the new settings cannot be replayed: {dep}"
        if aggregation_tree(recorded) != aggregation_tree(new):
            return (
                "network.vertex/network.link: the new settings change the custom topology's aggregation "
                "tree (who aggregates whose gradients); run the scenario in full (aiotsim run)"
            )
        return None
    key = changed[0]
    more = f" (and {', '.join(changed[1:])})" if len(changed) > 1 else ""
    return (
        f"{key}{more} cannot be replayed: {_why(key)}. A replay changes only what moves the clock (link "
        f"rates, latencies, loss, traces, buffers, transport, energy, device profiles); run the scenario with "
        f"this setting in full (aiotsim run)"
    )


__all__ = [
    "TIMING_KEYS",
    "TREE_KEYS",
    "flat_keys",
    "is_timing_key",
    "time_dependence",
    "aggregation_tree",
    "learning_key",
    "learning_items",
    "GROUP_TIMING_FIELDS",
    "replay_problem",
]
