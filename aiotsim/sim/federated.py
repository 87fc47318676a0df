"""What a node does in a federated round, apart from who is chosen and when the round closes.

A selected node downloads the current global model ``x``, runs ``local_steps`` SGD steps on its
own shard (learning rate ``training.lr``, momentum ``training.momentum`` in a buffer that starts at
zero every round, weight decay ``training.weight_decay``) to reach ``x_i``, and uploads the
pseudo-gradient ``d_i = x - x_i`` encoded with the codec and the node's own codec states (so a
codec's error-feedback residual carries what one round did not send into the node's next round).
Simulated time: the download, ``local_steps`` x the compute model's time of one batch
(``compute_time`` is linear in FLOPs and in wall time), the encode, the upload.

:func:`local_update` is the real computation (torch, no SimPy); :func:`federated_node` is the
SimPy process around it. With ``local_steps = 1`` and no momentum, ``d_i = lr * g_i`` and FedAvg
with ``server_lr = 1`` takes the sync step ``x - lr * mean(g_i)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import simpy
import torch

from aiotsim.sim.availability import AvailabilityTrace
from aiotsim.sim.learning import Learning, LocalState
from aiotsim.sim.stops import Diverged, non_finite, request_stop
from aiotsim.sim.topologies import SERVER, node_name
from aiotsim.sim.world import Cluster, Proc, Upload


@dataclass
class LocalResult:
    """A node's local training in one round and what it cost."""

    delta: list[torch.Tensor]  # per layer, x - x_i (descend it like a gradient)
    loss: float  # mean training loss over the local steps
    wall_s: float  # host seconds of the forward + backward passes
    flops: float  # FLOPs of all local steps
    sq: list[torch.Tensor] | None  # last step's mean squared per-sample gradients (codecs that need them)


@dataclass
class Report:
    """A node's answer to a round: its upload, or ``None`` when it went offline and lost it."""

    node: int
    round: int
    upload: Upload | None
    samples: int  # training samples it processed (local steps x batch)


def local_steps(learning: Learning, local: LocalState) -> int:
    """SGD steps a node runs per round: ``local_steps``, or ``ceil(local_epochs x shard / batch)``."""
    t, batch = learning.sc.training, learning.sc.data.batch_size
    if t.local_epochs > 0:
        return max(1, math.ceil(t.local_epochs * local.stream.n / batch))
    return t.local_steps


def local_update(
    learning: Learning,
    local: LocalState,
    start: list[torch.Tensor],
    steps: int,
    on_step: Callable[[], None] | None = None,
) -> LocalResult:
    """``steps`` local SGD steps from the parameters ``start`` (not modified) on the node's batches;
    ``on_step()`` after each gradient (progress reports)."""
    t = learning.sc.training
    w = [p.detach().clone() for p in start]
    buf: list[torch.Tensor] | None = None
    losses, wall, sq = [], 0.0, None
    for _ in range(steps):
        x, y = local.stream.next()
        res = learning.computer.gradient(w, x, y, per_sample_sq=learning.codec.needs_sq_grad)
        if on_step is not None:
            on_step()
        g, sq = [gi.detach() for gi in res.grads], res.sq_grads
        losses.append(res.loss)
        wall += res.wall_s
        if not math.isfinite(res.loss):
            raise Diverged(f"a node's local loss is {res.loss}")
        if t.weight_decay:
            torch._foreach_add_(g, w, alpha=t.weight_decay)
        if t.momentum:
            if buf is None:
                buf = [gi.clone() for gi in g]
            else:
                torch._foreach_mul_(buf, t.momentum)
                torch._foreach_add_(buf, g)
            g = buf
        torch._foreach_add_(w, g, alpha=-t.lr)
    delta = torch._foreach_sub([p.detach() for p in start], w)
    return LocalResult(delta, sum(losses) / steps, wall, learning.flops_per_batch * steps, sq)


