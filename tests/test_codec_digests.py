"""Every built-in codec produces exactly the bytes recorded in ``tests/data/codec_digests.json``
(payloads, heads, residuals, state, generator states and decodes, one node at a time and three at
once, one and two threads, every parameter switch): the reference the codecs were rewritten
against (issue 41), recorded from the code before. A change that alters a codec's bytes on purpose
re-records it with ``python tools/codec_digests.py --record`` and says why."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, load_script

from aiotsim.compress import codec_names

tool = load_script(ROOT / "tools" / "codec_digests.py", "codec_digests_tool")
RECORDED = json.loads(tool.FIXTURE.read_text())


def test_every_codec_and_case_is_recorded() -> None:
    recorded = {key.split("|")[0] for key in RECORDED}
    assert recorded == set(codec_names())  # each codec's own cases: compared key for key below


@pytest.mark.parametrize("name", codec_names())
def test_codec_bytes_are_the_recorded_ones(name: str) -> None:
    got = tool.compute([name])
    want = {k: v for k, v in RECORDED.items() if k.split("|")[0] == name}
    assert got.keys() == want.keys()
    differ = sorted(k for k in want if got[k] != want[k])
    assert not differ, f"{len(differ)} of {len(want)} cases differ, e.g. {differ[:3]}"
