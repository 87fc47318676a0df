"""Plugins (issue 41 items 3 and 6): a codec or a server optimizer named ``"module:Class"`` or
installed under an entry point works wherever a built-in does.

The plugin codec, ``HalfCast``, is the built-in ``fp16`` written outside the package (fp16 of
``scale * grad``, divided by ``scale`` on decode): with ``scale = 1`` (exact in fp32 and fp16) it
must reproduce ``fp16``'s run bit for bit. The plugin server optimizer ``HalfAvg`` moves the model by
half the server learning rate, so with ``server_lr = 1`` it equals the built-in ``avg`` at 0.5.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import aiotsim
from aiotsim import plugins
from aiotsim.api import resume_run, run_scenario
from aiotsim.cli import app
from aiotsim.compress.registry import codec_names, codec_plugin
from aiotsim.config import load_scenario
from aiotsim.errors import ConfigError
from aiotsim.records import Progress
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.results.store import read_summary

pytestmark = pytest.mark.usefixtures("one_torch_thread")
runner = CliRunner()
WIDE = {"COLUMNS": "250"}
MOD = "halfcast_plugin"
REF = f"{MOD}:HalfCast"

PLUGIN = '''
from dataclasses import dataclass

import torch

from aiotsim.compress import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.packing import pack_f16, unpack_f16
from aiotsim.schema import opt, positive
from aiotsim.sim.server_opt import ServerOptimizer


class HalfCast(Codec[CodecState]):
    """fp16 of scale * gradient (a test plugin)."""

    @dataclass(frozen=True)
    class Params:
        scale: float = opt(1.0, "multiply before the fp16 cast, divide after; > 0", check=positive)

    name = "halfcast"
    summary = "test plugin: fp16 of scale * gradient"
    encode_flops_per_element = 2.0  # as fp16's: the simulated encode time is the same too

    def _encode(self, acc, grad, layer, state):
        return Payload({"values": pack_f16(grad * self.params.scale)}), None

    def decode(self, payload, layer):
        values = unpack_f16(payload.buffers["values"]) / self.params.scale
        return values.view(layer.shape).to(layer.dtype)


class HalfAvg(ServerOptimizer):
    """FedAvg with half the server learning rate."""

    @torch.no_grad()
    def step(self, d):
        torch._foreach_add_(self.params, [g.to(p.dtype) for p, g in zip(self.params, d)], alpha=-0.5 * self.lr)


class HalfMomentum(ServerOptimizer):
    """FedAvgM with half the server learning rate; its velocity lives in self.m (checkpointed)."""

    @torch.no_grad()
    def step(self, d):
        if self.m is None:
            self.m = [torch.zeros_like(p) for p in self.params]
        torch._foreach_mul_(self.m, self.beta1)
        torch._foreach_add_(self.m, [g.to(p.dtype) for p, g in zip(self.params, d)])
        torch._foreach_add_(self.params, self.m, alpha=-0.5 * self.lr)


class NotACodec:
    pass
'''


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the plugin module, on sys.path and PYTHONPATH (for subprocesses)."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / f"{MOD}.py").write_text(PLUGIN)
    (folder / "broken_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    # the modules these tests may import by reference (workers inherit it); nope_mod stays out
    monkeypatch.setenv("AIOTSIM_PLUGINS", f"{MOD},broken_plugin,no_such_plugin_mod")
    for name in (MOD, "broken_plugin"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    plugins.clear_cache()
    yield folder
    plugins.clear_cache()


def _final(run_dir: Path) -> tuple[str, str]:
    """The fingerprints of a run's per-iteration and evaluation rows (the summary names the codec)."""
    f = fingerprint_run_dir(run_dir)
    return f["metrics.csv"], f["evals.csv"]


def test_cli_run_equals_builtin_fp16(plugin_path: Path, tiny_scenario: Path, tmp_path: Path) -> None:
    out = {}
    for codec in ("fp16", REF):
        out[codec] = tmp_path / codec.replace(":", "_")
        r = runner.invoke(app, ["run", str(tiny_scenario), "-c", codec, "-o", str(out[codec])], env=WIDE)
        assert r.exit_code == 0, r.output
    assert read_summary(out[REF])["compressor"] == REF  # the run directory names the plugin
    assert _final(out[REF]) == _final(out["fp16"])


