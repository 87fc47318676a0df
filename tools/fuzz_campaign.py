"""A seeded fuzzing campaign against aiotsim's promises (issue 43): validate, run, resume, stop.

    python tools/fuzz_campaign.py --out DIR [--seed N] [--quick]

Phases (counts per category are printed as a table and written to ``DIR/report.json`` with every
failure: its category, the case's input files kept under ``DIR/cases``, the command, the exit code
and the last lines of its output):

1. **validate**: mutated scenario files through ``aiotsim validate``: declared keys at the edges of
   their ranges, wrong types, dropped sections (:mod:`fuzz.scenarios`); damaged link traces,
   availability traces and custom topologies (:mod:`fuzz.inputs`); damaged data directories, CIFAR
   pickles with code payloads (:mod:`fuzz.datafiles`). ok / refused / traceback / hang / crash /
   leak (a file's content echoed) / code-ran (a payload's marker file exists).
2. **run**: files validate accepted, run for 2 iterations: ok / diverged (3) / stalled (4) /
   accepted-then-failed (exit 2) / traceback / hang / crash / silent-nan.
3. **tamper**: a real run directory damaged (:mod:`fuzz.rundirs`), then ``run --resume`` (must be
   exit 2 with a message; or, for damage the resume repairs, such as a summary.json it rewrites,
   exit 0 with rows byte-identical to the untouched run's: harmless-resumed) and ``plot`` (exit 0
   or 2); an untouched copy's resume must reproduce metrics.csv and evals.csv byte for byte
   (resume-identical), in sync, Gilbert-Elliott and federated runs.
4. **cli**: command-line arguments at their edges, run in a directory whose checkpoint.pt no command
   may touch, and two real runs into one ``--out`` (the second must be refused).
5. **signals**: SIGINT/SIGTERM/SIGHUP on run, federated run, compare --jobs 2, sweep (and sweep
   --ray outside --quick) at random moments (:mod:`fuzz.signals`).

Cases run in forked children of this process (aiotsim imported once; a timeout kills a hang; each
child's address space is capped) except the signal cases, which run the real command. Targets: 0
tracebacks, 0 accepted-then-failed, 0 hangs, 0 silent NaN, 0 leaks, 0 code runs.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz import cli_cases, datafiles, inputs, rundirs, scenarios, signals  # noqa: E402
from fuzz.execute import Outcome, call_cli, warm_up  # noqa: E402

VALIDATE_TIMEOUT_S = 20.0
RUN_TIMEOUT_S = 60.0
RESUME_TIMEOUT_S = 60.0
FAILING = {"traceback", "hang", "crash", "leak", "code-ran", "bad-exit", "accepted-then-failed", "silent-nan",
           "accepted-tampered", "not-identical", "wrong"}  # fmt: skip
GENERATORS = {"schema": 50, "trace": 16, "availability": 10, "data": 12, "topology": 12}
SIZES = {"quick": (300, 25, 12, 4), "full": (3200, 230, 60, 10)}  # validate, runs, tamper, signals


class Campaign:
    """Counts, failures and the case directories of one campaign."""

    def __init__(self, out: Path, seed: int) -> None:
        self.out, self.seed = out, seed
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.failures: list[dict[str, Any]] = []
        self.scratch = out / "scratch"
        self.scratch.mkdir(parents=True, exist_ok=True)

    def record(self, phase: str, category: str, case: str, desc: str, cmd: list[str], o: Outcome | None) -> None:
        """Count a case; keep a failure's details (its case directory is kept)."""
        self.counts[phase][category] += 1
        if category in FAILING:
            print(f"  FAIL {phase} {category}: {desc} ({case})", flush=True)
            self.failures.append({
                "phase": phase, "category": category, "case": case, "what": desc,
                "command": "aiotsim " + " ".join(_quote(a) for a in cmd),
                "exit": None if o is None else o.code, "kind": None if o is None else o.kind,
                "tail": "" if o is None else (o.tail(8) + ("\n" + o.error[-1500:] if o.kind == "traceback" else "")),
            })  # fmt: skip


def _quote(arg: str) -> str:
    return repr(arg) if (not arg or any(c in arg for c in " \x00'\"")) else arg


