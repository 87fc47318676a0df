"""Command-line arguments at their edges, and two runs into one directory.

Each argument case must exit 0 or 2 with a message (never a traceback, a crash or a hang); the
``--out`` cases must also leave the current directory's files alone. The concurrent case starts two
real ``aiotsim run`` processes into one ``--out``: the second must refuse with exit 2 while the
first holds the directory.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from fuzz.execute import Outcome, call_process

TINY = str(Path(__file__).resolve().parents[2] / "tests" / "tiny.toml")
# cases that must be refused (exit 2), not merely end cleanly: the issue's --out "" and --threads 1e9
MUST_REFUSE = ("run --out ''", "run --threads 1000000000", "run --threads 2**40", "run --out '/dev/null'")
SENTINEL = "checkpoint.pt"  # a file in the working directory that no command may delete or change


def argument_cases(work: Path) -> list[tuple[str, list[str]]]:
    """``(name, argv)`` of every argument case; files they need are made under ``work``."""
    (work / "afile").write_text("x")
    (work / "emptydir").mkdir(exist_ok=True)
    run = ["run", TINY, "-n", "1", "-q", "--device", "cpu"]
    out = ["--out", str(work / "o")]
    cases = [(f"run --threads {t}", [*run, *out, "--threads", t])
             for t in ("0", "-1", "1000000000", "abc", "", "1e3", "auto", " 2", "2**40")]  # fmt: skip
    cases += [(f"run --out {o!r}", [*run, "--out", o]) for o in ("", ".", "/dev/null", str(work / "afile"))]
    cases += [(f"run -n {n}", [*run, *out, "-n", n]) for n in ("0", "-1", "10000000", "1.5", "")]
    cases += [(f"run --checkpoint-every {k}", [*run, *out, "--checkpoint-every", k]) for k in ("-1", "x", "10**9")]
    cases += [(f"run --resume {r}", ["run", "--resume", r, "-q"])
              for r in ("", str(work / "nowhere"), str(work / "afile"), str(work / "emptydir"), "/")]  # fmt: skip
    cases += [(f"run --set {s}", [*run, *out, "--set", s])
              for s in ("x", "=1", "nodes.count=", "nodes.count=1e400", "a.b.c.d=1", "nodes=1", "nodes.count=[]",
                        "network.uplink_trace=/dev/zero", "data.path=/proc/self/environ")]  # fmt: skip
    cases += [(f"run --device {d}", [*run, *out, "--device", d]) for d in ("tpu", "cuda:99", "", "meta")]
    cmp = ["compare", TINY, "-n", "1", "-q", "--device", "cpu", "--out", str(work / "cmp")]
    cases += [(f"compare -c {c!r}", [*cmp, "-c", c]) for c in ("", ",", "none,none", "nosuch", "none,,2bit")]
    cases += [(f"compare --jobs {j}", [*cmp, "-c", "none", "--jobs", j]) for j in ("0", "-1", "100000", "x")]
    cases += [(f"compare --baseline {b}", [*cmp, "-c", "none", "--baseline", b]) for b in ("topk", "")]
    cases += [(f"compare --modes {m}", [*cmp, "-c", "none", "--modes", m]) for m in ("nosuch", "ring,sync", ",")]
    cases += [(f"plot {p}", ["plot", p, "--out", str(work / "plots")])
              for p in (str(work / "emptydir"), str(work / "afile"), str(work / "nowhere"), "/dev/null",
                        "")]  # fmt: skip
    cases += [(f"plot --formats {f}", ["plot", str(work / "emptydir"), "--out", str(work / "p"), "--formats", f])
              for f in ("", "exe", "png,../x", "pdf")]  # fmt: skip
    cases += [(f"sweep {s}", ["sweep", s, "--dry-run"]) for s in (TINY, str(work / "afile"), "/dev/null", "")]
    cases += [(f"validate {v}", ["validate", v]) for v in ("", "/dev/zero", "/", str(work / "afile"), "/dev/null")]
    cases += [("models --input", ["models", "--input", "0,0,0"]), ("models --classes", ["models", "--classes", "1"])]
    return cases


def concurrent_runs(work: Path) -> tuple[list[str], Outcome, Outcome]:
    """Two real runs into one ``--out``: ``(problems, first, second)``."""
    long = work / "long.toml"
    long.write_text(Path(TINY).read_text().replace("iterations = 4", "iterations = 3000"))
    args = ["run", str(long), "-q", "--device", "cpu", "--threads", "1", "--out", str(work / "shared")]
    import subprocess
    import sys

    env_cmd = [sys.executable, "-c", "from aiotsim.cli import main; main()", *args]
    first = subprocess.Popen(env_cmd, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (work / "shared" / "metrics.csv").exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.1)
    second = call_process(args, 60, work)
    first.terminate()
    try:
        code = first.wait(60)
    except subprocess.TimeoutExpired:
        first.kill()
        code = first.wait()
    one = Outcome("exit", code)
    problems = []
    if second.kind != "exit" or second.code != 2 or "error:" not in second.output + second.error:
        problems.append(f"second run into the same --out: {second.kind} {second.code}: {second.tail(3)}")
    return problems, one, second


def _sweep_mutations(work: Path) -> dict[str, Any]:
    """Sweep-file damage: ``name -> (sweep table, set table, grid table)`` (None: the table absent)."""
    if not (work / "fifo").exists():
        os.mkfifo(work / "fifo")
    grid = {"compressor.name": ["none", "2bit"]}
    return {
        "ok": ({"base": TINY}, {}, grid),
        "base-missing": ({}, {}, grid),
        "base-nowhere": ({"base": str(work / "nowhere.toml")}, {}, grid),
        "base-dir": ({"base": str(work)}, {}, grid),
        "base-fifo": ({"base": str(work / "fifo")}, {}, grid),
        "base-dev-zero": ({"base": "/dev/zero"}, {}, grid),
        "base-self": ({"base": "SELF"}, {}, grid),
        "base-int": ({"base": 3}, {}, grid),
        "grid-empty": ({"base": TINY}, {}, {}),
        "grid-empty-list": ({"base": TINY}, {}, {"compressor.name": []}),
        "grid-scalar": ({"base": TINY}, {}, {"compressor.name": "none"}),
        "grid-unknown-key": ({"base": TINY}, {}, {"nodes.countt": [1, 2]}),
        "grid-no-dot": ({"base": TINY}, {}, {"nodes": [1, 2]}),
        "grid-deep-key": ({"base": TINY}, {}, {"a.b.c": [1]}),
        "grid-bad-values": ({"base": TINY}, {}, {"nodes.count": [0, -1, 10**12, "x"]}),
        "grid-huge": (
            {"base": TINY},
            {},
            {"scenario.seed": list(range(300)), "training.lr": [0.1 * k + 0.01 for k in range(300)]},
        ),
        "grid-table": ({"base": TINY}, {}, {"compressor.name": [{"a": 1}]}),
        "set-bad": ({"base": TINY}, {"nodes.count": "many"}, grid),
        "set-unknown": ({"base": TINY}, {"x.y": 1}, grid),
        "name-unsafe": ({"base": TINY, "name": "../escape"}, {}, grid),
        "name-nul": ({"base": TINY, "name": "a\x00b"}, {}, grid),
        "out-empty": ({"base": TINY, "out": ""}, {}, grid),
        "unknown-sweep-key": ({"base": TINY, "bass": TINY}, {}, grid),
        "trace-grid": ({"base": TINY}, {}, {"network.uplink_trace": ["/dev/zero", str(work / "fifo"), "/etc/passwd"]}),
    }


def sweep_cases(work: Path, rng: random.Random) -> list[tuple[str, list[str]]]:
    """``(name, argv)``: ``aiotsim sweep FILE --dry-run`` of each damaged sweep file."""
    import tomli_w

    out = []
    for name, (head, fixed, grid) in _sweep_mutations(work).items():
        path = work / f"sweep-{name}.toml"
        if head.get("base") == "SELF":
            head = {**head, "base": str(path)}
        data = {"sweep": head, "set": fixed, "grid": grid}
        if rng.random() < 0.2 and name != "ok":
            data.pop(rng.choice(["set", "grid", "sweep"]))
        path.write_text(tomli_w.dumps(data))
        out.append((f"sweep {name}", ["sweep", str(path), "--dry-run", "--out", str(work / "sw")]))
    return out