def test_api_codec_class(plugin_path: Path, tiny_scenario: Path, tmp_path: Path) -> None:
    from halfcast_plugin import HalfCast

    # tiny.toml's codec is "none": its parameters (none) give way to the plugin's
    aiotsim.run(tiny_scenario, out_dir=tmp_path / "a", codec=HalfCast, overrides={"compressor.scale": 1.0})
    assert f'name = "{REF}"' in (tmp_path / "a" / "scenario.toml").read_text()
    assert read_summary(tmp_path / "a")["compressor"] == REF
    aiotsim.run(tiny_scenario, out_dir=tmp_path / "b", overrides={"compressor.name": "fp16"})
    assert _final(tmp_path / "a") == _final(tmp_path / "b")
    with pytest.raises(ConfigError, match="must be a subclass of aiotsim.compress.base.Codec"):
        aiotsim.run(tiny_scenario, out_dir=tmp_path / "c", codec=dict)  # type: ignore[arg-type]


def test_validate_checks_plugin_params(plugin_path: Path, tiny_scenario: Path) -> None:
    r = runner.invoke(app, ["validate", str(tiny_scenario), "-c", REF, "--set", "compressor.scal=2"], env=WIDE)
    assert r.exit_code == 2
    assert "compressor.scal" in r.output and "did you mean 'scale'" in r.output
    r = runner.invoke(app, ["validate", str(tiny_scenario), "-c", REF, "--set", "compressor.scale=-1"], env=WIDE)
    assert r.exit_code == 2 and "compressor.scale" in r.output
    assert runner.invoke(app, ["validate", str(tiny_scenario), "-c", REF], env=WIDE).exit_code == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("no_such_plugin_mod:X", "cannot import module 'no_such_plugin_mod': ModuleNotFoundError"),
        ("broken_plugin:X", "cannot import module 'broken_plugin': RuntimeError: boom at import"),
        (f"{MOD}:NotACodec", "is not a subclass of aiotsim.compress.base.Codec"),
        (f"{MOD}:HalfCats", "has no attribute 'HalfCats' (did you mean 'HalfCast'?); its compressor classes: HalfCast"),
    ],
)
def test_bad_plugin_is_a_clear_exit_2(plugin_path: Path, tiny_scenario: Path, name: str, expected: str) -> None:
    r = runner.invoke(app, ["validate", str(tiny_scenario), "-c", name], env=WIDE)
    assert r.exit_code == 2
    text = " ".join(r.output.split())  # unwrapped
    assert "compressor.name" in text and expected in text and "Traceback" not in text


def test_compare_jobs_2_imports_the_plugin_in_workers(plugin_path: Path, tiny_scenario: Path, tmp_path: Path) -> None:
    # a fresh process as a user's shell starts it: the plugin is found through PYTHONPATH only
    code = "from aiotsim.cli import main; main()"
    cmd = [sys.executable, "-c", code, "compare", str(tiny_scenario), "-c", f"fp16,{REF}", "-n", "2"]
    done = subprocess.run([*cmd, "--jobs", "2", "-o", str(tmp_path / "cmp")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (fp16,) = (tmp_path / "cmp" / "fp16").glob("seed*")
    (plug,) = [p for d in (tmp_path / "cmp").iterdir() if d.name.startswith(MOD) for p in d.glob("seed*")]
    assert _final(plug) == _final(fp16)


def test_sweep_over_a_plugin(plugin_path: Path, tmp_path: Path) -> None:
    from conftest import run_tiny_sweep

    sweep = run_tiny_sweep(tmp_path, f'"compressor.name" = ["fp16", "{REF}"]')
    runs = [p.parent for p in sweep.rglob("summary.json")]
    assert sorted(read_summary(r)["compressor"] for r in runs) == sorted(["fp16", REF])
    assert len({_final(r) for r in runs}) == 1


def test_checkpoint_and_resume(plugin_path: Path, tiny_scenario: Path, tmp_path: Path) -> None:
    sc = load_scenario(tiny_scenario, ["scenario.iterations=6"], compressor=REF)
    ref, crash = tmp_path / "ref", tmp_path / "crash"
    run_scenario(sc, ref)

    def kill(p: Progress) -> None:
        if p.iteration == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(sc, crash, on_progress=kill, checkpoint_every=2)
    sys.modules.pop(MOD)  # the resume imports the plugin again, by the name the run dir stores
    resume_run(crash)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


def test_compressors_lists_origins(plugin_path: Path, tmp_path: Path, wide_cli: None) -> None:
    dist = plugin_path / "fakecodecs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakecodecs\nVersion: 1.0\n")
    entries = f"[aiotsim.codecs]\nhalfcast-ep = {REF}\n[aiotsim.server_optimizers]\nhalf-avg = {MOD}:HalfAvg\n"
    (dist / "entry_points.txt").write_text(entries)
    plugins.clear_cache()
    assert "halfcast-ep" in codec_names() and "topk" in codec_names()
    assert codec_plugin("halfcast-ep").origin == "entry point fakecodecs"
    r = runner.invoke(app, ["compressors", REF], env=WIDE)
    assert r.exit_code == 0, r.output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in r.output.splitlines() if "│" in line}
    assert rows["topk"] == "built-in"
    assert rows["halfcast-ep"] == "entry point fakecodecs"
    assert rows[REF] == "module path"
    assert runner.invoke(app, ["compressors", "nope_mod:X"], env=WIDE).exit_code == 2
    from aiotsim.sim.server_opt import server_optimizer_plugin

    assert server_optimizer_plugin("half-avg").origin == "entry point fakecodecs"
    with pytest.raises(ConfigError, match="did you mean 'half-avg'"):
        server_optimizer_plugin("half-agv")


