"""The engine on every topology and mode, against hand-computed times, bytes and energy.

Every case uses the MLP on the 8x8 digits (55,210 fp32 parameters = 220,840 B per dense message)
with the ``none`` codec and the ``flops`` compute model, whose encode/decode cost is 0 FLOP, so an
iteration's simulated time is compute time plus network time, both computable by hand:

* compute time = FLOPs of one batch (counted by torch's FlopCounter, checked by hand in the learn
  tests) / the profile's FLOP/s;
* a message of B payload bytes is ceil(B / 1460) packets of 1500 B MTU with 40 B of headers, so
  220,840 B -> 152 packets -> 226,920 wire bytes; at 1 Mbit/s that is 1.81536 s, plus latency.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from aiotsim.config import scenario_from_dict
from aiotsim.errors import ConfigError
from aiotsim.learn.devices import get_profile
from aiotsim.results.store import RunWriter
from aiotsim.sim.energy import RADIOS
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.topologies import node_layout, straggler_set
from aiotsim.sim.world import Cluster

DENSE = 220_840  # bytes of the MLP's fp32 gradient (and model)


def wire(payload: int, mtu: int = 1500, header: int = 40) -> int:
    """Hand formula: payload + one header per packet of (mtu - header) payload bytes."""
    return payload + max(1, math.ceil(payload / (mtu - header))) * header


def scenario(**sections: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scenario": {"name": "t", "seed": 5, "iterations": 2},
        "data": {"dataset": "digits", "batch_size": 16},
        "model": {"name": "mlp"},
        "training": {"lr": 0.1, "momentum": 0.0, "eval_every": 1},
        "compressor": {"name": "none"},
        "nodes": {"count": 2, "device": "rpi4", "compute_model": "flops"},
        # the hand-computed times below are those of the fluid model (TCP windows: tests/test_tcp.py)
        "network": {
            "uplink_mbps": 1.0, "downlink_mbps": 1.0, "latency_ms": 10.0, "server_mbps": 100.0, "transport": "ideal",
        },  # fmt: skip
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return base


def run(tmp_path: Path, data: dict[str, Any]) -> tuple[Cluster, dict[str, Any], list[dict[str, float]]]:
    sc = scenario_from_dict(data)
    sim = Cluster(sc, device="cpu")
    summary = run_cluster(sim, RunWriter(tmp_path / "run", sc.to_toml()))
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    return sim, summary, rows


def compute_s(sim: Cluster, device: str = "rpi4") -> float:
    return sim.learning.flops_per_batch / get_profile(device).flops_per_s


def test_star_sync_iteration_times(tmp_path) -> None:
    sim, summary, rows = run(tmp_path, scenario())
    c = compute_s(sim)
    hop = wire(DENSE) * 8 / 1e6 + 0.010  # one dense message over a 1 Mbit/s node link, s
    # iteration 0: compute, then both nodes upload at once (each on its own 1 Mbit/s link; the
    # shared 100 Mbit/s server link is not the bottleneck)
    assert rows[0]["sim_time_s"] == pytest.approx(c + hop, rel=1e-9)
    # iteration 1: model download, compute, upload
    assert rows[1]["sim_time_s"] - rows[0]["sim_time_s"] == pytest.approx(hop + c + hop, rel=1e-9)
    # the run ends after the final model broadcast
    assert summary["sim_time_s"] - rows[1]["sim_time_s"] == pytest.approx(hop, rel=1e-9)
    assert summary["bytes_up"] == 2 * 2 * DENSE
    assert summary["wire_bytes_up"] == pytest.approx(2 * 2 * wire(DENSE))
    assert summary["bytes_down"] == 2 * 2 * DENSE  # round 1 download + final broadcast
    assert [r["contributors"] for r in rows] == [2, 2]


def test_shared_server_link_splits_fairly(tmp_path) -> None:
    # 4 nodes with fast own links behind a 1 Mbit/s server link: each upload gets 0.25 Mbit/s
    data = scenario(nodes={"count": 4}, network={"uplink_mbps": 100.0, "downlink_mbps": 100.0, "server_mbps": 1.0})
    sim, _, rows = run(tmp_path, data)
    expected = compute_s(sim) + 4 * wire(DENSE) * 8 / 1e6 + 0.010
    assert rows[0]["sim_time_s"] == pytest.approx(expected, rel=1e-9)


def test_shared_medium_channel_carries_up_and_down(tmp_path) -> None:
    data = scenario(network={"topology": "shared-medium", "channel_mbps": 2.0, "server_mbps": 1000.0})
    sim, _, rows = run(tmp_path, data)
    c = compute_s(sim)
    # two uploads share the 2 Mbit/s channel: each 1 Mbit/s; the channel -> server hop is fast
    # (1000 Mbit/s) but in series, and max-min fairness gives it the same per-flow rate
    up = 2 * wire(DENSE) * 8 / 2e6 + 0.010
    assert rows[0]["sim_time_s"] == pytest.approx(c + up, rel=1e-9)
    # downloads to both nodes cross the same channel: the same arithmetic
    assert rows[1]["sim_time_s"] - rows[0]["sim_time_s"] == pytest.approx(up + c + up, rel=1e-9)


def test_hierarchical_iteration_time_and_bytes(tmp_path) -> None:
    data = scenario(
        nodes={"count": 4},
        network={
            "topology": "hierarchical",
            "gateways": 2,
            "backhaul_up_mbps": 2.0,
            "backhaul_down_mbps": 2.0,
            "backhaul_latency_ms": 30.0,
            "server_mbps": 100.0,
            "gateway_mode": "dense",
        },
    )
    sim, summary, rows = run(tmp_path, data)
    c = compute_s(sim)
    sensor = wire(DENSE) * 8 / 1e6 + 0.010  # node -> gateway, own 1 Mbit/s link
    backhaul = wire(DENSE) * 8 / 2e6 + 0.030  # gateway -> server, own 2 Mbit/s backhaul
    assert rows[0]["sim_time_s"] == pytest.approx(c + sensor + backhaul, rel=1e-9)
    # 4 node uploads + 2 gateway uploads, all dense
    assert rows[0]["bytes_up"] == 6 * DENSE
    # downlink: one copy per gateway over the backhaul, then one per node
    assert rows[1]["sim_time_s"] - rows[0]["sim_time_s"] == pytest.approx(2 * (sensor + backhaul) + c, rel=1e-9)
    assert summary["compression_ratio"] == 1.0  # counted on the sensor tier


def test_hierarchical_matches_star_learning(tmp_path) -> None:
    """Averaging through gateways (equal groups, dense) is the same mean as the star's."""
    _, star, _ = run(tmp_path / "a", scenario(nodes={"count": 4}))
    hier = scenario(nodes={"count": 4}, network={"topology": "hierarchical", "gateways": 2, "gateway_mode": "dense"})
    _, tree, _ = run(tmp_path / "b", hier)
    assert tree["final_eval_loss"] == pytest.approx(star["final_eval_loss"], rel=1e-5)


