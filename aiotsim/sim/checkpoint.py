"""Checkpoints: a run's whole state at a quiescent point, so that a long run survives a crash.

A checkpoint is taken after an iteration's optimizer step and before the next dispatch, when no
node is at work: no transfer is in flight, no SimPy process is pending, every mailbox is empty.
The state then is data, not processes: the model and the optimizer, every codec state (residuals,
PowerSGD's Q, ...; each ``torch.Generator`` as its ``get_state()`` bytes), the nodes' momentum,
data-stream positions and generators, availability RNGs and energy meters, the network's jitter RNG,
per-link byte counts, TCP windows and the generator of sampled (Gilbert-Elliott) losses, the totals
and the open metrics window, the trace so far, the model version, the simulated clock, the applied
step whose metrics row is still to be written, and the strategy's own state (a federated run's
selection generator, server optimizer and row's samples).

Resuming (:func:`restore`) rebuilds the cluster from its scenario, loads that state, starts a fresh
``simpy.Environment(initial_time=now)`` and lets the strategy continue from the pending row: the
rows, evaluations and summary then equal an uninterrupted run's, byte for byte (flops mode).

Which runs checkpoint: ``sync``, ``partial`` and ``federated`` rounds, on a star or with gateways,
exactly. A checkpoint falls due ``every`` iterations after the previous one and is written at the
first quiescent point from then on. Every ``sync`` iteration ends at one. A ``partial`` iteration
ends at one only when no straggler is still at work: with ``partial_k`` covering every node at
work it always does; with fewer, late nodes are put straight back to work and a run may never
reach one, and then writes no checkpoint (nothing approximate is ever written). A ``federated``
round ends at one unless a node of it is still at work (a round closed by its deadline or by
over-commitment; its answer, even one waiting to be filed, keeps it busy). Of a
federated fleet only the nodes built so far are kept (by index), so a checkpoint grows with the
nodes that took part, not with the fleet. ``async`` runs (a node is always in flight) and
``ring`` runs are refused with a :class:`~aiotsim.errors.ConfigError`.

The file is ``checkpoint.pt``: tensors and plain data only, behind a header with a format version
and a sha256 digest, read with ``torch.load(weights_only=True)`` (see
:mod:`aiotsim.sim.checkpoint_file`): a crafted file cannot run code and a damaged one is refused.
Before a resume, :mod:`aiotsim.sim.checkpoint_check` checks a loaded state against the freshly
built cluster (keys, iteration range, clock, tensor shapes, finite values): what does not fit is a
:class:`~aiotsim.errors.ResultsError` (exit 2) naming it, never a crash or a wrong run.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aiotsim.compress.base import CodecState
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.sim.accounting import Totals, Window
from aiotsim.sim.checkpoint_check import check_keys, check_state
from aiotsim.sim.checkpoint_file import FORMAT_VERSION, RERUN, load, save
from aiotsim.sim.learning import LocalState
from aiotsim.sim.world import Applied, Cluster, NodeState, Upload

CHECKPOINT_NAME = "checkpoint.pt"
RESUMABLE_MODES = ("sync", "partial", "federated")
_METER_FIELDS = ("compute_j", "tx_j", "rx_j", "idle_j", "busy_s", "log")


def check_resumable(cluster: Cluster) -> None:
    """Raise :class:`ConfigError` unless the cluster's strategy has quiescent points."""
    sc = cluster.sc
    name = "ring" if sc.network.topology == "ring" else sc.training.mode  # as strategies.strategy_name
    if name not in RESUMABLE_MODES:
        raise ConfigError(
            f"checkpoints need a quiescent point between iterations; strategy {name!r} has none "
            f"(nodes are always in flight). Checkpointing supports: {', '.join(RESUMABLE_MODES)}"
        )
    if sc.network.engine == "ns3":
        raise ConfigError(
            "runs on network.engine = 'ns3' do not checkpoint: TCP's connections live in ns-3, which cannot save "
            "them; run without --checkpoint-every, or on engine = 'flow'"
        )


def attach(cluster: Cluster, path: str | Path, every: int) -> None:
    """Make ``cluster`` write a checkpoint to ``path`` every ``every`` iterations (0: never).

    Raises :class:`ConfigError` for a negative ``every`` or a strategy that cannot checkpoint.
    """
    if every < 0:
        raise ConfigError(f"checkpoint_every(={every}) must be >= 0")
    if every == 0:
        return
    check_resumable(cluster)
    cluster.on_checkpoint = Checkpointer(cluster, Path(path), every)


