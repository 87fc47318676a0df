"""Scenario loading, overrides and validation: every problem reported at once, one per line."""

from __future__ import annotations

import pytest
from conftest import ROOT

from aiotsim.config import Scenario, load_scenario, parse_override, scenario_from_dict
from aiotsim.errors import ConfigError


def test_iot10_loads_with_the_documented_values() -> None:
    sc = load_scenario(ROOT / "scenarios" / "iot10.toml")
    assert sc.nodes.count == 10
    assert sc.model.name == "lenet5"
    assert sc.data.dataset == "mnist"
    assert sc.network.uplink_mbps == 10.0
    assert sc.scenario.iterations == 300


def test_overrides_and_shortcuts(tiny_scenario) -> None:
    sc = load_scenario(
        tiny_scenario, ["network.uplink_mbps=5", "compressor.ratio=0.05"], compressor="topk", iterations=7
    )
    assert sc.network.uplink_mbps == 5.0 and isinstance(sc.network.uplink_mbps, float)
    assert sc.compressor.name == "topk"
    assert sc.compressor.params == {"ratio": 0.05}
    assert sc.scenario.iterations == 7


def test_parse_override_types() -> None:
    assert parse_override("a.b=5") == ("a.b", 5)
    assert parse_override("a.b=0.5") == ("a.b", 0.5)
    assert parse_override("a.b=topk") == ("a.b", "topk")
    assert parse_override('a.b="x y"') == ("a.b", "x y")
    assert parse_override("a.b=true") == ("a.b", True)
    with pytest.raises(ConfigError, match="SECTION.KEY=VALUE"):
        parse_override("novalue")


def test_all_problems_reported_at_once(write_toml) -> None:
    path = write_toml(
        """
[scenario]
iteratoins = 5
[network]
uplink_mbps = -3
latency_ms = "fast"
[compressor]
name = "tpok"
[model]
name = "resnet9000"
"""
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    problems = info.value.problems
    text = "\n".join(problems)
    assert len(problems) == 5, text
    assert "scenario.iteratoins: unknown key (did you mean 'iterations'?)" in text
    assert "network.uplink_mbps: must be > 0, got -3" in text
    assert "network.latency_ms: must be a number, got 'fast'" in text
    assert "unknown compressor 'tpok' (did you mean 'topk'?)" in text
    assert "unknown model 'resnet9000'" in text and "lenet5" in text
    assert all(p.startswith(str(path)) for p in problems)


def test_codec_parameter_problems_are_named(write_toml) -> None:
    path = write_toml('[compressor]\nname = "none"\nratio = 0.1\n')
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    assert exc.value.problems == [f"{path}: compressor.ratio: unknown key; valid: none"]


def test_unknown_section_and_cross_checks(write_toml) -> None:
    path = write_toml("[netwrok]\nmtu = 1500\n[network]\nmtu = 500\nheader_bytes = 600\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    text = "\n".join(info.value.problems)
    assert "[netwrok]: unknown section (did you mean 'network'?)" in text
    assert "header_bytes: must be < network.mtu (=500)" in text


def test_missing_and_malformed_files(tmp_path, write_toml) -> None:
    with pytest.raises(ConfigError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_scenario(write_toml("[scenario\n"))


def test_resolved_toml_round_trips(tiny_scenario) -> None:
    sc = load_scenario(tiny_scenario, ["compressor.ratio=0.25"], compressor="topk")
    import tomllib

    again = scenario_from_dict(tomllib.loads(sc.to_toml()))
    assert again == sc
    assert isinstance(Scenario().replace(**{"nodes.count": 3}).nodes.count, int)


@pytest.mark.parametrize("name", ["custom.toml", "hetero_async.toml", "hierarchical.toml"])
def test_blocks_round_trip_through_the_resolved_toml(name) -> None:
    import tomllib

    sc = load_scenario(ROOT / "scenarios" / name)
    assert scenario_from_dict(tomllib.loads(sc.to_toml())) == sc


def test_groups_and_links_are_dataclasses(write_toml) -> None:
    from aiotsim.config import LinkSpec, NodeGroup

    sc = load_scenario(ROOT / "scenarios" / "hetero_async.toml")
    assert sc.nodes.group and all(isinstance(g, NodeGroup) for g in sc.nodes.group)
    assert sum(g.count for g in sc.nodes.group) == sc.nodes.count
    sc = load_scenario(ROOT / "scenarios" / "custom.toml")
    assert all(isinstance(link, LinkSpec) for link in sc.network.link)
    assert sc.to_dict()["network"]["link"][0]["from"] == "node0"


def test_every_field_states_its_help_and_bounds_are_checked() -> None:
    import dataclasses

    from aiotsim.config import BLOCKS, SECTIONS

    classes = [*SECTIONS.values(), *(c for blocks in BLOCKS.values() for c in blocks.values())]
    for cls in classes:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"


def test_config_does_not_import_the_simulation() -> None:
    import ast

    tree = ast.parse((ROOT / "aiotsim" / "config.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert not [m for m in imported if m.startswith("aiotsim.sim")]


def test_group_totals_and_partial_k(write_toml) -> None:
    base = "[nodes]\ncount = 4\n"
    with pytest.raises(ConfigError, match=r"nodes.count: must equal the sum of the groups' counts \(=3\)"):
        load_scenario(write_toml(base + "[[nodes.group]]\ncount = 1\n[[nodes.group]]\ncount = 2\n"))
    sc = load_scenario(write_toml(base + '[training]\nmode = "partial"\n'))
    assert sc.training.partial_k == 0  # the strategy's default: half the nodes, rounded up
