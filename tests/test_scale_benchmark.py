"""benchmarks/scale.py counts the run's work that its bare loop repeats.

The stacked aggregation decodes through ``decode_read`` (for ``none`` a view of the payload, no
``decode`` call at all); the bare loop must still get one decode per message and layer, or the
ratio would compare the run against less work than it did.
"""

from __future__ import annotations

import math

import pytest
from conftest import ROOT, load_script


def _scale_module():
    return load_script(ROOT / "benchmarks" / "scale.py", "scale_benchmark")


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["none", "topk"])
def test_a_star_rounds_work_is_counted_for_the_bare_loop(codec: str) -> None:
    """iot10, one sync iteration: looped, 10 gradients and 10 x 10 layer encodes at the nodes;
    with ``auto`` (a pass of the 10 nodes filled node by node, encoded as one batch per layer)
    one pass of 10 and 10 batched encodes instead. Either way the server decodes each of the 10
    messages' 10 layers once (LeNet-5: 5 weights + 5 biases), in one batched decode per layer
    (none and topk have one)."""
    from aiotsim.network.flows import Network

    send = Network.send
    scale = _scale_module()
    looped = scale.run_case(10, codec, "star", 1, repeats=2, batched="false")
    # per repeat: a second repeat's work is not added to the first's
    assert (looped["gradients"], looped["encodes"], looped["decodes"]) == (10, 100, 100)
    assert looped["passes"] == [] and looped["encode_batches"] == 0
    row = scale.run_case(10, codec, "star", 1, repeats=2)
    assert (row["gradients"], row["encodes"], row["decodes"]) == (0, 0, 100)
    assert row["grads"] == "batched" and row["passes"] == [10] and row["encode_batches"] == 10
    assert looped["decode_batches"] == row["decode_batches"] == 10
    assert row["status"] == "complete" and row["bare_s"] > 0 and row["cpu_ratio"] > 0
    assert row["repeats"] == 2 and len(row["ratios"]) == 2
    assert Network.send is send  # the timing wrappers are taken off after each repeat


@pytest.mark.slow
def test_each_iteration_is_timed_and_the_steady_ratio_leaves_out_the_first() -> None:
    """iot10, 3 sync iterations: one wall time per iteration (a metrics row each), together no
    more than the run's wall time; the steady ratio is taken on the time from the second round's
    dispatch, which comes before the first iteration's row (its formula: the hand cases below)."""
    scale = _scale_module()
    row = scale.run_case(10, "none", "star", 3, repeats=1)
    times = row["iteration_s"]
    assert len(times) == 3 and all(t > 0 for t in times)
    assert sum(times) <= row["wall_s"]
    # the later time holds rounds 2 and 3 (and the run's end), not the first
    assert row["wall_s"] - times[0] <= row["later_s"] < row["wall_s"]
    assert row["steady"] == scale.steady_ratio(row["later_s"], row["bare_s"], 3)  # the row's own terms


@pytest.mark.slow
def test_a_round_is_dispatched_before_the_previous_iterations_row() -> None:
    """iot100, batched (its passes run at dispatch), 3 iterations: the dispatches d1 < d2 < d3 and
    the metrics rows r1 < r2 < r3 interleave d1 < d2 < r1 < d3 < r2 < r3, so the time after the
    first row would leave a round of gradients out, and the time from d2 holds every later round."""
    import tempfile

    from aiotsim.results.store import RunWriter
    from aiotsim.sim.runner import run_cluster
    from aiotsim.sim.world import Cluster

    scale = _scale_module()
    sc = scale.scenario_for(100, "none", "star", 3)
    cluster = Cluster(sc, device="cpu")
    assert cluster.learning.batched is not None
    with tempfile.TemporaryDirectory() as tmp, scale.mark_dispatches() as d:
        writer = RunWriter(tmp, sc.to_toml())
        r = scale.mark_iterations(writer)
        run_cluster(cluster, writer)
    assert len(d) == 3 and len(r) == 3
    assert d[0] < d[1] < r[0] < d[2] < r[1] < r[2]


def test_the_steady_ratio_of_hand_cases() -> None:
    """Later iterations 6 s against 9 s of bare work over 3 iterations: 6 / 6 = 1; one iteration
    has no later ones."""
    scale = _scale_module()
    assert scale.steady_ratio(6.0, 9.0, 3) == pytest.approx(1.0)
    assert scale.steady_ratio(3.0, 4.0, 2) == pytest.approx(1.5)
    assert math.isnan(scale.steady_ratio(1.0, 1.0, 1))


def test_the_aggregation_asked_is_the_one_the_case_runs() -> None:
    """``--aggregation streamed`` makes a 10-node case stream (auto stacks it: 10 x LeNet-5 is far
    below the 1 GB limit); the row says which one ran."""
    scale = _scale_module()
    rows = {agg: scale.run_case(10, "none", "star", 1, repeats=1, aggregation=agg) for agg in ("auto", "streamed")}
    assert (rows["auto"]["aggregation"], rows["streamed"]["aggregation"]) == ("stacked", "streamed")
    assert rows["auto"]["passes"] == rows["streamed"]["passes"] == [10]  # the 10 nodes' gradients


@pytest.mark.slow
def test_a_batched_fleets_passes_and_batch_encodes_are_counted_for_the_bare_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """iot100 (auto batches LeNet-5 on the CPU from 100 nodes), one sync iteration of topk: no
    looped gradient or encode; passes of the budget's chunk covering the 100 nodes once (LeNet-5
    at batch 32: 4.9 MB per node, 27 in 128 MiB: 27, 27, 27, 19), and one batched encode per
    pass and layer, each given the pass's momentum steps as one tensor (fp32 momentum on the
    nodes); the looped case counts none of them. The literal bare work (``loop_s``) makes every
    one of them one by one: 100 gradients, 100 x 10 encodes and decodes; the bare loop's own
    plain part none (its decodes are the server's 10 batched ones, a layer of 100 messages each)."""
    scale = _scale_module()
    plain = scale.plain_loop
    works: list[tuple[tuple[int, int, int], int]] = []

    def recording(learning, batch, grads, payloads, states, work, batches=None):  # type: ignore[no-untyped-def]
        works.append((work, len(batches or [])))
        plain(learning, batch, grads, payloads, states, work, batches)

    monkeypatch.setattr(scale, "plain_loop", recording)
    row = scale.run_case(100, "topk", "star", 1, repeats=1)
    assert works == [((0, 0, 0), 10), ((100, 1000, 1000), 0)]  # bare_work's, then looped_work's
    assert row["loop_s"] > 0 and row["loop_ratio"] == row["wall_s"] / row["loop_s"]
    assert row["grads"] == "batched"
    assert (row["gradients"], row["encodes"]) == (0, 0)
    assert row["passes"] == [27, 27, 27, 19]
    assert row["encode_batches"] == row["encode_blocks"] == 4 * 10
    assert row["decodes"] == 100 * 10 and row["bare_s"] > 0
    looped = scale.run_case(100, "topk", "star", 1, repeats=2, batched="false")
    assert (
        looped["grads"] == "looped"
        and looped["passes"] == []
        and looped["encode_batches"] == looped["encode_blocks"] == 0
    )
    assert (looped["gradients"], looped["encodes"]) == (100, 100 * 10)
    assert looped["loop_s"] == looped["bare_s"]  # a looped run's bare work is the literal one (best of 2)
