"""Checks of a loaded checkpoint against the freshly built cluster it is to be resumed into.

The file's digest (:mod:`aiotsim.sim.checkpoint_file`) catches damage; these checks catch a file
that is well formed but does not fit the run: missing or unknown keys, an iteration outside the
run, a clock that is not a finite time, tensors of another shape or dtype than the model's,
optimizer's and codecs', non-finite model or optimizer values, nodes that do not exist. Each
problem found is one line of the :class:`~aiotsim.errors.ResultsError` raised (exit 2).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

import numpy as np
import torch

from aiotsim.errors import ResultsError
from aiotsim.network.tcp import Connection
from aiotsim.sim.accounting import Totals, Window
from aiotsim.sim.checkpoint_file import FORMAT_VERSION, RERUN
from aiotsim.sim.checkpoint_types import Rules, bit_generator, record, typed
from aiotsim.sim.tape import state_problems
from aiotsim.sim.world import Cluster, Upload

KEYS = frozenset(
    "format scenario model_name dataset_name iteration now version update_bytes last_row_s "
    "last_activity_s model optimizer server_states gateway_states snapshots nodes node_index net_rng "
    "net_carried net_tcp net_slots net_loss totals window trace applied strategy tape".split()
)
_METERS = frozenset(("compute_j", "tx_j", "rx_j", "idle_j", "busy_s", "log"))  # EnergyMeter's, as saved
_NODE_KEYS = frozenset("codec velocity stream rng energy held_version dispatched_version busy online".split())
# codec state fields shaped like their layer's gradient (others, as PowerSGD's q, are not)
_GRADIENT_SHAPED = ("residual", "momentum", "variance", "sq_grad")
# a trace span (a Chrome trace event) and the types of its fields
_SPAN_KEYS: dict[str, Any] = {"name": str, "cat": str, "ph": str, "ts": float, "dur": float, "pid": int, "tid": int}
_SPAN_KEYS["args"] = dict[str, str | int | float | bool | None]


def _refuse(problems: list[str]) -> None:
    if problems:
        lines = problems[:8] + ([f"... and {len(problems) - 8} more"] if len(problems) > 8 else [])
        raise ResultsError(
            "\n".join(["the checkpoint does not fit this run:", *(f"  {p}" for p in lines), f"  ({RERUN})"])
        )


def _keys(got: Any, want: frozenset[str], where: str) -> list[str]:
    """Problems of a dict ``got`` whose keys must be ``want``."""
    if not isinstance(got, dict):
        return [f"{where} is a {type(got).__name__}, not a dict"]
    missing, unknown = sorted(want - got.keys()), sorted(map(str, got.keys() - want))
    out = [f"{where} lacks key(s) {', '.join(missing)}"] if missing else []
    return out + ([f"{where} has unknown key(s) {', '.join(unknown)}"] if unknown else [])


def _stored(c: Cluster) -> tuple[torch.dtype, ...]:
    """dtypes of model-sized state kept between rounds: fp32, or ``nodes.state_dtype``."""
    return tuple(dict.fromkeys((torch.float32, c.learning.state_dtype)))


def check_keys(state: dict[str, Any]) -> None:
    """Raise :class:`ResultsError` unless ``state`` has exactly a checkpoint's keys and format."""
    problems = _keys(state, KEYS, "the state")
    if not problems and state["format"] != FORMAT_VERSION:
        problems.append(f"format is {state['format']!r}, not {FORMAT_VERSION}")
    _refuse(problems)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _time(v: Any, name: str, upto: float = math.inf) -> list[str]:
    """Problems of a simulated time ``v`` (s): a finite number in [0, upto]."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= upto
    return [] if ok else [f"{name} (={v!r}) must be a finite time in [0, {upto:g}] s"]


def _tensor(got: Any, like: torch.Tensor, name: str, dtypes: tuple[torch.dtype, ...] = ()) -> list[str]:
    """Problems of a tensor that must have ``like``'s shape, its dtype (or one of ``dtypes``)
    and finite values."""
    if not isinstance(got, torch.Tensor):
        return [f"{name} is a {type(got).__name__}, not a tensor"]
    if got.shape != like.shape or got.dtype not in (dtypes or (like.dtype,)):
        want = "/".join(str(d) for d in dtypes or (like.dtype,))
        return [f"{name} has shape {tuple(got.shape)} {got.dtype}, the run's has {tuple(like.shape)} {want}"]
    if got.is_floating_point() and not bool(torch.isfinite(got).all()):
        return [f"{name} holds NaN or infinite values (the run had diverged, or the file was altered)"]
    return []


def check_state(c: Cluster, state: dict[str, Any]) -> None:
    """Raise :class:`ResultsError` listing what of ``state`` (keys checked by :func:`check_keys`)
    does not fit the freshly built cluster ``c``."""
    iters = c.sc.scenario.iterations
    it, now = state["iteration"], state["now"]
    problems = []
    if not (_is_int(it) and 0 <= it < iters - 1):  # a checkpoint is taken only with rows still to come
        problems.append(f"iteration (={it!r}) must be an integer in [0, {iters - 2}] (the run has {iters} iterations)")
    problems += _time(now, "now (the simulated clock)")
    if not problems:
        for key in ("last_row_s", "last_activity_s"):
            problems += _time(state[key], key, now)
    if not problems and not (
        _is_int(state["version"]) and state["version"] == it + 1
    ):  # every sync, partial or federated step is one version
        problems.append(f"version (={state['version']!r}) must be {it + 1}: one model version per iteration")
    most = 4 * c.learning.dense_model_bytes + 65536  # B: a message with indices may exceed the dense model
    if not (_is_int(state["update_bytes"]) and 0 <= state["update_bytes"] <= most):
        problems.append(f"update_bytes (={state['update_bytes']!r}) must be a message size in [0, {most}] B")
    problems += _model(c, state["model"]) + _optimizer(c, state["optimizer"])
    problems += _codecs(c, state["server_states"], c.learning.server_states, "server_states")
    gws = state["gateway_states"]
    if not isinstance(gws, dict) or gws.keys() != c.gateway_states.keys():
        problems.append(f"gateway_states must be for gateways {sorted(c.gateway_states)}")
    else:
        for gw, saved in gws.items():
            problems += _codecs(c, saved, c.gateway_states[gw], f"gateway_states[{gw}]")
    problems += _nodes(c, state["nodes"], state["node_index"], state["version"])
    problems += _snapshots(c, state["snapshots"], state["version"])
    records = _records(c, state)
    if not (records or problems) and not state["applied"]["iteration"] == state["totals"]["iterations"] == it:
        records.append(  # the step to be written and the rows written so far both say where the run stands
            f"iteration (={it}) disagrees with the applied step's (={state['applied']['iteration']}) "
            f"and the rows counted in totals (={state['totals']['iterations']})"
        )
    problems += records or _clock(state)
    problems += _network(c, state) + _strategy(c, state["strategy"]) + state_problems(state["tape"])
    carried = state["net_carried"]
    if not (getattr(carried, "shape", None) == c.net._carried.shape and bool(np.isfinite(carried).all())):
        problems.append(f"net_carried must be {c.net._carried.shape[0]} finite byte counts (one per link)")
    _refuse(problems)


def _clock(state: dict[str, Any]) -> list[str]:
    """The clock against the trace so far: the step is applied as the last span (the server's
    aggregation) ends, so a traced run's spans end at ``now`` (to rounding of the us times)."""
    spans, now = state["trace"]["spans"], state["now"]
    if not spans:
        return []
    end_s = max(e["ts"] + e["dur"] for e in spans) / 1e6  # us -> s
    if abs(end_s - now) <= 1e-9 * max(1.0, now):
        return []
    return [f"now (={now!r} s) is not when the run's trace ends (={end_s!r} s): the clock was altered"]


