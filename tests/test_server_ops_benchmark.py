"""benchmarks/server_ops.py: the server's dispatched operations per round, batched and per message.

The batched decode's count does not grow with the number of messages for a fixed-size codec in
the stacked form (one batch per layer; sparse codecs: one per layer and index coding), while
decoding message by message adds the same number of operations for every message; the streamed
form folds a chunk of messages with one decode per layer and one float64 scan per short layer (on
the CPU a layer of CPU_SCAN_MAX_VALUES values or more is added row by row: one add per message).
"""

from __future__ import annotations

import pytest
from conftest import ROOT, load_script

from aiotsim.compress import build_codec
from aiotsim.compress.aggregation import CPU_SCAN_MAX_VALUES
from aiotsim.learn.models import build_model, layer_infos


@pytest.mark.parametrize("name", ["2bit", "none", "topk"])
def test_batched_ops_do_not_grow_with_the_messages_and_per_message_ones_do(name: str) -> None:
    ops = load_script(ROOT / "benchmarks" / "server_ops.py", "server_ops")
    layers = layer_infos(build_model("lenet5", (1, 28, 28), 10, seed=0))
    codec = build_codec(name, seed=0)
    rounds = {n: ops.round_messages(codec, layers, n) for n in (10, 20)}
    stacked = {n: ops.count(codec, layers, m, False)[0] for n, m in rounds.items()}
    streamed = {n: ops.count(codec, layers, m, True)[0] for n, m in rounds.items()}
    with ops.one_by_one():
        before = {n: ops.count(codec, layers, m, False)[0] for n, m in rounds.items()}
    per_message = (before[20] - before[10]) / 10
    assert per_message > 4 * len(layers)  # several per message and layer
    if name == "topk":  # one batch per layer and index coding: more messages, a few more codings
        assert stacked[20] - stacked[10] < per_message  # 10 messages more cost less than one did
    else:
        assert per_message == int(per_message)  # the same operations for every message
        assert stacked[20] == stacked[10]  # one batch per layer, whatever the count
        # one chunk (67 LeNet-5 messages): one decode per layer, one scan per short layer, and an
        # add per message of each long one (LeNet-5's conv2 and fc1, fc2 weights: 3 layers)
        long = sum(layer.numel >= CPU_SCAN_MAX_VALUES for layer in layers)
        assert long == 3 and streamed[20] - streamed[10] == 10 * long