class Checkpointer:
    """Writes ``cluster``'s checkpoint to ``path`` once ``every`` iterations have completed since
    the last one (or the run's start), at the first quiescent point from then on."""

    def __init__(self, cluster: Cluster, path: Path, every: int) -> None:
        self.cluster, self.path, self.every = cluster, path, every
        resumed = cluster.resume_point
        self.last = resumed[0] + 1 if resumed else 0  # iterations done at the latest checkpoint

    def __call__(self, it: int, done: Applied, strategy: dict[str, Any]) -> None:
        if it + 1 - self.last >= self.every:
            save(self.path, capture(self.cluster, it, done, strategy))
            self.last = it + 1


def quiescent_point(
    c: Cluster, it: int, done: Applied, strategy_state: Callable[[], dict[str, Any]] | None = None
) -> None:
    """A strategy's call after iteration ``it``'s step and before its next dispatch: hand the point
    to the checkpointer when the run goes on after it and no node is at work (nothing in flight).
    ``strategy_state()``: the strategy's own state, read only when a checkpoint is taken."""
    if c.on_checkpoint is not None and it + 1 < c.sc.scenario.iterations:
        if not any(st.busy for st in c.nodes):
            c.on_checkpoint(it, done, strategy_state() if strategy_state is not None else {})


# ---- capture -----------------------------------------------------------------------------------
def capture(c: Cluster, it: int, done: Applied, strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a resumed run needs, after iteration ``it``'s step (``done``, row not yet
    written); ``strategy``: the strategy's own state (plain data and CPU tensors)."""
    learning = c.learning
    return {
        "format": FORMAT_VERSION,
        "scenario": c.sc.to_toml(),  # the resumed cluster must be built from the same one
        "model_name": c.model_name,
        "dataset_name": c.dataset_name,
        "iteration": it,
        "now": c.env.now,  # simulated clock, s
        "version": c.version,
        "update_bytes": c.update_bytes,
        "last_row_s": c.last_row_s,
        "last_activity_s": c.last_activity_s,
        "model": dict(learning.model.state_dict()),
        "optimizer": learning.optimizer.state_dict(),
        "server_states": [_codec_state(x) for x in learning.server_states],
        "gateway_states": {gw: [_codec_state(x) for x in xs] for gw, xs in c.gateway_states.items()},
        "snapshots": dict(c.snapshots),
        "nodes": [_node(st) for st in c.nodes],  # the nodes built so far (all but in a federated fleet)
        "node_index": c.nodes.built_indices(),
        "net_rng": c.net._rng.bit_generator.state,
        "net_carried": c.net._carried,  # wire bytes per link (numpy: copied when saved)
        "net_tcp": c.net.tcp_state(),  # TCP connections' windows, loss generator
        "net_slots": c.net.slot_state(),  # free-slot order: ties between flows finish in slot order
        "net_loss": c.net.loss_state(),  # Gilbert-Elliott sampling generator and presampled losses
        "totals": dataclasses.asdict(c.totals),
        "window": dataclasses.asdict(c.window),
        "trace": c.trace.state(),
        "applied": _applied(done),
        "strategy": strategy or {},
        "tape": c.tape.state(),  # the timing record so far (a resumed run's is whole)
    }


def _codec_state(state: CodecState) -> dict[str, Any]:
    """A codec state's fields as plain data: a ``torch.Generator`` as its ``get_state()`` bytes,
    a named tuple (PGC's statistics) as a tuple (rebuilt from the field's declared type)."""
    out = {}
    for f in dataclasses.fields(state):
        v = getattr(state, f.name)
        out[f.name] = v.get_state() if isinstance(v, torch.Generator) else tuple(v) if _is_named_tuple(v) else v
    return out


def _is_named_tuple(v: Any) -> bool:
    return isinstance(v, tuple) and hasattr(v, "_fields")


def _node(st: NodeState) -> dict[str, Any]:
    local, stream = st.local, st.local.stream
    return {
        "codec": [_codec_state(x) for x in local.states],
        "velocity": local.velocity,
        "stream": stream.state_dict(),
        "rng": st.rng.bit_generator.state,
        "energy": {k: getattr(st.energy, k) for k in _METER_FIELDS},
        "held_version": st.held_version,
        "dispatched_version": st.dispatched_version,
        "busy": st.busy,
        "online": st.online,
    }


def _applied(done: Applied) -> dict[str, Any]:
    """The applied step without its payloads (its metrics row needs only the numbers)."""
    ups = [{f.name: getattr(u, f.name) for f in dataclasses.fields(u) if f.name != "payloads"} for u in done.uploads]
    return {
        "iteration": done.iteration,
        "decode_s": done.decode_s,
        "agg_nnz": done.agg_nnz,
        "agg_bytes": done.agg_bytes,
        "uploads": ups,
    }


