"""``--workers auto``: how many load generators the machine's free cores hold.

Role: :func:`free_cores` is the rule, pure, on given /proc readings (tests feed
it text); :func:`auto_workers` is its thin I/O shell: it reads /proc/loadavg and
two samples of /proc/stat a short while apart (``SAMPLE_S``) and applies the
rule. The run command calls it once, before any load, when ``run.workers`` or
``--workers`` is ``"auto"`` (docs/scaleout.md, "--workers auto").

The rule (one place): the other processes of the machine use
``others = max(load_1m, busy_cores)`` cores, where ``load_1m`` is the 1-minute
load average (/proc/loadavg, field 1: runnable and uninterruptible tasks,
averaged) and ``busy_cores`` the non-idle share of every CPU's time over the
sample times the CPUs (/proc/stat's ``cpu`` line, ``_saturation.parse_proc_stat``):
the load average remembers the last minute, the sample sees a neighbour that
just started. hopbench itself is not yet running its load while it reads them
(its own share is one sleeping process). Free cores =
``cpus - others``, rounded to the nearest whole core, at least 1 and at most
``cpus`` (``os.cpu_count()``); the workers are that many (no more than
``config._profile.MAX_WORKERS``). Without /proc (not Linux), the rule has no
reading of the others: every core counts as free, and the note says so.

Invariants: never raises on what /proc holds; a reading that cannot be parsed
counts as absent.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .._format import plural
from ._saturation import parse_proc_stat

__all__ = ["SAMPLE_S", "FreeCores", "auto_workers", "free_cores", "parse_loadavg"]

SAMPLE_S: Final = 0.25
"""How long :func:`auto_workers` samples /proc/stat, s: long enough for 25 clock
ticks per CPU at the usual 100 Hz, short enough not to delay a run."""


@dataclass(frozen=True, slots=True)
class FreeCores:
    """The rule's answer and what it read.

    Attributes:
        workers: load generators to start, >= 1, <= ``cpus``.
        cpus: the machine's CPUs.
        load_1m: the 1-minute load average, or None when unread.
        busy_cores: CPUs' busy share over the sample x ``cpus``, or None when unread.
    """

    workers: int
    cpus: int
    load_1m: float | None
    busy_cores: float | None

    def note(self) -> str:
        """One sentence for the terminal and summary.json ``workers_auto`` (``workers auto: ...``,
        whether the profile or ``--workers`` asked for it)."""
        if self.load_1m is None and self.busy_cores is None:
            seen = "no /proc to read the other processes' load from: every core counted as free"
        else:
            parts = [f"1-min load average {self.load_1m:.2f}" if self.load_1m is not None else "",
                     f"{self.busy_cores:.2f} cores busy over {SAMPLE_S:g} s" if self.busy_cores is not None else ""]
            seen = "the other processes use " + " and ".join(p for p in parts if p)
        return (f"workers auto: {self.workers} {plural(self.workers, 'worker')} for the free cores of "
                f"{self.cpus} {plural(self.cpus, 'CPU')} "
                f"({seen}; docs/scaleout.md)")


def parse_loadavg(text: str) -> float | None:
    """The 1-minute load average, field 1 of /proc/loadavg (proc(5)); None when
    malformed or negative. Never raises."""
    fields = text.split()
    try:
        v = float(fields[0]) if fields else -1.0
    except ValueError:
        return None
    return v if v >= 0 and v == v else None  # (v == v: not NaN)


def free_cores(cpus: int, loadavg: str | None, stat_before: str | None, stat_after: str | None,
               max_workers: int | None = None) -> FreeCores:
    """The ``--workers auto`` rule on given readings (module docstring).

    Args:
        cpus: the machine's CPUs (``os.cpu_count()``), >= 1 (less counts as 1).
        loadavg: /proc/loadavg's text, or None when unreadable.
        stat_before / stat_after: /proc/stat's text at the sample's start and end,
            or None when unreadable.
        max_workers: a cap above ``cpus`` never matters; below it, the workers stop there.

    Returns:
        FreeCores: ``workers`` = round(cpus - max(load_1m, busy_cores)), clamped to
        [1, cpus] (and ``max_workers``); a missing reading counts as no load. Never raises.
    """
    cpus = max(cpus, 1)
    load = parse_loadavg(loadavg) if loadavg is not None else None
    busy: float | None = None
    a = parse_proc_stat(stat_before) if stat_before is not None else None
    b = parse_proc_stat(stat_after) if stat_after is not None else None
    if a is not None and b is not None and b[1] > a[1]:
        busy = min(max((b[0] - a[0]) / (b[1] - a[1]), 0.0), 1.0) * cpus
    others = max(load or 0.0, busy or 0.0)
    n = min(max(int(cpus - others + 0.5), 1), cpus)
    if max_workers is not None:
        n = max(min(n, max_workers), 1)
    return FreeCores(n, cpus, load, busy)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def auto_workers(max_workers: int | None = None, proc: Path = Path("/proc"),
                 sample_s: float = SAMPLE_S) -> FreeCores:
    """Read this machine's load and apply :func:`free_cores` (blocks ``sample_s``).

    Args:
        max_workers: the workers' upper bound (``config._profile.MAX_WORKERS``).
        proc: the proc file system's root (tests point it at a folder).
        sample_s: the /proc/stat sample's length, s.

    Returns:
        FreeCores. Never raises.
    """
    before = _read(proc / "stat")
    if before is not None and sample_s > 0:
        time.sleep(sample_s)  # before any load and any event loop: a plain sleep
    after = _read(proc / "stat") if before is not None else None
    return free_cores(os.cpu_count() or 1, _read(proc / "loadavg"), before, after, max_workers)