def test_ring_allreduce_time_and_bytes(tmp_path) -> None:
    n = 5  # 55,210 = 5 x 11,042: equal chunks of 44,168 B
    data = scenario(nodes={"count": n}, network={"topology": "ring", "uplink_mbps": 1.0, "latency_ms": 2.0})
    sim, summary, rows = run(tmp_path, data)
    chunk = DENSE // n
    step = wire(chunk) * 8 / 1e6 + 0.002
    assert rows[0]["iter_time_s"] == pytest.approx(compute_s(sim) + 2 * (n - 1) * step, rel=1e-9)
    # each node sends 2(n-1) chunks: 2(n-1)/n of the dense gradient; reduce-scatter "up",
    # all-gather "down"
    assert rows[0]["bytes_up"] == n * (n - 1) * chunk
    assert rows[0]["bytes_down"] == n * (n - 1) * chunk
    per_node = (rows[0]["bytes_up"] + rows[0]["bytes_down"]) / n
    assert per_node == pytest.approx(2 * (n - 1) / n * DENSE)
    assert summary["compression_ratio"] == 1.0


def test_ring_learns_exactly_like_the_star(tmp_path) -> None:
    _, star, _ = run(tmp_path / "a", scenario(nodes={"count": 5}))
    _, ring, _ = run(tmp_path / "b", scenario(nodes={"count": 5}, network={"topology": "ring"}))
    assert ring["final_eval_loss"] == pytest.approx(star["final_eval_loss"], rel=1e-5)


