"""The aiotsim command's heap policy (aiotsim.sim.allocator.keep_freed_blocks): what it asks glibc
for, when it leaves the allocator alone, and that glibc then serves a block of tens of MB from
the heap instead of a mapping of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from aiotsim import cli
from aiotsim.errors import ConfigError
from aiotsim.sim import allocator


def test_asks_glibc_for_large_heap_blocks_and_a_high_trim_threshold() -> None:
    calls: list[tuple[int, int]] = []
    assert allocator.keep_freed_blocks(lambda p, v: calls.append((p, v)) or 1, environ={})
    # M_MMAP_THRESHOLD (-3): 32 MiB, glibc's largest on 64-bit; M_TRIM_THRESHOLD (-1): 1 GiB
    assert calls == [(-3, 32 * 2**20), (-1, 2**30)]


@pytest.mark.parametrize(
    "environ",
    [
        {"AIOTSIM_MALLOC": "default"},
        {"AIOTSIM_MALLOC": " Default "},
        {"MALLOC_MMAP_THRESHOLD_": "65536"},
        {"MALLOC_TRIM_THRESHOLD_": "0"},
        {"MALLOC_TOP_PAD_": "0"},
    ],
)
def test_leaves_the_allocator_alone_when_told_or_when_the_user_set_glibcs_own(environ: dict[str, str]) -> None:
    calls: list[tuple[int, int]] = []
    assert not allocator.keep_freed_blocks(lambda p, v: calls.append((p, v)) or 1, environ=environ)
    assert calls == []


def test_keep_is_the_default_and_another_value_is_refused() -> None:
    calls: list[tuple[int, int]] = []
    assert allocator.keep_freed_blocks(lambda p, v: calls.append((p, v)) or 1, environ={"AIOTSIM_MALLOC": "keep"})
    assert len(calls) == 2
    with pytest.raises(ConfigError, match=r"AIOTSIM_MALLOC='off': must be 'default' .* or 'keep'"):
        allocator.keep_freed_blocks(lambda p, v: 1, environ={"AIOTSIM_MALLOC": "off"})


def test_the_command_refuses_a_bad_value_with_exit_2() -> None:
    env = {**os.environ, "AIOTSIM_MALLOC": "off"}
    code = "import sys; sys.argv = ['aiotsim', '--help']; from aiotsim.cli import main; main()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 2
    assert "error: AIOTSIM_MALLOC='off': must be 'default'" in done.stderr and "Traceback" not in done.stderr


def test_a_refused_setting_reports_false() -> None:
    assert not allocator.keep_freed_blocks(lambda p, v: 0, environ={})


def test_the_command_sets_it_before_the_cli_and_is_the_console_script(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(allocator, "keep_freed_blocks", lambda: order.append("heap") or True)
    monkeypatch.setattr(cli, "app", lambda: order.append("app"))
    cli.main()
    assert order == ["heap", "app"]
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "aiotsim"]
    assert script.value == "aiotsim.cli:main"


PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None)
try:
    info = libc.mallinfo2
except AttributeError:
    print("no mallinfo2"); sys.exit(0)
class Info(ctypes.Structure):  # struct mallinfo2: ten size_t fields; hblkhd (mapped bytes) is the fifth
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]
info.restype = Info
if sys.argv[1] == "kept":
    from aiotsim.sim.allocator import keep_freed_blocks
    assert keep_freed_blocks()
libc.malloc.restype = ctypes.c_void_p
before = info().hblkhd
block = libc.malloc(20 << 20)
print(info().hblkhd - before)
libc.free(ctypes.c_void_p(block))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_glibc_then_serves_a_20_mb_block_from_the_heap() -> None:
    """In a fresh process glibc maps a 20 MB block apart (its first threshold is 128 KB); after
    keep_freed_blocks it comes from the heap, whose freed memory the next round reuses."""
    out = {}
    for mode in ("default", "kept"):
        done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
        out[mode] = done.stdout.strip()
    if "no mallinfo2" in out.values():
        pytest.skip("not glibc >= 2.33")
    assert int(out["default"]) >= 20 << 20  # its own mapping
    assert int(out["kept"]) == 0  # from the heap
