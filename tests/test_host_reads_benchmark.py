"""benchmarks/host_reads.py counts the torch calls that read values on the host (each a GPU sync
on CUDA): hand cases, and the batched encode's reads not growing with the node count."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, load_script

from aiotsim.compress.packing import encode_indices


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


CODEC_FILES = {"packing.py", "batch.py", "sparsify.py", "sparse.py"}


@pytest.mark.slow
def test_batched_encode_reads_do_not_grow_with_the_fleet() -> None:
    """A star of 20 and of 40 nodes (iot1000.toml's settings) with top-k, one iteration, LeNet-5's
    10 layers. Per layer, whatever the node count: the batched encode reads the host twice (the
    top-k selection's nonzero, the index codings' largest gaps) and the server's aggregated-size
    message twice (its sort check and largest gap). The server's decode of each message reads
    nothing: it parses the index header from the payload's host copy (it read the 6 header bytes
    of every message and layer before, 200 more reads for 20 more nodes). Each node's own encode
    adds several per layer and node."""
    hr = host_reads_module()
    batched = [_codec_reads(hr.count(n, "topk", 1, True).calls) for n in (20, 40)]
    looped = [_codec_reads(hr.count(n, "topk", 1, False).calls) for n in (20, 40)]
    assert batched == [4 * 10, 4 * 10]
    assert looped[1] - looped[0] >= 3 * 20 * 10
