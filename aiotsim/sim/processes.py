"""The SimPy processes of a round: a node's download, compute, encode and upload; a gateway's
average; the downlink hops.

A *dispatch* is one node round: the downlink that brings the node the model version it will work
on, then compute, encode and upload to its aggregator's mailbox. ::

    node i : [download the model] -> gradient on its batch (real torch) -> timeout(compute) ->
             encode every layer (real codec) -> timeout(encode) -> send(node i -> aggregator)
    gateway: wait for its nodes' uploads -> decode + average -> re-encode (or dense) ->
             timeout(aggregate) -> send(gateway -> server)

In ``hierarchical`` (and custom topologies with gateways) a node's aggregator is its gateway; the
downlink crosses the backhaul once per gateway and fans out from there. Processes only ``yield``
events: time advances through the compute model (``timeout``) and the network (``send``).
Nodes that work on an older version (partial, async) compute on a snapshot of that version.
"""

from __future__ import annotations

import simpy

from aiotsim.sim.batching import prefetch
from aiotsim.sim.topologies import SERVER, node_name
from aiotsim.sim.world import Cluster, Proc, Upload


def node_round(c: Cluster, i: int, version: int, download: simpy.Event | None, work: bool) -> Proc:
    """SimPy process: node ``i`` receives model ``version`` (if ``download``) and, if ``work``,
    computes, encodes and uploads a gradient on it."""
    env, st, name, learning = c.env, c.nodes[i], node_name(i), c.learning
    if download is not None:
        yield download
    st.held_version = version
    if not work:
        st.busy = False
        return
    t0 = env.now
    params = c.snapshots.get(version) if c.mode != "sync" else None
    grads, loss, compute_s, sq = c.gradient(i, params)
    encoded, st.local.encoded = st.local.encoded, None  # encoded in a batch at dispatch, if so
    if encoded is None and c.mode == "sync":
        # nothing touches the node's codec state before its encode in a sync round (the server
        # waits for it): encode now, so that a fleet starting together does not hold every
        # node's gradient over its compute time (10,000 x the model)
        encoded = learning.encode(grads, st.local.states, sq)
        grads = sq = None
    yield env.timeout(compute_s)
    c.trace.span(name, "compute", t0, compute_s, version=version)
    payloads, wall = encoded or learning.encode(grads, st.local.states, sq)
    wall += learning.mask_momentum(st.local, payloads)
    grads = sq = None  # encoded: not held while the upload is in flight (10,000 nodes x model)
    nbytes, wall = c.tape.encode(i, sum(p.nbytes for p in payloads), wall)
    encode_s = st.compute.codec_time(wall, learning.elements, learning.codec.encode_flops_per_element)
    t1 = env.now
    yield env.timeout(encode_s)
    c.trace.span(name, "encode", t1, encode_s, version=version)
    c.window.energy_j += st.energy.busy(compute_s + encode_s)
    c.totals.node_bytes_up += nbytes
    c.totals.dense_up += learning.dense_model_bytes
    dst = c.aggregator[i]
    tr = yield c.send(name, dst, nbytes, "up", f"up v{version}")
    c.trace.transfer(tr, "upload", version=version)
    yield c.mailbox[dst].put(Upload(name, [i], version, payloads, [loss], [compute_s], [encode_s]))


def gateway_round(c: Cluster, gw: str, members: list[int]) -> Proc:
    """SimPy process: gateway ``gw`` waits for its ``members``' uploads, averages them, and
    forwards one message (re-encoded with its own residuals, or dense) to the server."""
    env, learning = c.env, c.learning
    dense = c.sc.network.gateway_mode == "dense"
    ups: list[Upload] = []
    aggregation = learning.aggregation()  # streamed: each upload folded in on arrival, then dropped
    while len(ups) < len(members):
        ups.append((yield c.mailbox[gw].get()))
        arrive(c, c.gateway_index[gw], ups[-1])
        aggregation.take(ups[-1])
    t0 = env.now
    agg, wall = aggregation.result()
    codecs = [learning.dense] * len(learning.layers) if dense else None
    payloads, enc_wall = learning.encode(agg, c.gateway_states[gw], codecs=codecs)
    wall, enc_wall, nbytes = c.tape.gateway(c.gateway_index[gw], wall, enc_wall, sum(p.nbytes for p in payloads))
    busy = c.codec_time(c.gateway_compute, wall + enc_wall, len(ups) + 1)
    yield env.timeout(busy)
    c.trace.span(gw, "aggregate", t0, busy)
    tr = yield c.send(gw, c.topology.aggregator_of(gw), nbytes, "up", f"up v{ups[0].version}")
    c.trace.transfer(tr, "upload", version=ups[0].version)
    merged = Upload(
        gw,
        [i for u in ups for i in u.nodes],
        min(u.version for u in ups),
        payloads,
        [x for u in ups for x in u.losses],
        [x for u in ups for x in u.compute_s],
        [x for u in ups for x in u.encode_s],
        dense=dense,
    )
    yield c.mailbox[SERVER].put(merged)


