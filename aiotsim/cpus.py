"""How many CPU threads this process may really use: affinity mask and cgroup v2 CPU quota.

``os.cpu_count()`` reports the machine's cores, not the process's share: in a container limited by
``cpu.max`` (Docker ``--cpus``, Kubernetes limits) or pinned by ``taskset``, torch's default of one
thread per core oversubscribes the quota and every operation waits for the scheduler (the issue
measured a 1,000-node run 27x slower on a loaded machine). ``--threads auto`` uses
:func:`auto_threads`: the CPUs in the affinity mask, capped by the tightest ``cpu.max`` quota on
the process's cgroup path, rounded down, at least 1.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from aiotsim.errors import ConfigError

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def affinity_cpus() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where absent)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def cgroup_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The tightest cgroup v2 CPU quota on this process's cgroup path, in CPUs.

    Parameters
    ----------
    root : Path
        Mount point of the cgroup v2 hierarchy.
    proc_cgroup : Path
        The process's cgroup membership file (line ``0::/some/path`` under cgroup v2).

    Returns
    -------
    float or None
        ``quota / period`` of the smallest ``cpu.max`` (``"200000 100000"`` is 2.0 CPUs) from the
        process's cgroup up to the root; None when no level sets a quota (``"max ..."``) or the
        files are missing or unreadable (cgroup v1, not Linux).
    """
    relative = ""
    try:
        for line in proc_cgroup.read_text().splitlines():
            if line.startswith("0::"):
                relative = line[3:].strip().lstrip("/")
    except OSError:
        pass
    best: float | None = None
    folder = root / relative if relative else root
    while True:
        quota = _read_cpu_max(folder / "cpu.max")
        if quota is not None and (best is None or quota < best):
            best = quota
        if folder == root or root not in folder.parents:
            return best
        folder = folder.parent


def _read_cpu_max(path: Path) -> float | None:
    """CPUs allowed by one ``cpu.max`` file (``"$MAX $PERIOD"``, microseconds), None if unlimited."""
    try:
        fields = path.read_text().split()
    except OSError:
        return None
    if len(fields) < 1 or fields[0] == "max":
        return None
    try:
        quota = float(fields[0])
        period = float(fields[1]) if len(fields) > 1 else 100_000.0
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def auto_threads(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """Threads to give torch: affinity CPUs capped by the cgroup quota (rounded down), >= 1."""
    cpus = affinity_cpus()
    quota = cgroup_quota(root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota)))
    return max(1, cpus)


THREADS_PER_CPU = 4  # the most torch threads per usable CPU a run may ask for


def max_threads() -> int:
    """The most threads a run may ask for: :data:`THREADS_PER_CPU` x the CPUs in the affinity mask.
    More only oversubscribes the CPUs, and a huge count makes OpenMP abort allocating a stack per
    thread (``--threads 1000000000``: 216 GB)."""
    return THREADS_PER_CPU * affinity_cpus()


def resolve_threads(threads: int | str) -> int:
    """``threads`` as a count: an int in 1..:func:`max_threads` as it is, ``"auto"`` by
    :func:`auto_threads`, a digit string as its int; anything else is a :class:`ConfigError`."""
    if isinstance(threads, str):
        text = threads.strip().lower()
        if text == "auto":
            return auto_threads()
        if not (text.isascii() and text.isdigit()):  # "²".isdigit() is True, int("²") fails
            raise ConfigError(f"threads(={threads!r}) must be a whole number >= 1 or 'auto'")
        threads = int(text)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads(={threads!r}) must be a whole number >= 1 or 'auto'")
    if threads > max_threads():
        raise ConfigError(
            f"threads(={threads}) is more than {max_threads()} ({THREADS_PER_CPU} per CPU this process may use, "
            f"{affinity_cpus()}): give a smaller number or 'auto'"
        )
    return threads