def test_ring_refuses_majority_vote_codecs() -> None:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(scenario(compressor={"name": "signsgd"}, network={"topology": "ring"}))
    text = str(info.value)
    assert "'signsgd' cannot be summed hop by hop" in text and "topk" in text


def test_loss_adds_expected_wire_bytes_and_delay(tmp_path) -> None:
    _, clean, rows0 = run(tmp_path / "a", scenario())
    _, lossy, rows1 = run(tmp_path / "b", scenario(network={"loss": 0.1}))
    assert lossy["wire_bytes_up"] == pytest.approx(clean["wire_bytes_up"] / 0.9, rel=1e-12)
    # expected retransmission delay: 152 packets x 0.1/0.9 x one 20 ms RTT, and the bytes at 1/0.9
    extra = wire(DENSE) * 8 / 1e6 * (1 / 0.9 - 1) + 152 * 0.1 / 0.9 * 0.020
    assert rows1[0]["sim_time_s"] - rows0[0]["sim_time_s"] == pytest.approx(extra, rel=1e-9)


def test_fixed_stragglers_follow_their_seed(tmp_path) -> None:
    assert straggler_set(10, 0.3, seed=1) == straggler_set(10, 0.3, seed=1)
    assert len(straggler_set(10, 0.3, seed=1)) == 3
    assert any(straggler_set(10, 0.3, seed=s) != straggler_set(10, 0.3, seed=1) for s in range(2, 6))
    data = scenario(nodes={"straggler_fraction": 0.5, "straggler_factor": 3.0})
    sim, summary, rows = run(tmp_path, data)
    assert len(summary["stragglers"]) == 1
    hop = wire(DENSE) * 8 / 1e6 + 0.010
    # the synchronous iteration waits for the straggler's 3x compute
    assert rows[0]["sim_time_s"] == pytest.approx(3 * compute_s(sim) + hop, rel=1e-9)
    layout = node_layout(scenario_from_dict(data))
    assert [s.compute_slowdown for s in layout].count(3.0) == 1


def test_link_stragglers_divide_the_rate(tmp_path) -> None:
    data = scenario(nodes={"straggler_fraction": 0.5, "straggler_factor": 4.0, "straggler_kind": "link"})
    sim, _, rows = run(tmp_path, data)
    slow = wire(DENSE) * 8 / 0.25e6 + 0.010
    assert rows[0]["sim_time_s"] == pytest.approx(compute_s(sim) + slow, rel=1e-9)


def test_availability_follows_its_seed(tmp_path) -> None:
    def contributors(seed: int, where: str) -> list[float]:
        data = scenario(
            scenario={"seed": seed, "iterations": 12},
            nodes={"count": 4, "dropout_prob": 0.5, "rejoin_prob": 0.5},
            training={"eval_every": 12},
        )
        _, _, rows = run(tmp_path / where, data)
        return [r["contributors"] for r in rows]

    a, b = contributors(1, "a"), contributors(1, "b")
    assert a == b
    assert min(a) < 4  # some rounds ran without every node
    assert any(contributors(s, f"s{s}") != a for s in (2, 3))


def test_async_staleness_two_nodes_unequal_speeds(tmp_path) -> None:
    # node1 computes 3x slower; links are slow, so node0's second round (download + compute +
    # upload) ends after node1's first upload: node1's gradient (version 0) lands on version 1.
    data = scenario(
        scenario={"iterations": 3},
        training={"mode": "async", "eval_every": 3},
        nodes={"group": [{"count": 1}, {"count": 1, "slowdown": 3.0}]},
    )
    sim, summary, rows = run(tmp_path, data)
    c = compute_s(sim)
    hop = wire(DENSE) * 8 / 1e6 + 0.010
    assert 3 * c + hop < c + hop + hop + c + hop  # the ordering argued above holds
    assert [r["staleness"] for r in rows] == [0.0, 1.0, 1.0]
    assert rows[0]["sim_time_s"] == pytest.approx(c + hop, rel=1e-9)  # node0, version 0
    assert rows[1]["sim_time_s"] == pytest.approx(3 * c + hop, rel=1e-9)  # node1, version 0 -> v1
    # node0 downloaded v1 at c+hop, so its second gradient (on v1) lands on v2: staleness 1
    assert rows[2]["sim_time_s"] == pytest.approx(c + hop + hop + c + hop, rel=1e-9)
    assert summary["mean_staleness"] == pytest.approx(2 / 3)