def dispatch(c: Cluster, nodes: list[int], work: bool = True) -> list[simpy.Process]:
    """Start a round on each of ``nodes``: downlink (via its gateway) and, if ``work``, the
    gradient. Nodes already holding the current version download nothing."""
    procs = []
    fanout: dict[str, simpy.Process] = {}
    if work and nodes:
        c.last_activity_s = c.env.now
        prefetch(c, nodes)  # batched gradients, when nodes.batched is on
    for i in nodes:
        st = c.nodes[i]
        st.busy = work
        st.dispatched_version = c.version
        download = None
        if st.held_version != c.version:
            nbytes = c.downlink_bytes(i)
            gw = c.aggregator[i]
            if gw != SERVER:
                if gw not in fanout:  # one copy crosses the backhaul, then fans out
                    fanout[gw] = _hop(c, SERVER, gw, nbytes)
                download = _hop(c, gw, node_name(i), nbytes, after=fanout[gw])
            else:
                download = _hop(c, SERVER, node_name(i), nbytes)
        procs.append(c.env.process(node_round(c, i, c.version, download, work)))
    return procs


def dispatch_round(c: Cluster, work: bool = True) -> tuple[list[int], list[simpy.Process]]:
    """Dispatch every idle node that is online (and start the gateways that will wait for them);
    returns ``(nodes, processes)``."""
    chosen = [i for i in range(c.n) if not c.nodes[i].busy and c.availability(i)]
    procs = dispatch(c, chosen, work)
    if work:
        by_gw: dict[str, list[int]] = {}
        for i in chosen:
            if c.aggregator[i] != SERVER:
                by_gw.setdefault(c.aggregator[i], []).append(i)
        for gw, members in by_gw.items():
            c.env.process(gateway_round(c, gw, members))
    return chosen, procs


def arrived(c: Cluster, u: Upload) -> None:
    """An upload reached the server: its nodes are idle again."""
    c.last_activity_s = c.env.now
    for i in u.nodes:
        c.nodes[i].busy = False
    arrive(c, -1, u)


def arrive(c: Cluster, aggregator: int, u: Upload) -> None:
    """Note an upload's arrival order at ``aggregator`` (-1: the server, k: gateway k) on the
    tape when aggregations are streamed: their sums depend on it (a replay checks it)."""
    if c.learning.aggregation_mode == "streamed":
        c.tape.arrival(aggregator, min(u.nodes))


def wait_for_someone(c: Cluster) -> Proc:
    """Nobody could be dispatched (all offline): wait ``retry_s`` and try again, unless the run
    has stalled (:meth:`Cluster.check_stall`)."""
    c.check_stall()
    yield c.env.timeout(c.sc.nodes.retry_s)


def final_broadcast(c: Cluster) -> list[simpy.Process]:
    """After the last step: every idle online node starts downloading the final model (counted
    in the last iteration's row); returns the downloads to wait for."""
    nodes = [i for i in range(c.n) if not c.nodes[i].busy and c.nodes[i].online]
    return dispatch(c, nodes, work=False)


def _hop(c: Cluster, src: str, dst: str, nbytes: int, after: simpy.Event | None = None) -> simpy.Process:
    """One downlink hop: counted now (at dispatch), sent once ``after`` has fired."""
    c.account(src, dst, nbytes, "down")
    return c.env.process(_send_after(c, src, dst, nbytes, after, c.version))


def _send_after(c: Cluster, src: str, dst: str, nbytes: int, after: simpy.Event | None, version: int) -> Proc:
    if after is not None:
        yield after
    tr = yield c.net.send(src, dst, nbytes, tag=f"down v{version}")
    c.trace.transfer(tr, "download", version=version)
    return tr


__all__ = [
    "node_round",
    "gateway_round",
    "dispatch",
    "dispatch_round",
    "arrived",
    "arrive",
    "wait_for_someone",
    "final_broadcast",
]
