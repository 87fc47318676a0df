"""The package's shape: no import cycles, dependencies pointing one way, short functions.

Layering (DESIGN.md): cli -> results / sim -> learn / compress / network -> schema / errors. Nothing
in compress/, learn/, network/ or sim/ may import up into the CLI or results; no module may take
part in an import cycle (imports inside functions count: a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PKG = ROOT / "aiotsim"
LOWER = ("aiotsim.compress", "aiotsim.learn", "aiotsim.network", "aiotsim.sim")
UPPER = ("aiotsim.cli", "aiotsim.results")
MAX_FUNCTION_LINES = 60
MAX_SIM_FILE_LINES = 350


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Modules of the package that ``path`` imports anywhere (top level or inside functions)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package.split(".")
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            # the longest known module that t names (``from x import y`` may name a function)
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t.startswith("aiotsim"):
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    # importing a submodule imports its packages' __init__ too, but that is not a cycle of the
    # submodule's own making: only edges written in the source count
    return {m: imports_of(p, m, known) for m, p in mods.items()}


def find_cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def is_package_init_edge(src: str, dst: str) -> bool:
    """A package's ``__init__`` re-exporting its own submodules is not a dependency cycle."""
    return dst.startswith(src + ".")


def test_no_import_cycles() -> None:
    g = {m: {d for d in deps if not is_package_init_edge(m, d)} for m, deps in graph().items()}
    assert find_cycles(g) == []


def test_find_cycles_detects_a_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_lower_layers_do_not_import_cli_or_results() -> None:
    bad = [
        f"{m} imports {d}"
        for m, deps in graph().items()
        if m.startswith(LOWER)
        for d in deps
        if d.startswith(UPPER)
    ]
    assert bad == []


def _long_functions() -> list[str]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_60_lines() -> None:
    assert _long_functions() == []


def test_no_sim_file_over_350_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((PKG / "sim").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_SIM_FILE_LINES
    }
    assert long == {}
