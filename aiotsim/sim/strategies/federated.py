"""Federated rounds (FedAvg and its server optimizers), with client selection and deadlines.

An iteration is one round::

    select : want = ceil(per_round x (1 + overcommit)) nodes, uniformly at random among the online
             nodes not still busy with an earlier round (sim/selection.py); none online: wait
             nodes.retry_s and try again (the run stalls after 1000 tries)
    train  : each downloads the global model, runs its local steps, uploads its encoded delta
             (sim/federated.py)
    close  : at per_round fresh uploads, or at round_deadline_s after the round opened, or when
             every selected node has answered, whichever comes first
    apply  : decode, average weighted by the nodes' sample counts, one server-optimizer step
             (sim/server_opt.py)

Uploads that miss their round (overcommitted extras, or after the deadline) are late: dropped
(``training.late = "drop"``, counted in ``dropped_uploads``) or aggregated in the round they arrive
in (``"apply"``, their staleness counted), as in partial mode. An update lost because its node went
offline (availability trace) is counted in ``dropped_uploads`` too. A round with no update leaves
the model as it is and still writes its row. Work per round is proportional to the selected nodes:
node state is built lazily (sim/fleet.py) and selection examines only candidates.

A round that ends with no node at work is a quiescent point (late updates are all taken by the
round that receives them): a
checkpoint keeps the selection generator, the server optimizer's buffers and the row's sample
count besides the cluster's state (sim/checkpoint.py), and a resumed run continues from there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import simpy

from aiotsim.config_checks import per_round_count
from aiotsim.sim.availability import AvailabilityTrace
from aiotsim.sim.checkpoint import quiescent_point
from aiotsim.sim.federated import Report, federated_node
from aiotsim.sim.processes import arrive
from aiotsim.sim.selection import select
from aiotsim.sim.server_opt import ServerOptimizer
from aiotsim.sim.stops import Diverged, non_finite
from aiotsim.sim.strategies.base import Strategy, register
from aiotsim.sim.topologies import SERVER
from aiotsim.sim.world import Applied, Cluster, Proc, Upload


@register
class FederatedStrategy(Strategy):
    """``federated``: rounds of select, local training, close (quorum or deadline), server step."""

    name = "federated"

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        s = cluster.sc
        t = s.training
        self.k = per_round_count(s)  # fresh uploads that close a round
        self.want = min(cluster.n, math.ceil(self.k * (1.0 + s.nodes.overcommit)))  # nodes selected
        self.rng = np.random.default_rng([s.scenario.seed, 0xFED])
        path = s.nodes.availability_trace
        self.trace = AvailabilityTrace.from_csv(path, cluster.n) if path else None
        self.opt = ServerOptimizer(
            cluster.learning.params, t.server_optimizer, t.server_lr, t.server_momentum, t.server_beta2, t.server_tau
        )
        self.busy: set[int] = set()  # nodes whose latest round has not answered yet
        self.samples = 0  # training samples of the answers in the current row
        self.late: list[Upload] = []  # late uploads waiting for the next aggregation (late = apply)
        self.box: simpy.Store | None = None

    def online(self, i: int) -> bool:
        """Node ``i`` can work now: its trace, else its availability chain (no state is built
        for a node while the chain cannot switch it off)."""
        if self.trace is not None and self.trace.listed(i):
            return self.trace.online(i, self.cluster.env.now)
        if self.cluster.sc.nodes.dropout_prob == 0.0:
            return True
        return self.cluster.availability(i)

    def run(self) -> Proc:
        c = self.cluster
        self.box = simpy.Store(c.env)
        start, pending = c.resume_point or (0, None)  # resumed: the checkpoint's row is still open
        if pending is not None:
            self.load_state(c.resume_strategy)
        for it in range(start, c.sc.scenario.iterations):
            if pending is not None:
                done, pending = pending, None
            else:
                uploads = yield from self.round(it)
                done = yield from self.apply(it, uploads)
                quiescent_point(c, it, done, self.state)  # late updates: all taken by round()
            c.finish_row(done)
            # finish_row counts one batch per contributor; a node ran all its local steps
            c.totals.samples += self.samples - c.sc.data.batch_size * len(done.uploads)
            self.samples = 0

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the strategy at a quiescent point (no node busy): the
        selection generator, the server optimizer's buffers, the row's samples."""
        return {"rng": self.rng.bit_generator.state, "m": self.opt.m, "v": self.opt.v, "samples": self.samples}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state` (buffers moved to the model's device)."""
        dev = self.cluster.device
        self.rng.bit_generator.state = state["rng"]
        self.opt.m = None if state["m"] is None else [x.to(dev) for x in state["m"]]
        self.opt.v = None if state["v"] is None else [x.to(dev) for x in state["v"]]
        self.samples = state["samples"]

    def choose(self, it: int) -> Proc:
        """The round's nodes. While nobody can be chosen: wait ``retry_s`` (stall-checked) or,
        when nodes are still busy with earlier rounds, for their answers (late: filed now)."""
        c, box = self.cluster, self.box
        assert box is not None
        while True:
            chosen = select(self.rng, c.n, self.want, lambda i: i not in self.busy and self.online(i))
            if chosen:
                return chosen
            if not self.busy:
                c.check_stall()
                yield c.env.timeout(c.sc.nodes.retry_s)
                continue
            get = box.get()
            yield get | c.env.timeout(c.sc.nodes.retry_s)
            if get.triggered:
                self.receive(get.value, it, [])
            else:
                get.cancel()

    def round(self, it: int) -> Proc:
        """Select, start the nodes, and collect until the round closes; returns its uploads."""
        c, box = self.cluster, self.box
        assert box is not None
        chosen = yield from self.choose(it)
        c.last_activity_s = c.env.now
        start = c.learning.snapshot()  # the global model this round's nodes download
        for i in chosen:
            self.busy.add(i)
            c.nodes[i].busy = True
            c.env.process(federated_node(c, i, it, start, box, self.trace))
        deadline = c.env.timeout(c.sc.training.round_deadline_s) if c.sc.training.round_deadline_s > 0 else None
        fresh: list[Upload] = []
        pending = len(chosen)
        while len(fresh) < self.k and pending > 0:
            get = box.get()
            if deadline is not None:
                yield get | deadline
                if not get.triggered:
                    get.cancel()
                    break
            else:
                yield get
            rep: Report = get.value
            pending -= rep.round == it
            self.receive(rep, it, fresh)
        late, self.late = self.late, []
        return fresh + late

    def receive(self, rep: Report, it: int, fresh: list[Upload]) -> None:
        """File one answer: fresh (round ``it``'s), late (kept for the next aggregation, or
        dropped) or lost."""
        c = self.cluster
        self.busy.discard(rep.node)
        c.nodes[rep.node].busy = False
        c.last_activity_s = c.env.now
        if rep.upload is None:
            c.totals.dropped += 1
        elif rep.round == it:
            fresh.append(rep.upload)
            self.samples += rep.samples
        elif c.sc.training.late == "apply":
            self.late.append(rep.upload)
            self.samples += rep.samples
        else:
            c.totals.dropped += 1

    def apply(self, it: int, uploads: list[Upload]) -> Proc:
        """Decode, weighted average (FedAvg: by sample counts), server step; the row's Applied."""
        c, learning = self.cluster, self.cluster.learning
        c.version += 1  # one version per round, also when nothing arrived (staleness in rounds)
        if not uploads:
            return Applied(it, [], 0.0, 0, 0)
        t0 = c.env.now
        weights = [sum(len(learning.shards[i]) for i in u.nodes) for u in uploads]
        for u in uploads:
            arrive(c, -1, u)
        keys = [min(u.nodes) for u in uploads]
        agg, wall = learning.decode_aggregate([u.payloads for u in uploads], weights, [u.dense for u in uploads], keys)
        wall = c.tape.decode(wall)
        bad = non_finite([x for u in uploads for x in u.losses], agg)
        if bad:
            raise Diverged(f"iteration {it}: {bad}")
        decode_s = c.codec_time(c.server_compute, wall, len(uploads))
        yield c.env.timeout(decode_s)
        c.trace.span(SERVER, "aggregate", t0, decode_s, iteration=it)
        if not c.tape.replaying:  # a replay holds no model: the step's sizes come from the tape
            self.opt.step(agg)
        bad = non_finite([], list(learning.params))
        if bad:
            raise Diverged(f"iteration {it}: the server step made the model {bad}")
        _, nnz, size = c.tape.update(0, *learning.aggregated_size(agg))
        return Applied(it, uploads, decode_s, nnz, size)


__all__ = ["FederatedStrategy"]