def _records(c: Cluster, state: dict[str, Any]) -> list[str]:
    """Problems of the accounting records, the applied step and the trace so far."""
    out = record(state["totals"], Totals, "totals") + record(state["window"], Window, "window")
    a = state["applied"]
    if probs := _keys(a, frozenset(("iteration", "decode_s", "agg_nnz", "agg_bytes", "uploads")), "applied"):
        return out + probs
    out += typed(a["uploads"], list, "applied.uploads") + typed(a["decode_s"], float, "applied.decode_s")
    out += [p for k in ("iteration", "agg_nnz", "agg_bytes") for p in typed(a[k], int, f"applied.{k}")]
    for j, u in enumerate(a["uploads"] if isinstance(a["uploads"], list) else []):
        probs = record(u, Upload, f"applied.uploads[{j}]", skip=("payloads",))
        if not probs and not all(0 <= i < c.n for i in u["nodes"]):
            probs.append(f"applied.uploads[{j}].nodes must be nodes in [0, {c.n - 1}]")
        out += probs
    spans = state["trace"].get("spans") if isinstance(state["trace"], dict) else None
    if not isinstance(spans, list) or set(state["trace"]) != {"spans", "tids"}:
        return [*out, "trace must hold spans and tids"]
    out += typed(state["trace"]["tids"], list[tuple[int, str, int]], "trace.tids")
    for j, e in enumerate(spans):
        where = f"trace.spans[{j}]"
        out += _keys(e, frozenset(_SPAN_KEYS), where) or [
            p for k, hint in _SPAN_KEYS.items() for p in typed(e[k], hint, f"{where}.{k}")
        ]
    return out


