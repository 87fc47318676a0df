"""Resume in the modes whose state lives in the network: Gilbert-Elliott losses are drawn from
their own generator (and may be drawn ahead for a send to come); a resumed run that started it
afresh took other losses, so simulated time, communication and energy differed from the first row
after the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiotsim.config import load_scenario
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.sim.checkpoint import CHECKPOINT_NAME, load
from tests.test_checkpoint import killed_and_resumed

ROOT = Path(__file__).parent.parent
GE = ["network.loss_model=gilbert-elliott", "network.ge_p_good_bad=0.05", "network.ge_loss_bad=0.4"]


@pytest.mark.parametrize(
    "over",
    [
        [],  # fluid transfers: their retransmissions drawn from the chains (retransmitted_packets)
        ["network.transport=tcp"],  # TCP: each round's first loss drawn from the chains
        ["network.transport=tcp", "training.mode=partial", "training.partial_k=3", "nodes.count=3"],
        ["training.mode=federated", "nodes.count=5", "nodes.per_round=2", "training.local_steps=2"],
    ],
    ids=["sync-fluid", "sync-tcp", "partial-tcp", "federated"],
)
def test_gilbert_elliott_resumes_exactly(tiny_scenario: Path, tmp_path: Path, over: list[str]) -> None:
    sc = load_scenario(tiny_scenario, [*GE, *over, "scenario.iterations=6"])
    ref, crash = killed_and_resumed(sc, tmp_path, every=2, kill=5)
    assert load(crash / CHECKPOINT_NAME)["iteration"] == 3
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)
    assert (crash / "trace.json").read_bytes() == (ref / "trace.json").read_bytes()


def test_shipped_cellular_trace_resumes_exactly(tmp_path: Path) -> None:
    # the shipped scenario (traced links, Gilbert-Elliott loss), cut to 3 nodes and 5 iterations
    sc = load_scenario(ROOT / "scenarios" / "cellular_trace.toml", ["nodes.count=3", "scenario.iterations=5"])
    ref, crash = killed_and_resumed(sc, tmp_path, every=2, kill=4)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)