def test_partial_k_of_n_drops_or_applies_late(tmp_path) -> None:
    base = dict(
        scenario={"iterations": 4},
        training={"mode": "partial", "partial_k": 2, "eval_every": 4},
        nodes={"count": 3, "group": [{"count": 2}, {"count": 1, "slowdown": 5.0}]},
    )
    _, dropped, rows = run(tmp_path / "drop", scenario(**{**base, "training": {**base["training"], "late": "drop"}}))
    assert all(r["contributors"] == 2 for r in rows)
    assert dropped["dropped_uploads"] >= 1
    _, applied, rows = run(tmp_path / "apply", scenario(**{**base, "training": {**base["training"], "late": "apply"}}))
    assert applied["dropped_uploads"] == 0
    assert max(r["contributors"] for r in rows) == 3 and max(r["staleness"] for r in rows) > 0


def test_energy_equals_the_hand_computed_sum(tmp_path) -> None:
    data = scenario(nodes={"radio": "802.15.4"})
    sim, summary, _ = run(tmp_path, data)
    rpi, radio = get_profile("rpi4"), RADIOS["802.15.4"]
    iters, n = 2, 2
    compute_j = n * iters * compute_s(sim) * rpi.power_active_w  # encode costs 0 s with `none`
    tx_j = n * iters * wire(DENSE) * 8 * radio.tx_nj_per_bit * 1e-9
    rx_j = n * iters * wire(DENSE) * 8 * radio.rx_nj_per_bit * 1e-9  # round-1 model + final broadcast
    assert summary["energy_breakdown_j"]["compute"] == pytest.approx(compute_j, rel=1e-9)
    assert summary["energy_breakdown_j"]["radio_tx"] == pytest.approx(tx_j, rel=1e-9)
    assert summary["energy_breakdown_j"]["radio_rx"] == pytest.approx(rx_j, rel=1e-9)
    assert summary["energy_j"] == pytest.approx(compute_j + tx_j + rx_j, rel=1e-9)
    assert sum(summary["energy_per_node_j"]) == pytest.approx(summary["energy_j"], rel=1e-6)


def test_custom_topology_equals_the_star(tmp_path) -> None:
    links = [{"from": f"node{i}", "to": "server", "mbps": 1.0, "latency_ms": 10.0} for i in range(2)]
    _, custom, rows_c = run(tmp_path / "c", scenario(network={"topology": "custom", "link": links}))
    _, star, rows_s = run(tmp_path / "s", scenario(network={"server_mbps": 10_000.0}))
    assert [r["sim_time_s"] for r in rows_c] == pytest.approx([r["sim_time_s"] for r in rows_s], rel=1e-12)


def test_custom_topology_validation_lists_every_problem() -> None:
    links = [{"from": "node0", "to": "server", "mbps": 1.0}, {"from": "node1", "to": "relay9", "mbps": 1.0}]
    vertices = [{"name": "relay9", "role": "relay"}]
    from aiotsim.validate import validate_scenario  # the gate above config builds the graph

    with pytest.raises(ConfigError) as info:
        validate_scenario(
            scenario_from_dict(scenario(network={"topology": "custom", "link": links, "vertex": vertices}))
        )
    assert "node1" in str(info.value) and "unroutable" in str(info.value)


def test_group_validation_names_each_problem() -> None:
    groups = [{"count": 1, "device": "pi5"}, {"cout": 1, "uplink_mbps": -1.0}]
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(scenario(nodes={"group": groups}))
    text = str(info.value)
    assert "nodes.group[0].device: unknown device profile 'pi5'" in text
    assert "nodes.group[1].cout: unknown key (did you mean 'count'?)" in text
    assert "nodes.group[1].uplink_mbps: must be > 0" in text
    assert "nodes.group[1].count: missing" in text


def test_min_size_sends_small_layers_dense(tmp_path) -> None:
    # every MLP layer has fewer than 10**6 elements: all go dense, so topk compresses nothing
    _, summary, _ = run(tmp_path, scenario(compressor={"name": "topk", "min_size": 10**6}))
    assert summary["compression_ratio"] == 1.0
    _, sparse, _ = run(tmp_path / "b", scenario(compressor={"name": "topk", "ratio": 0.01}))
    assert sparse["compression_ratio"] > 20