def test_server_optimizer_plugin(plugin_path: Path, tiny_scenario: Path, tmp_path: Path) -> None:
    fed = ["training.mode=federated", "training.local_steps=2"]
    plug = load_scenario(tiny_scenario, [*fed, f"training.server_optimizer={MOD}:HalfAvg", "training.server_lr=1.0"])
    avg = load_scenario(tiny_scenario, [*fed, "training.server_optimizer=avg", "training.server_lr=0.5"])
    run_scenario(plug, tmp_path / "plug")
    run_scenario(avg, tmp_path / "avg")
    assert _final(tmp_path / "plug") == _final(tmp_path / "avg")
    run_scenario(load_scenario(tiny_scenario, [*fed, "training.server_lr=1.0"]), tmp_path / "full")
    assert _final(tmp_path / "full") != _final(tmp_path / "avg")  # the step size shows in the results
    with pytest.raises(ConfigError, match="did you mean 'adam'"):
        load_scenario(tiny_scenario, [*fed, "training.server_optimizer=adma"])
    with pytest.raises(ConfigError, match="training.server_optimizer: .*not a subclass of"):
        load_scenario(tiny_scenario, [*fed, f"training.server_optimizer={MOD}:HalfCast"])


def test_reference_syntax() -> None:
    assert plugins.is_reference("a.b:C") and plugins.is_reference("a:B.C")
    assert not plugins.is_reference("topk") and not plugins.is_reference(":C") and not plugins.is_reference("a:")
    from aiotsim.compress.dense import HalfPrecision

    assert plugins.reference_of(HalfPrecision) == "aiotsim.compress.dense:HalfPrecision"


def test_server_optimizer_plugin_state_resumes(plugin_path: Path, tiny_scenario: Path, tmp_path: Path) -> None:
    """HalfMomentum at server_lr 1 is the built-in momentum at 0.5; its velocity (self.m) goes
    through a checkpoint: killed after round 5 and resumed, the run equals the uninterrupted one."""
    fed = ["training.mode=federated", "training.local_steps=2", "scenario.iterations=6"]
    plug = load_scenario(tiny_scenario, [*fed, f"training.server_optimizer={MOD}:HalfMomentum"])
    builtin = load_scenario(tiny_scenario, [*fed, "training.server_optimizer=momentum", "training.server_lr=0.5"])
    ref, crash, mom = tmp_path / "ref", tmp_path / "crash", tmp_path / "mom"
    run_scenario(plug, ref)
    run_scenario(builtin, mom)
    assert _final(ref) == _final(mom)

    def kill(p: Progress) -> None:
        if p.iteration == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(plug, crash, on_progress=kill, checkpoint_every=2)
    resume_run(crash)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


def test_a_reference_the_user_did_not_allow_is_refused_unimported(
    plugin_path: Path, tmp_path: Path, tiny_scenario: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scenario file may not run code on its own: naming a module is not enough to import it."""
    marker = tmp_path / "imported"
    (plugin_path / "side_effect_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.delitem(sys.modules, "side_effect_mod", raising=False)
    with pytest.raises(ConfigError, match="AIOTSIM_PLUGINS=side_effect_mod"):
        load_scenario(tiny_scenario, ["compressor.name=side_effect_mod:X"])
    with pytest.raises(ConfigError, match="not allowed to be imported"):
        load_scenario(tiny_scenario, ["training.mode=federated", "training.server_optimizer=side_effect_mod:X"])
    assert not marker.exists()
    monkeypatch.setenv("AIOTSIM_PLUGINS", "side_effect_mod")  # allowed: imported (and then refused: no X)
    with pytest.raises(ConfigError, match="has no attribute 'X'"):
        load_scenario(tiny_scenario, ["compressor.name=side_effect_mod:X"])
    assert marker.exists()