def classify_validate(o: Outcome, checks: dict[str, Any]) -> str:
    """The category of a validate outcome (the first problem found)."""
    text = o.output + o.error
    if checks.get("marker") and Path(checks["marker"]).exists():
        return "code-ran"
    if any(s in text for s in checks.get("secrets", [])):
        return "leak"
    if o.kind != "exit":
        return o.kind
    if o.code == 0:
        return "ok"
    if o.code == 2 and "error" in o.output.lower():  # "error: ..." or a usage error's "Error" box
        return "refused"
    return "bad-exit"


def write_case(case_dir: Path, data: dict[str, Any]) -> Path | None:
    """The scenario as TOML in the case directory (None when TOML cannot express it)."""
    import tomli_w

    try:
        text = tomli_w.dumps(data)
    except (TypeError, ValueError, RecursionError):
        return None
    path = case_dir / "scenario.toml"
    path.write_text(text)
    return path


def make_case(kind: str, rng: random.Random, case_dir: Path, bases: dict, values: dict) -> tuple:
    """``(scenario dict, description, checks)`` of one validate case of generator ``kind``."""
    if kind == "schema":
        data = scenarios.copy.deepcopy(bases[rng.choice(sorted(bases))])
        desc = "; ".join(scenarios.schema_mutation(data, values, rng) for _ in range(rng.randint(1, 3)))
        return data, f"schema [{data.get('scenario', {}).get('name', '?')}] {desc}", {}
    if kind == "data":
        return datafiles.data_case(rng, case_dir, bases)
    return getattr(inputs, f"{kind}_case")(rng, case_dir, bases)


def validate_phase(c: Campaign, n: int, rng: random.Random) -> list[tuple[str, Path, str, dict]]:
    """Generate and validate ``n`` cases; returns the accepted ones ``(kind, file, desc, checks)``."""
    bases, values = scenarios.bases(), scenarios.field_values()
    kinds = [k for k, w in GENERATORS.items() for _ in range(w)]
    accepted = []
    for i in range(n):
        kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
        case_dir = c.out / "cases" / f"v{i:05d}-{kind}"
        case_dir.mkdir(parents=True, exist_ok=True)
        data, desc, checks = make_case(kind, rng, case_dir, bases, values)
        path = write_case(case_dir, data)
        if path is None:
            shutil.rmtree(case_dir)
            continue
        cmd = ["validate", str(path)]
        o = call_cli(cmd, VALIDATE_TIMEOUT_S, case_dir, c.scratch)
        cat = classify_validate(o, checks)
        c.record("validate", cat, str(case_dir), desc, cmd, o)
        c.counts["validate-by-kind"][f"{kind}:{cat}"] += 1
        if cat == "ok":
            accepted.append((kind, path, desc, checks))
        elif cat not in FAILING:
            shutil.rmtree(case_dir, ignore_errors=True)
        _progress("validate", i + 1, n, c.counts["validate"])
    return accepted


def classify_run(o: Outcome, run_dir: Path, checks: dict[str, Any]) -> str:
    """The category of a run of a file validate accepted."""
    cat = classify_validate(o, checks)
    if cat in ("code-ran", "leak", "traceback", "hang", "crash"):
        return cat
    if o.code == 2:
        return "accepted-then-failed"
    if o.code in (3, 4):
        return {3: "diverged", 4: "stalled"}[o.code]
    if o.code != 0:
        return "bad-exit"
    if not (run_dir / "summary.json").is_file():
        return "wrong"
    return "ok" if rundirs.all_finite(run_dir) else "silent-nan"


def run_phase(c: Campaign, accepted: list, n: int, rng: random.Random) -> None:
    """Run up to ``n`` accepted files for 2 iterations, spread over the generator kinds."""
    by_kind: dict[str, list] = defaultdict(list)
    for case in accepted:
        by_kind[case[0]].append(case)
    chosen: list = []
    while len(chosen) < n and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(chosen) < n:
                chosen.append(by_kind[kind].pop(rng.randrange(len(by_kind[kind]))))
    for i, (kind, path, desc, checks) in enumerate(chosen):
        run_dir = path.parent / "run"
        cmd = ["run", str(path), "-n", "2", "-q", "--out", str(run_dir), "--device", "cpu", "--threads", "1"]
        o = call_cli(cmd, RUN_TIMEOUT_S, path.parent, c.scratch)
        cat = classify_run(o, run_dir, checks)
        c.record("run", cat, str(path.parent), desc, cmd, o)
        c.counts["run-by-kind"][f"{kind}:{cat}"] += 1
        _progress("run", i + 1, len(chosen), c.counts["run"])
    for _kind, path, _, _ in accepted:
        if not any(f["case"] == str(path.parent) for f in c.failures):
            shutil.rmtree(path.parent, ignore_errors=True)


