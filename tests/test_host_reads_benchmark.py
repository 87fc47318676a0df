"""benchmarks/host_reads.py counts the torch calls that read values on the host (each a GPU sync
on CUDA): hand cases, and the batched encode's reads not growing with the node count."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from conftest import ROOT, load_script

from aiotsim.compress import codec_names, get_codec_class
from aiotsim.compress.base import LayerInfo
from aiotsim.compress.packing import encode_indices
from aiotsim.compress.registry import row_codecs
from aiotsim.compress.sparsify import mask_indices, random_subset


def host_reads_module():
    """benchmarks/host_reads.py as a module."""
    return load_script(ROOT / "benchmarks" / "host_reads.py", "host_reads_benchmark")


def test_reads_are_counted_by_call_and_aiotsim_site() -> None:
    hr = host_reads_module()
    with hr.HostReads() as mode:
        encode_indices(torch.tensor([0, 999_999]), 1_000_000)  # int(largest gap): one read
        x = torch.arange(6.0)
        x[x > 2].sum().item()  # here, outside aiotsim: site "?"
        torch.ones(3).add_(1)  # no read
    assert {(name, site.split(":")[0]) for name, site in mode.calls} == {
        ("__int__", "packing.py"),
        ("bool index", "?"),
        ("item", "?"),
    }
    assert sum(mode.calls.values()) == 3


def _codec_reads(calls) -> int:
    """Reads made in the codec package: the nodes' encodes and the server's decodes."""
    return sum(k for (_, site), k in calls.items() if site.split(":")[0] in CODEC_FILES)


CODEC_FILES = {"packing.py", "batch.py", "rowwise.py", "sparsify.py", "sparse.py"}  # rowwise: top_rows


@pytest.mark.slow
def test_batched_encode_reads_do_not_grow_with_the_fleet() -> None:
    """A star of 20 and of 40 nodes (iot1000.toml's settings) with top-k, one iteration, LeNet-5's
    10 layers. Per layer, whatever the node count: the batched encode reads the host twice (the
    top-k selection's nonzero, the index codings' largest gaps) and the server's aggregated-size
    message once (its largest gap; its indices come from nonzero, ascending, so no sort check).
    The server's decode of each message reads nothing: it parses the index header from the
    payload's host copy (it read the 6 header bytes of every message and layer before, 200 more
    reads for 20 more nodes). Each node's own encode adds exactly two per layer and node: its
    selection's nonzero (the count is known, but nonzero's output size is data-dependent) and the
    largest gap that picks the index coding; no tie count (a tensor now) and no sort check.
    The batched reads are per pass (a sync round encodes each pass as it is computed): passes of
    64 nodes, as a GPU's budget gives, hold either fleet; passes of 20 (the CPU's 128 MiB holds 27
    LeNet-5 nodes at batch 32) make 40 nodes 2 passes, 2 more reads per layer."""
    hr = host_reads_module()
    batched = [_codec_reads(hr.count(n, "topk", 1, True, chunk=64).calls) for n in (20, 40)]
    looped = [_codec_reads(hr.count(n, "topk", 1, False).calls) for n in (20, 40)]
    assert batched == [3 * 10, 3 * 10]
    assert _codec_reads(hr.count(40, "topk", 1, True, chunk=20).calls) == (2 * 2 + 1) * 10
    assert looped[1] - looped[0] == 2 * 20 * 10


# every codec at its defaults, plus the quantized routes of threshold and variance
DECODED = [(n, {}) for n in codec_names()] + [("threshold", {"quantize": True}), ("variance", {"quantize": False})]


@pytest.mark.parametrize(("name", "params"), DECODED, ids=[f"{n}{'-' if p else ''}" for n, p in DECODED])
def test_decoders_read_nothing_back(name: str, params: dict[str, object]) -> None:
    """The server decodes every message it receives: on a GPU a read of the payload's values on
    the host (an index header, a seed, a scale) would wait for the device once per message and
    layer. Decoders parse headers from the payload's host copies (``Payload.heads``) and apply
    scales on the device. Exempt: random-k regenerates its index set on a CPU generator by
    design (``random_subset``: host work, not a device read)."""
    hr = host_reads_module()
    lines, first = inspect.getsourcelines(random_subset)
    exempt = {f"sparsify.py:{line}" for line in range(first, first + len(lines))}
    cls = get_codec_class(name)
    codec = cls(cls.Params(**params), seed=1)
    reads = 0
    for layer in LAYERS:  # conv, fc and bias: hylo's three routes
        state = codec.init_state(layer, torch.device("cpu"), 0)
        for step in range(2):
            grad = torch.randn(layer.shape, generator=torch.Generator().manual_seed(step)) * 0.01
            if codec.needs_sq_grad:
                state.sq_grad = grad.square()
            payload = codec.encode(grad, layer, state)
            with hr.HostReads() as mode:
                codec.decode(payload, layer)
                codec.decode_read(payload, layer)
            reads += sum(k for (_, site), k in mode.calls.items() if site not in exempt)
    assert reads == 0


@pytest.mark.parametrize(("name", "params"), DECODED, ids=[f"{n}{'-' if p else ''}" for n, p in DECODED])
def test_batched_decode_reads_nothing_back(name: str, params: dict[str, object]) -> None:
    """The server's batched decode of a layer's messages (counts that differ by message, zero
    gradients among them) reads nothing on the host either. Exempt: random-k's CPU draw (as
    above) and ``mask_indices``' CPU branch, ``nonzero``, which off the CPU is ``nonzero_static``
    of the count the host knows."""
    hr = host_reads_module()
    exempt = set()
    for fn in (random_subset, mask_indices):
        lines, first = inspect.getsourcelines(fn)
        exempt |= {f"{Path(inspect.getfile(fn)).name}:{line}" for line in range(first, first + len(lines))}
    cls = get_codec_class(name)
    codec = cls(cls.Params(**params), seed=1)
    reads = 0
    for layer in LAYERS:
        payloads = []
        for node in range(6):
            state = codec.init_state(layer, torch.device("cpu"), node)
            grad = torch.randn(layer.shape, generator=torch.Generator().manual_seed(node)) * (node % 3)
            if codec.needs_sq_grad:
                state.sq_grad = grad.square()
            payloads.append(codec.encode(grad, layer, state))
        with hr.HostReads() as mode:
            codec.decode_many(payloads, layer)
        reads += sum(k for (_, site), k in mode.calls.items() if site not in exempt)
    assert reads == 0


LAYERS = [
    LayerInfo("conv2.weight", (16, 6, 5, 5), kind="conv", index=2),
    LayerInfo("fc1.weight", (120, 400), kind="fc", index=4),
    LayerInfo("fc1.bias", (120,), kind="bias", index=5),
]


# modules of aiotsim.compress whose file names no other aiotsim package uses (sites are file:line)
_ELSEWHERE = {p.name for p in (ROOT / "aiotsim").rglob("*.py") if p.parent.name != "compress"}
COMPRESS_FILES = {p.name for p in (ROOT / "aiotsim" / "compress").glob("*.py")} - _ELSEWHERE


@pytest.mark.slow
@pytest.mark.parametrize("codec", row_codecs())
def test_batched_codecs_read_the_host_per_layer_not_per_node(codec: str) -> None:
    """A sync round on a star with ``nodes.batched = true``, 4 and 8 nodes, LeNet-5's 10 layers:
    the codec package's host reads (encodes at dispatch, the server's decodes, its aggregate's
    message) grow by less than one per added node and layer (the server's own message may take a
    read more or less on a layer as its union grows); per-node reads would add at least 40.
    Random-k adds exactly one per node and layer: each node draws its seed from its own
    generator (its subset is then drawn on a CPU generator: host work, not a device read)."""
    hr = host_reads_module()
    lines, first = inspect.getsourcelines(random_subset)
    exempt = {f"sparsify.py:{line}" for line in range(first, first + len(lines))}

    def reads(n: int) -> int:
        calls = hr.count(n, codec, 1, True).calls.items()
        return sum(k for (_, site), k in calls if site.split(":")[0] in COMPRESS_FILES and site not in exempt)

    growth = reads(8) - reads(4)
    seeds = 4 * 10 if codec == "randomk" else 0
    # a read more or less per layer as the data changes (fft: the server decodes a bitmap-coded
    # bin set with a nonzero, a read; 4 nodes' messages had one, 8 nodes' none); random-k: its seeds
    low = seeds if codec == "randomk" else -10
    assert low <= growth < seeds + 4 * 10
