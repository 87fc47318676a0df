"""Expected errors: each carries a message for the user and an exit code; the CLI never shows a
traceback for them (pyperf/asv style: an expected problem is a message, not a crash)."""

from __future__ import annotations


class AiotsimError(Exception):
    """Base of every expected aiotsim error. `exit_code` is what the CLI exits with."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(AiotsimError):
    """A scenario (or an override) is invalid. Holds every problem found, one line each."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class DataError(AiotsimError):
    """A data set cannot be loaded or partitioned as asked."""


class CodecError(AiotsimError):
    """A codec was given input or parameters it cannot handle."""


class TopologyError(AiotsimError):
    """A network topology is invalid (disconnected, unroutable, unsupported with a codec)."""


class ResultsError(AiotsimError):
    """A run or sweep directory is missing, incomplete or of an unknown schema."""