def _network(c: Cluster, state: dict[str, Any]) -> list[str]:
    """Problems of the network's generators, TCP connections, slots and presampled losses."""
    net = c.net
    out = bit_generator(state["net_rng"], net._rng, "net_rng")
    tcp, slots, loss = state["net_tcp"], state["net_slots"], state["net_loss"]
    out += _keys(tcp, frozenset(("conns", "loss_rng", "overflow_rng")), "net_tcp") or (
        bit_generator(tcp["loss_rng"], net._loss._rng, "net_tcp.loss_rng")
        + bit_generator(tcp["overflow_rng"], net._overflow_rng, "net_tcp.overflow_rng")
        + typed(tcp["conns"], dict[str, Connection], "net_tcp.conns", Rules(inf=True))  # ssthresh starts at inf
    )
    if not out and not all(conn["cwnd"] > 0 for conn in tcp["conns"].values()):
        out.append("net_tcp.conns: every congestion window (cwnd) must be > 0 segments")
    out += _keys(loss, frozenset(("rng", "presampled")), "net_loss") or (
        bit_generator(loss["rng"], net._loss_rng, "net_loss.rng")
        + typed(loss["presampled"], list[tuple[str, str, int, list[tuple[float, float]]]], "net_loss.presampled")
    )
    most = 64 * (c.n + 16)  # slots: flows in flight at once, a few per node at most
    if probs := _keys(slots, frozenset(("n", "free")), "net_slots"):
        return out + probs
    n, free = slots["n"], slots["free"]
    ok = _is_int(n) and 0 <= n <= most and isinstance(free, list) and len(set(free)) == len(free)
    if not (ok and all(_is_int(i) and 0 <= i < n for i in free)):
        out.append(f"net_slots: n must be in [0, {most}] and free must list distinct slots below it")
    return out


def _strategy(c: Cluster, saved: Any) -> list[str]:
    """Problems of the strategy's own state: a federated run's selection generator, server
    optimizer buffers and row's samples; nothing for the others."""
    if c.sc.training.mode != "federated":
        return [] if saved == {} else ["strategy: only a federated run keeps a state of its own"]
    if probs := _keys(saved, frozenset(("rng", "m", "v", "samples")), "strategy"):
        return probs
    out = bit_generator(saved["rng"], np.random.default_rng(), "strategy.rng")
    out += [] if _is_int(saved["samples"]) and saved["samples"] >= 0 else ["strategy.samples must be an integer >= 0"]
    params = [p.detach() for p in c.learning.model.parameters()]
    for k in ("m", "v"):
        bufs = saved[k]
        if bufs is not None and not (isinstance(bufs, list) and len(bufs) == len(params)):
            out.append(f"strategy.{k}: one tensor per model parameter expected")
        elif bufs is not None:
            out += [p for j, (b, like) in enumerate(zip(bufs, params)) for p in _tensor(b, like, f"strategy.{k}[{j}]")]
    return out


def _snapshots(c: Cluster, saved: Any, version: Any) -> list[str]:
    """Problems of the model versions kept for nodes still to work on them."""
    if not isinstance(saved, dict) or not all(_is_int(v) and 0 <= v <= version for v in saved):
        return [f"snapshots must be keyed by model versions in [0, {version!r}]"]
    params = [p.detach() for p in c.learning.model.parameters()]
    out = []
    for v, ps in saved.items():
        if not isinstance(ps, list) or len(ps) != len(params):
            out.append(f"snapshots[{v}]: one tensor per model parameter expected")
            continue
        out += [p for j, (got, like) in enumerate(zip(ps, params)) for p in _tensor(got, like, f"snapshots[{v}][{j}]")]
    return out


def _model(c: Cluster, saved: Any) -> list[str]:
    fresh = c.learning.model.state_dict()
    if not isinstance(saved, dict) or saved.keys() != fresh.keys():
        return ["model: its tensors are not the run's model's (other names)"]
    return [p for k, v in fresh.items() for p in _tensor(saved[k], v, f"model[{k}]")]


def _optimizer(c: Cluster, saved: Any) -> list[str]:
    """Problems of the server optimizer's state: its hyperparameters are the scenario's (no
    schedule changes them), its buffers (tensors) those of the model's parameters."""
    fresh = c.learning.optimizer.state_dict()
    if not isinstance(saved, dict) or saved.keys() != fresh.keys():
        return ["optimizer: not a state of the run's optimizer"]
    if saved["param_groups"] != fresh["param_groups"]:
        return ["optimizer: its parameter groups or hyperparameters are not the scenario's"]
    params = list(c.learning.model.parameters())
    if not isinstance(saved["state"], dict) or not set(saved["state"]) <= set(range(len(params))):
        return ["optimizer: its state is for parameters the model does not have"]
    out = []
    for i, buffers in saved["state"].items():
        out += typed(buffers, dict[str, torch.Tensor], f"optimizer.state[{i}]")
        for k, v in buffers.items() if not out else ():
            out += _tensor(v, params[i].detach(), f"optimizer.state[{i}][{k}]") if v.dim() > 0 else []
    return out


