"""Every built-in codec produces exactly the bytes recorded in ``tests/data/codec_digests.json``
(payloads, heads, residuals, state, generator states and decodes, one node at a time and three at
once, one and two threads, every parameter switch): the reference the codecs were rewritten
against (issue 41), recorded from the code before. FFTs and matrix products round differently on
different CPUs, so the file holds a set per kind of machine, chosen by canary cases (as the run
fingerprints are). A change that alters a codec's bytes on purpose re-records it with
``python tools/codec_digests.py --record`` and says why."""

from __future__ import annotations

import pytest
from conftest import ROOT, load_script

from aiotsim.compress import codec_names

tool = load_script(ROOT / "tools" / "codec_digests.py", "codec_digests_tool")
SETS = tool.load_sets(tool.FIXTURE)


@pytest.fixture(scope="module")
def recorded() -> dict[str, str]:
    """This machine's recorded digests (skips where no set matches its canary cases)."""
    found, _ = tool.machine_set(SETS)
    if found is None:
        pytest.skip(
            f"no recorded codec digest set matches this machine ({tool.machine_name()}): record one with "
            "tools/codec_digests.py --record, from the code before the change under test"
        )
    return found["fingerprints"]


def test_every_set_records_every_codec_and_its_canaries_tell_the_sets_apart() -> None:
    assert SETS
    for s in SETS:
        assert {key.split("|")[0] for key in s["fingerprints"]} == set(codec_names()), s["machine"]
        assert set(tool.CANARIES) <= set(s["fingerprints"])
    assert len({tuple(s["fingerprints"][k] for k in tool.CANARIES) for s in SETS}) == len(SETS)


@pytest.mark.parametrize("name", codec_names())
def test_codec_bytes_are_the_recorded_ones(name: str, recorded: dict[str, str]) -> None:
    got = tool.compute([name])
    want = {k: v for k, v in recorded.items() if k.split("|")[0] == name}
    assert got.keys() == want.keys()  # each codec's own cases, key for key
    differ = sorted(k for k in want if got[k] != want[k])
    assert not differ, f"{len(differ)} of {len(want)} cases differ, e.g. {differ[:3]}"