def federated_node(
    c: Cluster,
    i: int,
    rnd: int,
    start: list[torch.Tensor],
    box: simpy.Store,
    trace: AvailabilityTrace | None,
) -> Proc:
    """SimPy process: node ``i`` downloads the round's model ``start``, trains, encodes, uploads;
    puts a :class:`Report` in ``box``. A node that goes offline (its availability trace) stops
    there: a transfer it is in is cut, and its report (no upload) goes in at that moment."""
    env, st, name, learning = c.env, c.nodes[i], node_name(i), c.learning
    t0 = env.now
    cut = trace.offline_from(i, t0) if trace is not None else math.inf  # s: when it drops off
    tr = yield from _transfer(c, (SERVER, name, "down"), learning.dense_model_bytes, rnd, cut)
    if tr is None:
        yield box.put(Report(i, rnd, None, 0))
        return
    st.held_version = rnd
    steps = local_steps(learning, st.local)
    samples = steps * learning.sc.data.batch_size
    res = _train(c, i, start, steps)
    res.loss, res.wall_s, res.flops = c.tape.gradient(i, res.loss, res.wall_s, res.flops)
    compute_s = _compute_time(c, i, res)
    busy_s = yield from _work(c, name, "compute", compute_s, cut, version=rnd)
    if busy_s == compute_s:
        bad = non_finite([res.loss], res.delta)
        if bad:
            raise Diverged(f"round {rnd}: node {i}'s {bad}")
        payloads, wall = learning.encode(res.delta, st.local.states, res.sq)
        nbytes, wall = c.tape.encode(i, sum(p.nbytes for p in payloads), wall)
        encode_s = st.compute.codec_time(wall, learning.elements, learning.codec.encode_flops_per_element)
        busy_s += yield from _work(c, name, "encode", encode_s, cut, version=rnd)
    c.window.energy_j += st.energy.busy(busy_s)
    if env.now >= cut:  # gone before it could upload
        yield box.put(Report(i, rnd, None, samples))
        return
    c.totals.node_bytes_up += nbytes
    c.totals.dense_up += learning.dense_model_bytes
    tr = yield from _transfer(c, (name, SERVER, "up"), nbytes, rnd, cut)
    if tr is None or not env.now < cut:  # dropped mid-upload (or as its last byte arrived)
        yield box.put(Report(i, rnd, None, samples))
        return
    yield box.put(Report(i, rnd, Upload(name, [i], rnd, payloads, [res.loss], [compute_s], [encode_s]), samples))


def _train(c: Cluster, i: int, start: list[torch.Tensor], steps: int) -> LocalResult:
    """Node ``i``'s local update; a stop (Ctrl-C, SIGTERM) met in it is recorded, so that every
    other node's local work ends at its next step (its heartbeat, :func:`aiotsim.sim.stops.check_stop`)
    rather than after all its steps. A replay trains nothing (its values come from the tape)."""
    if c.tape.replaying:
        return LocalResult([], 0.0, 0.0, 0.0, None)
    try:
        return local_update(
            c.learning, c.nodes[i].local, start, steps, lambda: c.heartbeat.gradient(c.totals.iterations)
        )
    except KeyboardInterrupt as exc:
        request_stop(exc)
        raise


def _transfer(c: Cluster, route: tuple[str, str, str], nbytes: int, rnd: int, cut: float) -> Proc:
    """Send ``route`` = (src, dst, "up" | "down") and wait for the arrival, traced; returns the
    :class:`Transfer`, unless the node drops off first, at ``cut`` s: then the transfer is
    stopped where it is (its bytes not yet sent leave the links; traced as cut) and the result is
    None. Without a cut: one plain wait."""
    src, dst, direction = route
    event = c.send(src, dst, nbytes, direction, f"{direction} r{rnd}")
    name = "upload" if direction == "up" else "download"
    if cut < math.inf:
        yield event | c.env.timeout(max(cut - c.env.now, 0.0))
        if not event.processed:
            part = c.net.cancel(event)  # None when its last byte has already left: it arrives to nobody
            if part is not None:
                c.trace.transfer(part, f"{name} (cut)", version=rnd)
            return None
    tr = yield event
    c.trace.transfer(tr, name, version=rnd)
    return tr


def _work(c: Cluster, name: str, what: str, seconds: float, cut: float, **args: object) -> Proc:
    """Busy for ``seconds`` of simulated time, or until the node drops off at ``cut``; traced as a
    span; returns the seconds spent."""
    t = c.env.now
    spent = min(seconds, max(cut - t, 0.0))
    yield c.env.timeout(spent)
    c.trace.span(name, what, t, spent, **args)
    return spent


def _compute_time(c: Cluster, i: int, res: LocalResult) -> float:
    """Simulated seconds of the local steps on node ``i`` (a transient straggler is slow for the
    whole round)."""
    st, nd = c.nodes[i], c.sc.nodes
    t = st.compute.compute_time(res.wall_s, res.flops)
    if nd.straggler_mode == "transient" and nd.straggler_fraction > 0 and st.rng.random() < nd.straggler_fraction:
        t *= nd.straggler_factor
    return t


__all__ = ["LocalResult", "Report", "local_steps", "local_update", "federated_node"]