def _codecs(c: Cluster, saved: Any, fresh: list[Any], name: str) -> list[str]:
    """Problems of saved codec states (one dict per layer) against the fresh ones."""
    if not isinstance(saved, list) or len(saved) != len(fresh):
        return [f"{name}: {len(fresh)} layers' codec states expected"]
    out = []
    for j, (got, st) in enumerate(zip(saved, fresh, strict=True)):
        where = f"{name}[{j}]"
        fields = frozenset(f.name for f in dataclasses.fields(st))
        if probs := _keys(got, fields, where):
            out += probs
            continue
        out += _tensor(got["generator"], st.generator.get_state(), f"{where}.generator")
        shape = torch.empty(c.learning.layers[j].shape, device="meta")  # the layer's gradient, fp32
        for f in _GRADIENT_SHAPED:
            if got.get(f) is not None:
                out += _tensor(got[f], shape, f"{where}.{f}", _stored(c))
        hints = typing.get_type_hints(type(st))  # the other fields: as declared (PGC's mu may be < 0)
        out += [p for f in fields - {"generator"} for p in typed(got[f], hints[f], f"{where}.{f}", Rules(nonneg=False))]
        out += [] if _is_int(got["step"]) and got["step"] >= 0 else [f"{where}.step must be an integer >= 0"]
    return out


def _nodes(c: Cluster, nodes: Any, index: Any, version: Any) -> list[str]:
    known = isinstance(index, list) and all(_is_int(i) and 0 <= i < c.n for i in index)
    if not (known and len(set(index)) == len(index)):
        return [f"node_index must list distinct nodes in [0, {c.n - 1}]"]
    if not isinstance(nodes, list) or len(nodes) != len(index):
        return [f"nodes: {len(index)} nodes expected (as node_index lists)"]
    out = []
    for i, saved in zip(index, nodes, strict=True):
        where = f"nodes[{i}]"
        if probs := _keys(saved, _NODE_KEYS, where):
            out += probs
            continue
        st = c.nodes[i]  # built now for a federated fleet's node, as the resume builds it
        out += _codecs(c, saved["codec"], st.local.states, f"{where}.codec")
        out += _stream(saved["stream"], st.local.stream.state_dict(), where)
        vel = saved["velocity"]
        if vel is not None:
            if not isinstance(vel, list) or len(vel) != len(c.learning.layers):
                out.append(f"{where}.velocity: one tensor per layer expected")
            else:
                for j, (v, L) in enumerate(zip(vel, c.learning.layers, strict=True)):
                    out += _tensor(v, torch.empty(L.shape, device="meta"), f"{where}.velocity[{j}]", _stored(c))
        if saved["busy"] is not False:
            out.append(f"{where}.busy: a checkpoint is taken with no node at work")
        if not all(_is_int(saved[k]) and 0 <= saved[k] <= version for k in ("held_version", "dispatched_version")):
            out.append(f"{where}: held_version and dispatched_version must be model versions in [0, {version!r}]")
        out += _energy(saved["energy"], f"{where}.energy") + typed(saved["online"], bool, f"{where}.online")
        out += bit_generator(saved["rng"], st.rng, f"{where}.rng")
    return out


def _energy(saved: Any, where: str) -> list[str]:
    """Problems of a node's energy meters: J and s, finite and >= 0, and the log of its charges."""
    if probs := _keys(saved, _METERS, where):
        return probs
    ok = all(_time(v, "") == [] for k, v in saved.items() if k != "log")
    return ([] if ok else [f"{where}: its meters must be finite and >= 0 (J, s)"]) + typed(
        saved["log"], list[float], f"{where}.log"
    )


def _stream(got: Any, fresh: dict[str, Any], where: str) -> list[str]:
    if probs := _keys(got, frozenset(fresh), f"{where}.stream"):
        return probs
    out = [p for k in ("gen", "aug_gen") for p in _tensor(got[k], fresh[k], f"{where}.stream.{k}")]
    perm, n = got["perm"], len(fresh["perm"])
    if not (isinstance(perm, torch.Tensor) and perm.dtype == fresh["perm"].dtype and perm.shape == (n,)
            and torch.equal(perm.sort().values, torch.arange(n, dtype=perm.dtype))):  # fmt: skip
        out.append(f"{where}.stream.perm must be a permutation of the node's {n} samples")
    if not (_is_int(got["pos"]) and 0 <= got["pos"] <= n and _is_int(got["epoch"]) and got["epoch"] >= 0):
        out.append(f"{where}.stream: pos must be in [0, {n}] and epoch >= 0")
    return out


__all__ = ["KEYS", "check_keys", "check_state"]
