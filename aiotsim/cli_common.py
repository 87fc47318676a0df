"""What every ``aiotsim`` command shares: the consoles, the error decorator, option types, output
paths, signal handling and formatting helpers.

:mod:`aiotsim.cli` (the app and the single-run commands) and :mod:`aiotsim.cli_batch` (compare,
sweep, plot) both import this module; neither imports the other's internals.

Exit codes: 0 ok, 2 bad input (any :class:`~aiotsim.errors.AiotsimError`, or an output path that
cannot be written), 3 a run diverged, 4 a run stalled, 130 interrupted (Ctrl-C), 128 + N on
signal N (SIGTERM: 143, SIGHUP: 129).
"""

from __future__ import annotations

import contextlib
import functools
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from aiotsim.errors import AiotsimError

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_STALLED = 4
EXIT_INTERRUPTED = 130
# Run outcomes (summary.json's ``status``) that are not success, and their exit codes.
STATUS_EXIT = {"diverged": EXIT_DIVERGED, "stalled": EXIT_STALLED}


class OutputError(AiotsimError):
    """An output path cannot be created or written (exit 2)."""


def print_error(message: str) -> None:
    """``error: ...`` on stderr, one line per line of ``message``."""
    for line in message.splitlines() or [""]:
        err.print(f"[red]error:[/red] {escape(line)}", highlight=False, markup=True, soft_wrap=True)


def expected_errors(fn: F) -> F:
    """Turn AiotsimError into 'error: ...' lines and its exit code; a stop (Ctrl-C, or a batch's stop
    signal) into :func:`stop_exit`'s code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AiotsimError as exc:
            print_error(exc.message)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:  # Ctrl-C, or a stop signal of a batch (compare, sweep)
            raise stop_exit(exc) from None

    return wrapper  # type: ignore[return-value]


def stop_exit(exc: KeyboardInterrupt) -> typer.Exit:
    """Say that the command was stopped and keeps its results; the exit to raise: 130 for Ctrl-C
    (a plain ``KeyboardInterrupt``), 128 + N for signal N (a ``Stopped`` carrying ``signum``:
    SIGTERM 143, SIGHUP 129), the same for ``run``, ``compare`` and ``sweep``."""
    signum = getattr(exc, "signum", signal.SIGINT)
    name = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    err.print(f"{name}: results written so far are kept", highlight=False)
    return typer.Exit(EXIT_INTERRUPTED if signum == signal.SIGINT else 128 + signum)


@contextlib.contextmanager
def writing_to(path: Path | str) -> Iterator[None]:
    """Turn an OSError raised while creating or writing outputs under ``path`` into an
    :class:`OutputError`: ``cannot write to PATH: reason``."""
    try:
        yield
    except OSError as exc:
        where = exc.filename if exc.filename is not None else path
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise OutputError(f"cannot write to {where}: {reason}") from None


def ensure_dir(path: Path) -> Path:
    """Create directory ``path`` (and parents) or raise :class:`OutputError` saying why not."""
    with writing_to(path):
        if path.exists() and not path.is_dir():
            raise FileExistsError(17, "exists and is not a directory", str(path))
        path.mkdir(parents=True, exist_ok=True)
    return path


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: Any, fallback: str = "run") -> str:
    """A string safe as one path component: runs of other characters become ``-``, no leading dot,
    at most 80 characters (``"../../x"`` -> ``"x"``)."""
    s = _UNSAFE.sub("-", str(text)).strip("-.")[:80]
    return s or fallback


def out_path(value: Any) -> Path:
    """Typer parser of ``--out``/``-o``: an empty or blank name is refused (exit 2, a usage error)
    because ``Path("")`` is the current directory, whose ``checkpoint.pt`` a new run deletes."""
    if isinstance(value, str) and not value.strip():
        raise typer.BadParameter(
            f"{value!r} is empty: it would write into the current directory; give a directory, e.g. -o runs/mine"
        )
    return Path(value)


class SignalInterrupt:
    """Inside ``with SignalInterrupt():`` SIGINT, SIGTERM and SIGHUP stop the run in the main thread
    (:func:`aiotsim.results.parallel.stop_on_signals`: a ``KeyboardInterrupt`` carrying the signal),
    so its ``finally`` writes the summary and trace; on the way out the stop becomes exit 130
    (Ctrl-C) or 128 + the signal's number."""

    def __enter__(self) -> SignalInterrupt:
        from aiotsim.results.parallel import stop_on_signals

        self._stop = stop_on_signals()
        self._stop.__enter__()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self._stop.__exit__(kind, exc, tb)
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            raise stop_exit(exc) from None


def stopping_on_signals(fn: F) -> F:
    """Run a command inside :class:`SignalInterrupt` from its start to its end: SIGTERM and SIGHUP
    stop a batch (compare, sweep) with exit 128 + N also while it plans, starts Ray or writes its
    index and tables, not only while its runs go on (where :mod:`aiotsim.results.parallel`'s own
    handlers take over); the default action had killed it (exit -15, no message)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with SignalInterrupt():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


ScenarioArg = Annotated[Path, typer.Argument(help="scenario TOML file, e.g. scenarios/iot10.toml", show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="override SECTION.KEY=VALUE (repeatable)")]
CompressorOpt = Annotated[str | None, typer.Option("--compressor", "-c", help="codec name (overrides compressor.name)")]
IterOpt = Annotated[
    int | None,
    typer.Option(
        "--iterations",
        "-n",
        help="iterations (overrides scenario.iterations); a shorter run also evaluates more often: eval_every "
        "becomes N/10 rounded down (at least 1, at most the scenario's) unless --set training.eval_every=K",
        min=1,
    ),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="where the real learning runs: auto | cpu | cuda")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars")]
TensorboardOpt = Annotated[
    Path | None,
    typer.Option(
        "--tensorboard",
        help="also write TensorBoard scalars of the run(s) under this directory (pip install 'aiotsim[tensorboard]')",
        show_default=False,
    ),
]


def tensorboard_available(log_dir: Path | None) -> None:
    """With ``--tensorboard``: raise ConfigError (exit 2) now, before any run, if the package is missing."""
    if log_dir is not None:
        from aiotsim.results.export import need

        need("tensorboard", "tensorboard", "tensorboard")


def write_tensorboard(run_dirs: list[Path], log_dir: Path | None) -> None:
    """With ``--tensorboard``: the scalars of every complete run under ``run_dirs`` into ``log_dir``."""
    if log_dir is not None:
        from aiotsim.results.export import export_tensorboard

        written = export_tensorboard(run_dirs, log_dir)
        out.print(f"tensorboard: {len(written)} run(s) in {log_dir} (tensorboard --logdir {log_dir})")


def fmt_bytes(n: float | None) -> str:
    """``512 B``, ``1.5 KB`` ... (decimal units); ``-`` for None."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def fmt(v: Any, spec: str = ".3g") -> str:
    """``format(v, spec)``, ``-`` for None."""
    return "-" if v is None else format(v, spec)
