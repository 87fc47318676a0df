"""benchmarks/scale.py counts the run's work that its bare loop repeats.

The stacked aggregation decodes through ``decode_read`` (for ``none`` a view of the payload, no
``decode`` call at all); the bare loop must still get one decode per message and layer, or the
ratio would compare the run against less work than it did.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _scale_module():
    spec = importlib.util.spec_from_file_location("scale_benchmark", ROOT / "benchmarks" / "scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["none", "topk"])
def test_a_star_rounds_work_is_counted_for_the_bare_loop(codec: str) -> None:
    """iot10, one sync iteration: 10 gradients, 10 x 10 layer encodes at the nodes, and the
    server decodes each of the 10 messages' 10 layers once (LeNet-5: 5 weights + 5 biases)."""
    from aiotsim.network.flows import Network

    send = Network.send
    row = _scale_module().run_case(10, codec, "star", 1, repeats=2)
    # per repeat: a second repeat's work is not added to the first's
    assert (row["gradients"], row["encodes"], row["decodes"]) == (10, 100, 100)
    assert row["status"] == "complete" and row["bare_s"] > 0 and row["cpu_ratio"] > 0
    assert row["repeats"] == 2 and len(row["ratios"]) == 2
    assert Network.send is send  # the timing wrappers are taken off after each repeat