def test_downlink_modes(tmp_path) -> None:
    # `union`: an up-to-date node downloads the aggregated update as one sparse message whose
    # index set is the union of the two nodes' top-k sets: at most 2k entries per layer
    _, union, rows = run(tmp_path / "u", scenario(compressor={"name": "topk", "ratio": 0.01, "downlink": "union"}))
    _, model, _ = run(tmp_path / "m", scenario(compressor={"name": "topk", "ratio": 0.01}))
    assert model["bytes_down"] == 2 * 2 * DENSE
    round1 = rows[0]["bytes_down"] / 2  # per node, dispatched after step 0
    assert round1 == rows[0]["agg_bytes"]  # the union message is the aggregated size
    assert round1 < DENSE / 10
    # `compressed`: the server re-encodes the aggregate with 2bit; each layer's message is the
    # fixed-size 2-bit payload of that layer, the same size the nodes upload
    _, comp, rows = run(tmp_path / "c", scenario(compressor={"name": "2bit", "downlink": "compressed"}))
    assert rows[0]["bytes_down"] == rows[0]["bytes_up"]


def test_momentum_on_the_nodes_equals_server_momentum_for_a_linear_codec(tmp_path) -> None:
    """sum_i (m u_i + g_i) / n = m (sum_i u_i / n) + mean g: averaging commutes with momentum."""
    base = {"scenario": {"iterations": 3}, "training": {"momentum": 0.9, "eval_every": 3, "momentum_at": "server"}}
    _, server, _ = run(tmp_path / "s", scenario(**base))
    _, nodes, _ = run(tmp_path / "n", scenario(**{**base, "training": {**base["training"], "momentum_at": "nodes"}}))
    assert nodes["final_eval_loss"] == pytest.approx(server["final_eval_loss"], rel=1e-5)
    with pytest.raises(ConfigError, match="momentum_at"):
        scenario_from_dict(scenario(training={"momentum_at": "nodes", "optimizer": "adam"}))


@pytest.mark.parametrize("masking", [True, False])
def test_momentum_factor_masking_clears_the_velocity_of_sent_coordinates(masking: bool) -> None:
    training = {"momentum": 0.9, "momentum_masking": masking}
    sim = Cluster(scenario_from_dict(scenario(compressor={"name": "topk", "ratio": 0.01}, training=training)), "cpu")
    learning, st = sim.learning, sim.nodes[0].local
    st.velocity = [torch.ones(L.shape) for L in learning.layers]
    grads = [torch.randn(L.shape, generator=torch.Generator().manual_seed(j)) for j, L in enumerate(learning.layers)]
    payloads, _ = learning.encode(grads, st.states)
    learning.mask_momentum(st, payloads)
    for j, L in enumerate(learning.layers):
        sent = learning.codec.decode(payloads[j], L) != 0
        assert int(sent.sum()) == math.ceil(0.01 * L.numel)  # top-k sent k entries
        assert torch.all(st.velocity[j][~sent] == 1)
        assert torch.all(st.velocity[j][sent] == (0 if masking else 1))  # cleared only when masking


def test_custom_gateways_need_sync_mode() -> None:
    links = [
        {"from": "node0", "to": "gw", "mbps": 1.0},
        {"from": "node1", "to": "gw", "mbps": 1.0},
        {"from": "gw", "to": "server", "mbps": 5.0},
    ]
    vertices = [
        {"name": "gw", "role": "gateway", "aggregator": "server"},
        {"name": "node0", "role": "node", "aggregator": "gw"},
        {"name": "node1", "role": "node", "aggregator": "gw"},
    ]
    net = {"topology": "custom", "link": links, "vertex": vertices}
    from aiotsim.validate import validate_scenario  # the gate above config builds the graph

    validate_scenario(scenario_from_dict(scenario(network=net)))  # sync: fine
    with pytest.raises(ConfigError, match="aggregation through gateways \\(gw\\) is synchronous"):
        validate_scenario(scenario_from_dict(scenario(network=net, training={"mode": "async"})))