TAMPER_BASES = {
    "sync": "",
    "gilbert-elliott": 'loss_model = "gilbert-elliott"\nge_p_good_bad = 0.05\nge_p_bad_good = 0.3\nge_loss_bad = 0.3',
    "federated": "",
}


def base_runs(c: Campaign) -> dict[str, Path]:
    """Small complete runs with a checkpoint per iteration, one per mode that checkpoints."""
    out = {}
    for name, network_extra in TAMPER_BASES.items():
        d = c.out / "base" / name
        d.mkdir(parents=True, exist_ok=True)
        fed = 'mode = "federated"\nlocal_steps = 2' if name == "federated" else ""
        text = signals.scenario_text(f"base{name.replace('-', '')}", 5, fed)
        text = text.replace("eval_every = 50", "eval_every = 2")
        if name == "federated":
            text = text.replace("[nodes]\n", "[nodes]\nper_round = 2\n")
        (d / "scenario.toml").write_text(text + network_extra + "\n")
        cmd = ["run", str(d / "scenario.toml"), "-q", "--out", str(d / "run"), "--device", "cpu",
               "--threads", "1", "--checkpoint-every", "1"]  # fmt: skip
        o = call_cli(cmd, RUN_TIMEOUT_S, d, c.scratch)
        if o.kind == "exit" and o.code == 0 and (d / "run" / rundirs.CKPT).is_file():
            out[name] = d / "run"
        else:
            c.record("tamper", "wrong", str(d), f"base run {name} failed", cmd, o)
    return out


def identity_checks(c: Campaign, runs: dict[str, Path]) -> None:
    """Resuming an untouched copy of each base run must rewrite its rows byte for byte."""
    for name, run in runs.items():
        copy = rundirs.copy_run(run, c.out / "cases" / f"identity-{name}")
        cmd = ["run", "--resume", str(copy), "-q", "--device", "cpu", "--threads", "1"]
        o = call_cli(cmd, RESUME_TIMEOUT_S, copy.parent, c.scratch)
        same = all((copy / f).read_bytes() == (run / f).read_bytes() for f in ("metrics.csv", "evals.csv"))
        cat = "resume-identical" if o.kind == "exit" and o.code == 0 and same else "not-identical"
        c.record("tamper", cat, str(copy), f"resume of an untouched {name} run", cmd, o)
        if cat != "not-identical":
            shutil.rmtree(copy)


def tamper_phase(c: Campaign, n: int, rng: random.Random) -> None:
    """Tamper ``n`` copies of the base runs; resume and plot each."""
    runs = base_runs(c)
    identity_checks(c, runs)
    for i in range(n if runs else 0):
        name = sorted(runs)[i % len(runs)]
        case = c.out / "cases" / f"t{i:04d}-{name}"
        run = rundirs.copy_run(runs[name], case / "run")
        marker = case / "PAYLOAD_RAN"
        try:
            desc = f"{name}: " + rundirs.tamper(run, rng, marker)
        except Exception as exc:  # noqa: BLE001 - the package's own reader refused its file: count, go on
            desc = f"{name}: tampering failed ({type(exc).__name__}: {exc})"
        cmd = ["run", "--resume", str(run), "-q", "--device", "cpu", "--threads", "1"]
        o = call_cli(cmd, RESUME_TIMEOUT_S, case, c.scratch)
        cat = classify_validate(o, {"marker": str(marker)})
        if cat == "ok":  # harmless damage (a summary the resume rewrites) is fine if the rows come out right
            same = all(_same_file(run / f, runs[name] / f) for f in ("metrics.csv", "evals.csv"))
            cat = "harmless-resumed" if same else "accepted-tampered"
        c.record("tamper", "refused-2" if cat == "refused" else cat, str(case), desc, cmd, o)
        pcmd = ["plot", str(run), "--out", str(case / "plots"), "--formats", "png"]
        p = call_cli(pcmd, RESUME_TIMEOUT_S, case, c.scratch)
        pcat = classify_validate(p, {"marker": str(marker)})
        c.record("plot", pcat, str(case), desc, pcmd, p)
        if cat in ("refused", "harmless-resumed") and pcat in ("ok", "refused"):
            shutil.rmtree(case)
        _progress("tamper", i + 1, n, c.counts["tamper"])


