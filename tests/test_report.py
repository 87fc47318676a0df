"""`aiotsim report`: one self-contained HTML file (table, inline SVG figures, scenario, versions,
reproduce command), checked by parsing it and, where a browser is installed, by loading it headless;
and the time-to-accuracy figures when no compressor reached the target."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer
from conftest import run_tiny_sweep
from typer.testing import CliRunner

from aiotsim.cli_report import register
from aiotsim.results import plots, sweep_figures
from aiotsim.results.compare import plan_comparison, write_comparison_record
from aiotsim.results.parallel import run_local
from aiotsim.results.plot_inputs import Run, SweepData
from aiotsim.results.report import inline_svg

TESTS = Path(__file__).parent
BROWSERS = ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome", "firefox")
# What `aiotsim plot` draws for a 2-codec comparison: 6 run figures and a timeline per codec
COMPARISON_FIGURES = 8

runner = CliRunner()
app = typer.Typer()
register(app)
app.command("_unused")(lambda: None)  # two commands or more: Typer dispatches on the command name


class Parsed(HTMLParser):
    """What the tests look at: top-level SVGs, table body rows, <pre> texts, ids and external URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.svgs = 0
        self.svg_depth = 0
        self.rows: list[list[str]] = []
        self.pres: list[str] = []
        self.ids: list[str] = []
        self.external: list[str] = []
        self.tags: set[str] = set()
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._in.append(tag)
        if tag == "svg":
            self.svgs += self.svg_depth == 0
            self.svg_depth += 1
        if tag == "tr" and "tbody" in self._in:
            self.rows.append([])
        if tag == "pre":
            self.pres.append("")
        for k, v in attrs:
            if k == "id" and v:
                self.ids.append(v)
            if k in ("src", "href", "xlink:href") and v and not v.startswith("#"):
                self.external.append(v)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.svg_depth -= 1
        while self._in and self._in.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._in and self._in[-1] == "td" and "tbody" in self._in:
            self.rows[-1].append(data)
        if "pre" in self._in:
            self.pres[-1] += data


def parse(path: Path) -> Parsed:
    p = Parsed()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """none and 2bit, one seed, 3 iterations, evaluated every iteration: 90% is out of reach."""
    out = tmp_path_factory.mktemp("report") / "cmp"
    jobs = plan_comparison(TESTS / "tiny.toml", ["none", "2bit"], 1, out, ["training.eval_every=1"], iterations=3)
    assert all(r.ok for r in run_local(jobs, workers=1))
    write_comparison_record(out, jobs, reused=0)  # as `aiotsim compare` does: its runs, in its order
    return out