# ---- restore -----------------------------------------------------------------------------------
def restore(c: Cluster, state: dict[str, Any]) -> None:
    """Load a checkpoint into a freshly built ``c``: its clock restarts at the checkpoint's time
    and its strategy continues with the pending metrics row of the checkpoint's iteration.

    Raises :class:`ConfigError` for a checkpoint of another scenario, model or data set, and
    :class:`~aiotsim.errors.ResultsError` for one that does not fit the cluster (see
    :func:`~aiotsim.sim.checkpoint_check.check_state`)."""
    check_resumable(c)
    check_keys(state)
    if state["scenario"] != c.sc.to_toml():
        raise ConfigError("the checkpoint was written by a run of another scenario than this cluster's")
    ran = (state["model_name"], state["dataset_name"])
    if ran != (c.model_name, c.dataset_name):
        raise ConfigError(
            f"the checkpoint's run trained model {ran[0]!r} on data set {ran[1]!r}, this cluster has "
            f"{c.model_name!r} on {c.dataset_name!r}: resume with the model and data set the run started with"
        )
    try:
        check_state(c, state)  # problems found: a ResultsError listing them; a value of another type may raise
        _load(c, state)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as exc:
        raise ResultsError(f"the checkpoint does not fit this run ({type(exc).__name__}: {exc}); {RERUN}") from None


def _load(c: Cluster, state: dict[str, Any]) -> None:
    """Set ``c``'s state from a checked checkpoint."""
    learning, dev = c.learning, c.device
    learning.model.load_state_dict(state["model"])
    learning.optimizer.load_state_dict(state["optimizer"])  # moves its state to the params' device
    _load_codec_states(learning.server_states, state["server_states"], dev)
    for gw, saved in state["gateway_states"].items():
        _load_codec_states(c.gateway_states[gw], saved, dev)
    c.snapshots = {int(v): [p.to(dev) for p in ps] for v, ps in state["snapshots"].items()}
    for i, saved in zip(state["node_index"], state["nodes"], strict=True):
        _load_node(c.nodes[i], saved, dev)  # builds a federated fleet's node first
    c.start_clock(state["now"])
    c.net._rng.bit_generator.state = state["net_rng"]
    c.net._carried[:] = state["net_carried"]
    c.net.restore_tcp_state(state["net_tcp"])
    c.net.restore_slot_state(state["net_slots"])
    c.net.restore_loss_state(state["net_loss"])
    c.totals = Totals(**state["totals"])
    c.window = Window(**state["window"])
    c.trace.load_state(state["trace"])
    c.version = state["version"]
    c.update_bytes = state["update_bytes"]
    c.last_row_s = state["last_row_s"]
    c.last_activity_s = state["last_activity_s"]
    a = state["applied"]
    uploads = [Upload(payloads=[], **u) for u in a["uploads"]]
    c.resume_point = (state["iteration"], Applied(a["iteration"], uploads, a["decode_s"], a["agg_nnz"], a["agg_bytes"]))
    c.resume_strategy = state["strategy"]
    c.tape.restore(state["tape"])


def _to(obj: Any, device: torch.device) -> Any:
    """``obj`` with every tensor (also in lists and tuples) moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, list | tuple):
        return type(obj)(_to(v, device) for v in obj)
    return obj


def _load_codec_states(states: list[CodecState], saved: list[dict[str, Any]], device: torch.device) -> None:
    for state, fields in zip(states, saved, strict=True):
        hints = typing.get_type_hints(type(state))
        for name, v in fields.items():
            current = getattr(state, name)
            if isinstance(current, torch.Generator):
                current.set_state(v)
            elif isinstance(v, tuple) and (cls := _named_tuple_type(hints[name])) is not None:
                setattr(state, name, cls(*v))
            else:
                setattr(state, name, _to(v, device))


def _named_tuple_type(hint: Any) -> type | None:
    """The named tuple class among a field's declared types (``PGCThreshold | None``), if any."""
    for t in typing.get_args(hint) or (hint,):
        if isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields"):
            return t
    return None


def _load_node(st: NodeState, saved: dict[str, Any], device: torch.device) -> None:
    local: LocalState = st.local
    _load_codec_states(local.states, saved["codec"], device)
    local.velocity = _to(saved["velocity"], device)
    local.stream.load_state_dict(saved["stream"])
    st.rng.bit_generator.state = saved["rng"]
    for k in _METER_FIELDS:
        setattr(st.energy, k, saved["energy"][k])
    st.held_version = saved["held_version"]
    st.dispatched_version = saved["dispatched_version"]
    st.busy = saved["busy"]
    st.online = saved["online"]


__all__ = [
    "CHECKPOINT_NAME",
    "RESUMABLE_MODES",
    "check_resumable",
    "attach",
    "Checkpointer",
    "quiescent_point",
    "save",
    "load",
    "capture",
    "restore",
]
