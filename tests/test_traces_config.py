"""Traces and Gilbert-Elliott loss from scenario files: paths relative to the file, offsets per
node (seeded or explicit), where traces apply, and every bad input a config error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from aiotsim.config import load_scenario
from aiotsim.errors import ConfigError
from aiotsim.network.traces import GilbertElliott, load_trace
from aiotsim.sim.topologies import build_topology

TINY = (ROOT / "tests" / "tiny.toml").read_text()
STEP = "time_s, mbps\n0, 8\n1, 16\n3, 0\n"  # 1e6 B/s for 1 s, 2e6 B/s for 2 s; 3 s loop


def scenario_file(tmp_path: Path, network: str = "", extra: str = "") -> Path:
    """tiny.toml in ``tmp_path/scen/`` with lines added to [network] (and more tables after)."""
    (tmp_path / "scen" / "traces").mkdir(parents=True, exist_ok=True)
    (tmp_path / "scen" / "traces" / "step.csv").write_text(STEP)
    (tmp_path / "scen" / "traces" / "m.trace").write_text("1\n1\n2\n4\n")
    p = tmp_path / "scen" / "s.toml"
    p.write_text(TINY + network + "\n" + extra)
    return p


def test_trace_paths_are_relative_to_the_scenario_file(tmp_path: Path, monkeypatch) -> None:
    p = scenario_file(tmp_path, 'uplink_trace = "traces/step.csv"\ndownlink_trace = "traces/m.trace"\n')
    monkeypatch.chdir(tmp_path)  # not the scenario's directory
    s = load_scenario(p)
    assert Path(s.network.uplink_trace) == (tmp_path / "scen" / "traces" / "step.csv").resolve()
    assert load_scenario(p).to_toml() == s.to_toml()  # the resolved scenario keeps absolute paths


def test_nodes_get_staggered_seeded_offsets(tmp_path: Path) -> None:
    p = scenario_file(tmp_path, 'uplink_trace = "traces/step.csv"\ntrace_offset_s = 0.5\n')
    topo = build_topology(load_scenario(p))
    ups = [topo.links[f"node{i}.up"].trace for i in range(2)]
    assert all(t is not None for t in ups)
    offsets = [t.offset_s for t in ups]
    assert offsets[0] != offsets[1] and all(0 <= o < 3 for o in offsets)
    assert all(abs(o * 1000 - round(o * 1000)) < 1e-6 for o in offsets)  # whole ms: the trace grid
    again = build_topology(load_scenario(p))  # seeded: the same offsets every time
    assert [again.links[f"node{i}.up"].trace.offset_s for i in range(2)] == offsets
    assert topo.links["node0.down"].trace is None  # no downlink trace: constant downlink_mbps
    # nominal rate of a traced link: the trace's mean (5e6 B / 3 s)
    assert topo.links["node0.up"].bandwidth_bps == pytest.approx(5e6 * 8 / 3)


def test_no_stagger_means_lockstep_at_the_explicit_offset(tmp_path: Path) -> None:
    p = scenario_file(tmp_path, 'uplink_trace = "traces/step.csv"\ntrace_offset_s = 1.0\ntrace_stagger = "none"\n')
    topo = build_topology(load_scenario(p))
    for i in range(2):
        tr = topo.links[f"node{i}.up"].trace
        assert tr.offset_s == 1.0 and tr.rate_at(0.0) == 2e6  # local time 1 s: the 16 Mbit/s step


def test_group_trace_overrides_the_network_and_link_stragglers_scale_it(tmp_path: Path) -> None:
    groups = (
        '[[nodes.group]]\ncount = 1\nuplink_trace = "traces/m.trace"\ntrace_offset_s = 0.0\n'
        "[[nodes.group]]\ncount = 1\n"
    )
    net = 'uplink_trace = "traces/step.csv"\ntrace_stagger = "none"\n'
    topo = build_topology(load_scenario(scenario_file(tmp_path, net, groups)))
    assert topo.links["node0.up"].trace == load_trace(tmp_path / "scen" / "traces" / "m.trace")
    assert topo.links["node1.up"].trace == load_trace(tmp_path / "scen" / "traces" / "step.csv")
    strag = "straggler_fraction = 0.5\nstraggler_factor = 4.0\nstraggler_kind = 'link'\n"
    text = scenario_file(tmp_path, net).read_text().replace("[nodes]\n", "[nodes]\n" + strag)
    p = tmp_path / "scen" / "strag.toml"
    p.write_text(text)
    topo = build_topology(load_scenario(p))
    means = sorted(topo.links[f"node{i}.up"].trace.mean_rate for i in range(2))
    assert means == [pytest.approx(5e6 / 3 / 4), pytest.approx(5e6 / 3)]


def test_custom_link_trace(tmp_path: Path) -> None:
    text = TINY.replace("[network]\n", '[network]\ntopology = "custom"\ntrace_stagger = "none"\n')
    links = (
        '[[network.link]]\nfrom = "node0"\nto = "server"\nmbps = 5\ntrace = "traces/step.csv"\ntrace_offset_s = 2.0\n'
        '[[network.link]]\nfrom = "node1"\nto = "server"\nmbps = 5\n'
    )
    p = scenario_file(tmp_path)
    p.write_text(text + links)
    topo = build_topology(load_scenario(p))
    tr = topo.links["node0->server"].trace
    assert tr is not None and tr.offset_s == 2.0 and topo.links["server->node0"].trace == tr
    assert topo.links["node1->server"].trace is None


@pytest.mark.parametrize(
    ("network", "content", "fragments"),
    [
        ('uplink_trace = "traces/nope.trace"', None, ["network.uplink_trace", "nope.trace", "no such trace file"]),
        ('uplink_trace = "traces/bad.trace"', "", ["network.uplink_trace", "bad.trace: empty trace"]),
        ('downlink_trace = "traces/bad.trace"', "1\n2\nthree\n", ["network.downlink_trace", "bad.trace:3:"]),
        ('uplink_trace = "traces/bad.csv"', "0, 1\n1, -2\n2, 0\n", ["bad.csv:2: mbps(=-2.0) must be >= 0"]),
        ('uplink_trace = "traces/step.csv"\ntopology = "shared-medium"', None, ["topology = 'star'"]),
        ('loss_model = "gilbert-elliott"\nloss = 0.01', None, ["network.loss: loss_model = 'gilbert-elliott'"]),
        ('loss_model = "gilbert-elliott"\nge_p_good_bad = 0', None, ["network.ge_p_good_bad"]),
        ('loss_model = "markov"', None, ["network.loss_model"]),
    ],
)
def test_bad_traces_and_loss_settings_are_config_errors(tmp_path, network, content, fragments) -> None:
    p = scenario_file(tmp_path, network + "\n")
    name = network.split('"')[1] if "traces/" in network else ""
    if content is not None:
        (p.parent / name).write_text(content)
    with pytest.raises(ConfigError) as exc:
        load_scenario(p)
    for fragment in fragments:
        assert fragment in exc.value.message


def test_gilbert_elliott_on_the_node_links(tmp_path: Path) -> None:
    net = 'loss_model = "gilbert-elliott"\nge_p_good_bad = 0.1\nge_p_bad_good = 0.4\nge_loss_bad = 0.5\n'
    topo = build_topology(load_scenario(scenario_file(tmp_path, net)))
    ge = GilbertElliott(0.1, 0.4, 0.0, 0.5)
    assert topo.links["node0.up"].loss_model == ge and topo.links["node1.down"].loss_model == ge
    assert topo.links["server.in"].loss_model is None  # the server's wired link stays lossless


def test_shipped_cellular_scenario_uses_its_traces() -> None:
    s = load_scenario(ROOT / "scenarios" / "cellular_trace.toml")
    up = load_trace(s.network.uplink_trace)
    assert up.mean_rate * 8 / 1e6 == pytest.approx(s.network.uplink_mbps, abs=5e-4)  # the file's stated mean
    down = load_trace(s.network.downlink_trace)
    assert down.mean_rate * 8 / 1e6 == pytest.approx(s.network.downlink_mbps, abs=5e-4)
    assert up.period_s == down.period_s == 20.0


def test_hierarchical_traces_on_the_sensor_tier_and_ring_on_uplinks(tmp_path: Path) -> None:
    net = 'topology = "hierarchical"\ngateways = 1\nuplink_trace = "traces/step.csv"\n'
    topo = build_topology(load_scenario(scenario_file(tmp_path, net)))
    assert topo.links["node0.up"].trace is not None and topo.links["node1.up"].trace is not None
    assert topo.links["gw0.up"].trace is None  # the backhaul keeps its constant rate
    ring_net = 'topology = "ring"\nuplink_trace = "traces/step.csv"\n'
    ring = build_topology(load_scenario(scenario_file(tmp_path, ring_net)))
    assert ring.links["node0->node1"].trace == topo.links["node0.up"].trace  # the same seeded offset of node 0
    with pytest.raises(ConfigError, match="a ring's links take the sending node's uplink_trace"):
        load_scenario(scenario_file(tmp_path, 'topology = "ring"\ndownlink_trace = "traces/step.csv"\n'))


def test_trace_resolution_averages_the_files_trace(tmp_path: Path) -> None:
    net = 'uplink_trace = "traces/m.trace"\ntrace_resolution_ms = 2.0\ntrace_stagger = "none"\n'
    tr = build_topology(load_scenario(scenario_file(tmp_path, net))).links["node0.up"].trace
    assert list(tr.rates) == [pytest.approx(4500 / 0.002), pytest.approx(1500 / 0.002)]  # 3 then 1 packets per 2 ms


@pytest.mark.slow  # four short runs: ~3 s each on a shared 2-core machine
def test_a_constant_trace_runs_byte_identical_to_the_constant_link(tmp_path: Path) -> None:
    from aiotsim.api import run_scenario
    from aiotsim.results.fingerprint import fingerprint_run_dir

    (tmp_path / "one.csv").write_text("0, 1\n5, 0\n")  # 1 Mbit/s, tiny.toml's uplink and downlink rate
    plain = load_scenario(ROOT / "tests" / "tiny.toml", iterations=2)
    traced = load_scenario(
        ROOT / "tests" / "tiny.toml",
        [f'network.uplink_trace="{tmp_path / "one.csv"}"', f'network.downlink_trace="{tmp_path / "one.csv"}"'],
        iterations=2,
    )
    run_scenario(plain, tmp_path / "plain")
    run_scenario(traced, tmp_path / "traced")
    assert fingerprint_run_dir(tmp_path / "plain") == fingerprint_run_dir(tmp_path / "traced")
    (tmp_path / "half.csv").write_text("0, 0.5\n5, 0\n")  # half the rate: the same run takes longer
    half = [f'network.uplink_trace="{tmp_path / "half.csv"}"']
    slow = load_scenario(ROOT / "tests" / "tiny.toml", half, iterations=2)
    assert run_scenario(slow, tmp_path / "slow")["sim_time_s"] > run_scenario(plain, tmp_path / "p2")["sim_time_s"]


def test_trace_paths_set_on_the_command_line_are_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch
) -> None:
    p = scenario_file(tmp_path)
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "mine.csv").write_text(STEP)
    monkeypatch.chdir(tmp_path / "cwd")
    s = load_scenario(p, ["network.uplink_trace=mine.csv"])
    assert Path(s.network.uplink_trace) == (tmp_path / "cwd" / "mine.csv").resolve()
    monkeypatch.chdir(tmp_path)  # the stored scenario still finds it from elsewhere
    assert load_trace(s.network.uplink_trace).rates.tolist() == [1e6, 2e6]  # B/s; the 3 s row ends the loop
    with pytest.raises(ConfigError, match="with --set to the working directory"):
        load_trace("missing.csv")