def test_report_of_a_comparison_holds_table_figures_scenario_versions_and_command(comparison: Path) -> None:
    res = runner.invoke(app, ["report", str(comparison)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    html = comparison / "report.html"
    doc = parse(html)
    assert doc.svgs == COMPARISON_FIGURES
    assert [row[0] for row in doc.rows] == ["none", "2bit"]  # a table row per codec, in comparison order
    assert all(row[-2] == "not reached" for row in doc.rows)  # "sim s to 90%"
    scenario = doc.pres[1]  # after the reproduce command
    assert "[scenario]" in scenario and 'name = "tiny"' in scenario and "iterations = 3" in scenario
    command = doc.pres[0]
    assert command.startswith("aiotsim compare ") and "-c none,2bit --seeds 1" in command
    text = html.read_text(encoding="utf-8")
    assert f"<td>{platform.python_version()}</td>" in text
    assert "no compressor reached 90% accuracy" in text  # SVG text kept as text
    # self-contained: no script, no linked resource, and figures do not share ids
    assert not doc.tags & {"script", "link", "img", "iframe"} and doc.external == []
    assert len(doc.ids) == len(set(doc.ids))


def test_report_of_a_run_and_of_a_sweep(comparison: Path, tmp_path: Path) -> None:
    run_dir = next((comparison / "2bit").glob("seed3-*"))
    res = runner.invoke(app, ["report", str(run_dir), "-o", str(tmp_path / "one" / "r.html")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = parse(tmp_path / "one" / "r.html")
    assert doc.svgs == 7  # 6 run figures and its timeline
    assert ["compressor", "2bit"] in doc.rows and ["iterations", "3"] in doc.rows
    assert doc.pres[0] == f"aiotsim run {run_dir / 'scenario.toml'} -o {run_dir}-rerun"

    run_tiny_sweep(tmp_path, '"network.uplink_mbps" = [1, 4]', '"training.eval_every" = 1')
    sweep_file = tmp_path / "s.toml"
    res = runner.invoke(app, ["report", str(tmp_path / "sw")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = parse(tmp_path / "sw" / "report.html")
    assert [row[:2] for row in doc.rows] == [["1", "complete"], ["4", "complete"]]  # the sweep index
    # the metrics-against-the-key figure and the time-to-target one (one swept key); one codec
    assert doc.svgs == 2
    assert '"network.uplink_mbps" = [' in doc.pres[1]  # the sweep's grid, then a resolved scenario
    assert doc.pres[0] == f"aiotsim sweep {sweep_file} -o {tmp_path / 'sw'}"


def test_report_bad_input_exits_2_without_traceback(tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", str(tmp_path / "nope")], catch_exceptions=False)
    assert res.exit_code == 2 and "nope: no such directory" in res.output and "Traceback" not in res.output
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["report", str(tmp_path / "empty")], catch_exceptions=False)
    assert res.exit_code == 2 and "no complete run directory found" in res.output


def test_inline_svg_prefixes_ids_and_their_references_only() -> None:
    svg = (
        '<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg><defs><path id="m1"/><clipPath id="p2"/></defs>'
        '<use xlink:href="#m1" style="fill: #m1aa"/><g clip-path="url(#p2)" fill="#ffffff"/></svg>'
    )
    assert inline_svg(svg, "f3-") == (
        '<svg><defs><path id="f3-m1"/><clipPath id="f3-p2"/></defs>'
        '<use xlink:href="#f3-m1" style="fill: #m1aa"/><g clip-path="url(#f3-p2)" fill="#ffffff"/></svg>'
    )


def _browser() -> str | None:
    """A headless browser: $AIOTSIM_TEST_BROWSER (a path), else the first of :data:`BROWSERS` on PATH."""
    return os.environ.get("AIOTSIM_TEST_BROWSER") or next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


def chromium_load(browser: str, url: str, timeout_s: float = 60.0) -> tuple[int, list[str]]:
    """Load ``url`` in headless Chromium, driven over its DevTools pipe (fds 3 and 4, JSON messages
    ending in NUL): the number of ``figure > svg`` elements once loaded, and every console error,
    uncaught exception and failed load (``Runtime``/``Log`` events) seen until then."""
    to_browser, from_test = os.pipe()
    to_test, from_browser = os.pipe()

    def fds() -> None:  # in the child: the pipe ends where --remote-debugging-pipe expects them
        os.dup2(to_browser, 3)
        os.dup2(from_browser, 4)

    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "about:blank"]
    proc = subprocess.Popen(cmd, pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_browser)
    os.close(from_browser)
    buf, sent, errors = b"", [0], []
    deadline = time.monotonic() + timeout_s

    def send(method: str, params: dict | None = None, session: str | None = None) -> int:
        sent[0] += 1
        msg = {"id": sent[0], "method": method, "params": params or {}, **({"sessionId": session} if session else {})}
        os.write(from_test, json.dumps(msg).encode() + b"\0")
        return sent[0]

    def until(done) -> dict:
        nonlocal buf
        while time.monotonic() < deadline:
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                m = json.loads(raw)
                event, p = m.get("method"), m.get("params", {})
                if event == "Runtime.exceptionThrown":
                    errors.append(str(p["exceptionDetails"].get("exception", {}).get("description", p)))
                elif event == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                    errors.append(str(p["args"]))
                elif event == "Log.entryAdded" and p["entry"]["level"] == "error":
                    errors.append(p["entry"]["text"])
                if done(m):
                    return m
            chunk = os.read(to_test, 1 << 16)
            assert chunk, "the browser closed its DevTools pipe"
            buf += chunk
        raise TimeoutError(f"{url} did not load in {timeout_s} s")

    def call(method: str, params: dict | None = None, session: str | None = None) -> dict:
        i = send(method, params, session)
        return until(lambda m: m.get("id") == i).get("result", {})

    try:
        target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            call(f"{domain}.enable", session=session)
        send("Page.navigate", {"url": url}, session)
        until(lambda m: m.get("method") == "Page.loadEventFired")
        query = {"expression": "document.querySelectorAll('figure > svg').length", "returnByValue": True}
        figures = call("Runtime.evaluate", query, session)["result"]["value"]
        send("Browser.close")
        return figures, errors
    finally:
        os.close(from_test)
        os.close(to_test)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(_browser() is None, reason=f"no headless browser ({', '.join(BROWSERS)}) on PATH")
def test_report_loads_in_a_headless_browser_without_console_errors(comparison: Path, tmp_path: Path) -> None:
    """Chromium: every figure is in the loaded page's DOM, and the page logged no error. Firefox (no
    DevTools pipe): the page renders to a screenshot."""
    html = tmp_path / "r.html"
    assert runner.invoke(app, ["report", str(comparison), "-o", str(html)], catch_exceptions=False).exit_code == 0
    browser = str(_browser())
    if "firefox" in Path(browser).name:
        shot = tmp_path / "shot.png"
        done = subprocess.run([browser, "--headless", "--screenshot", str(shot), html.as_uri()], timeout=120)
        assert done.returncode == 0 and shot.stat().st_size > 1000
        return
    assert chromium_load(browser, html.as_uri()) == (COMPARISON_FIGURES, [])
    # the check sees errors: a page that logs one, throws one and misses an image
    bad = tmp_path / "bad.html"
    bad.write_text('<script>console.error("boom"); missing();</script><img src="none.png">')
    figures, errors = chromium_load(browser, bad.as_uri())
    assert figures == 0 and len(errors) == 3


# ---- time to accuracy when no compressor reached it -------------------------------------------------
def _run(codec: str, accuracies: list[float], sim_time_s: float) -> Run:
    """A run evaluated at 1, 2, ... simulated s with ``accuracies``, lasting ``sim_time_s``."""
    evals = [{"iteration": i, "sim_time_s": float(i + 1), "accuracy": a} for i, a in enumerate(accuracies)]
    summary = {"compressor": codec, "scenario": "s", "nodes": 2, "iterations": 4, "target_accuracy": 0.9,
               "sim_time_s": sim_time_s, "throughput_samples_per_s": 10.0, "wire_bytes_up": 1e6,
               "final_accuracy": accuracies[-1]}  # fmt: skip
    return Run(Path(codec), summary, [], evals, group=codec)


def _captured(monkeypatch: pytest.MonkeyPatch, module: object) -> list:
    figures: list = []
    monkeypatch.setattr(module, "save_figure", lambda fig, *a: figures.append(fig) or [])
    return figures


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_time_to_accuracy_figure_says_when_no_compressor_reached_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _captured(monkeypatch, plots)
    runs = [_run("none", [0.2, 0.5], 12.0), _run("2bit", [0.1, 0.3], 20.0)]
    plots.plot_time_to_accuracy(runs, Path("."), ["svg"], 0.9)
    (ax,) = figures[0].axes
    assert "no compressor reached 90% accuracy" in _texts(figures[0])
    assert ax.get_ylim() == pytest.approx((0.0, 21.0))  # the longest run's 20 s + 5%, not -0.04..0.04
    assert [t.get_text() for t in ax.texts if t.get_text() == "not reached"] == ["not reached"] * 2

    # one reached it at 2 s: its bar is labelled, the other says "not reached", no note across the figure
    plots.plot_time_to_accuracy([_run("none", [0.2, 0.95], 12.0), runs[1]], Path("."), ["svg"], 0.9)
    texts = _texts(figures[1])
    assert "2.0" in texts and "not reached" in texts and "no compressor reached 90% accuracy" not in texts


def test_a_sweep_figure_words_not_reached_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _captured(monkeypatch, sweep_figures)
    points = [({"network.uplink_mbps": up}, _run("none", [0.2, 0.4], 5.0)) for up in (1, 4)]
    sw = SweepData(Path("sw"), "up", {"network.uplink_mbps": [1, 4]}, points)
    sweep_figures.plot_network_sweep(sw, Path("."), ["svg"], 0.925)
    assert "no compressor reached 92.5% accuracy" in _texts(figures[0])  # 92.5, not rounded to 92
    # the metrics-against-the-key figure: its time-to-target panel says the same, not left empty
    plots_figures = _captured(monkeypatch, plots)
    plots.plot_sweep(sw, "network.uplink_mbps", Path("."), ["svg"], 0.925)
    assert _texts(plots_figures[0]) == ["no compressor reached 92.5% accuracy"]