def _same_file(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()


def signal_phase(c: Campaign, n: int, rng: random.Random, quick: bool) -> None:
    """``n`` signal cases over run, federated, compare and sweep (and sweep --ray unless quick)."""
    kinds = ["run", "compare", "sweep", "federated"] + ([] if quick else ["sweep-ray"])
    for i in range(n):
        kind = kinds[i % len(kinds)]
        case = c.out / "cases" / f"s{i:03d}-{kind}"
        case.mkdir(parents=True, exist_ok=True)
        iterations = signals.LONG_ITERATIONS if kind in ("run", "federated") else 1500
        r = signals.signal_case(kind, case, rng, iterations)
        cat = "ok" if r["ok"] else "wrong"
        last = r["outcomes"][-1]
        desc = f"{kind} {r['signal']} after {r['delay_s']} s: {'; '.join(r['problems']) or 'stopped and completed'}"
        c.record("signals", cat, str(case), desc, r["commands"][0], last)
        if r["ok"]:
            shutil.rmtree(case)
        _progress("signals", i + 1, n, c.counts["signals"])


def cli_phase(c: Campaign) -> None:
    """Arguments at their edges (forked, in a directory holding a sentinel file), then two real
    runs into one ``--out``."""
    work = c.out / "cases" / "cli"
    cwd = work / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    sentinel = cwd / cli_cases.SENTINEL
    cases = cli_cases.argument_cases(work) + cli_cases.sweep_cases(work, random.Random(c.seed))
    for name, argv in cases:
        sentinel.write_text("sentinel")
        o = call_cli(argv, VALIDATE_TIMEOUT_S * 3, cwd, c.scratch)
        cat = classify_validate(o, {})
        if cat == "ok" and name in cli_cases.MUST_REFUSE:
            cat = "wrong"
        if not sentinel.is_file() or sentinel.read_text() != "sentinel":
            cat = "wrong"
            name += f": {cli_cases.SENTINEL} in the working directory deleted or changed"
        c.record("cli", cat, str(work), name, argv, o)
    problems, _, second = cli_cases.concurrent_runs(work)
    c.record("cli", "wrong" if problems else "refused", str(work), "two runs into one --out: " + "; ".join(problems),
             ["run", "(twice at once)", "--out", str(work / "shared")], second)  # fmt: skip


def _progress(phase: str, i: int, n: int, counts: Counter) -> None:
    if i == n or i % 50 == 0 or n <= 20:
        print(f"  {phase} {i}/{n}: {dict(counts)}", flush=True)


def table(c: Campaign) -> str:
    """The counts per phase and category, failing categories marked with '!'."""
    lines = []
    for phase in ("validate", "run", "tamper", "plot", "cli", "signals"):
        cells = ", ".join(f"{k}{'!' if k in FAILING else ''} {v}" for k, v in sorted(c.counts[phase].items()))
        lines.append(f"{phase:<9} {sum(c.counts[phase].values()):>5}  {cells}")
    lines.append(f"failures: {len(c.failures)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="campaign directory (cases kept, report.json)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a small campaign (~2-3 minutes)")
    ap.add_argument("--phases", default="validate,run,tamper,cli,signals", help="comma-separated phases to run")
    args = ap.parse_args(argv)
    n_validate, n_runs, n_tamper, n_signals = SIZES["quick" if args.quick else "full"]
    phases = set(args.phases.split(","))
    c = Campaign(args.out.resolve(), args.seed)
    rng = random.Random(args.seed)
    warm_up(c.scratch)
    start = time.monotonic()
    accepted = validate_phase(c, n_validate, rng) if "validate" in phases else []
    if "run" in phases:
        run_phase(c, accepted, n_runs, rng)
    if "tamper" in phases:
        tamper_phase(c, n_tamper, rng)
    if "cli" in phases:
        cli_phase(c)
    if "signals" in phases:
        signal_phase(c, n_signals, rng, args.quick)
    wall = time.monotonic() - start
    shutil.rmtree(c.scratch, ignore_errors=True)
    report = {"seed": args.seed, "quick": args.quick, "wall_s": round(wall, 1), "command": sys.argv,
              "counts": {k: dict(v) for k, v in c.counts.items()}, "failures": c.failures}  # fmt: skip
    (c.out / "report.json").write_text(json.dumps(report, indent=1))
    print(table(c))
    print(f"wall time {wall:.0f} s; report: {c.out / 'report.json'}")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
