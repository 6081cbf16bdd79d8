"""What both run shells share: the one-process shell and the workers' driver.

Role: the helpers ``hopbench.driver._single`` (one process) and
``hopbench.driver._workers`` (the driver of worker processes and Ray tasks) both
use, so that neither shell imports the other: :class:`RunOutcome` (what a run
produced), the results folder's default name, the pre-run metadata
(:func:`base_meta`, :func:`build_meta` with workers, :func:`mark_started`), the
embedded emulator's lateness warning, the signal hold around the final writes
and the progress line.

Invariants:

* The pre-run metadata's keys and their order lead summary.json
  (``hopbench.driver._summary.Summary.to_json``); the judge adds its fields after them.
* Wall-clock stamps are UTC, ISO 8601 with ms (:func:`iso_ms`); every duration
  inside is integer ns, shown in ms or s.
* Nothing here touches trio or the load: run once per run, never per event.
* The file-descriptor limit is raised (:func:`fd_limit_for`) before the emulator or
  any worker starts: children inherit it.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._advice import ADVICE
from .._errors import ProfileError
from .._limits import fds_needed, raise_fd_limit
from .._units import NS_PER_MS, NS_PER_S
from ..config._profile import sanitized
from ..engine._saturation import BUSY_CPU, MACHINE_IDLE_SHARE, HostUsage
from ..config._records import Profile
from ..measure._outcomes import BROKEN
from ..measure._recorder import ALL, IntervalSnapshot
from ._results import environment

__all__ = ["CHECKPOINT_S", "EMULATOR_LATE_P50_NS", "EMULATOR_LATE_P90_NS", "RunOutcome", "base_meta", "build_meta",
           "default_out_dir", "emulator_warnings", "fd_limit_for", "hold_signals", "iso_ms", "mark_started",
           "progress_line", "resolved_load"]


#: Seconds between summary.json checkpoints during the load, in one process and in the
#: workers' driver alike: what a SIGKILL leaves (docs/results/folder.md).
CHECKPOINT_S = 5.0


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What ``run_profile`` produced.

    Attributes:
        summary: the summary.json content.
        out_dir: the results folder.
        complete: False when the run was interrupted or crashed.
        crashed: the traceback text when hopbench itself failed mid-run, else None.
        late_signals: SIGINT/SIGTERM names received while the final results
            were written (they were held off; the CLI then skips report.html).
    """

    summary: dict[str, Any]
    out_dir: Path
    complete: bool
    crashed: str | None
    late_signals: tuple[str, ...] = ()


def default_out_dir(profile: Profile, root: Path = Path("results")) -> Path:
    """``results/<name>-<UTC timestamp>`` (unique: a suffix is added on a clash)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = root / f"{profile.run.name}-{stamp}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def iso_ms(t: float) -> str:
    """``t`` (Unix time, s) as ISO 8601 UTC with milliseconds: ``2025-01-02T03:04:05.678+00:00``."""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


EMULATOR_LATE_P50_NS = 5 * NS_PER_MS
EMULATOR_LATE_P90_NS = 20 * NS_PER_MS


def emulator_warnings(ground_truth: Path, host: HostUsage | None = None) -> list[str]:
    """Warn when the embedded emulator could not keep its own schedule, with its one cause.

    Its ground truth records each stream's worst lateness (``lag_max_ns``), which
    the emulator measures against its own schedule. When the typical stream's worst
    event was over 5 ms late (p50), or one stream in ten over 20 ms (p90), the
    emulator, not the client or a gateway, shaped the measured latencies. (A few
    streams with one late event, the p99, are scheduling noise on a shared machine,
    not overload.)

    Why it was late is judged by the emulator's own CPU over the run (``host``:
    hopbench.engine._saturation.HostUsage.emulator_cores), never by the machine's
    load alone (issue 39 item 7: 16 streams at 0.1 cores, late because neighbours
    took the CPU, were told to "lower the load or use a real target"):

    * it used ``BUSY_CPU`` (80 %) of a core or more, or its CPU was not measured:
      its own overload (``hopbench._advice.ADVICE["emulator_overloaded"]``);
    * it used less and the machine had no idle CPU (``MACHINE_IDLE_SHARE``): it
      waited for a CPU others took: neighbours (``emulator_starved``: a quieter machine, the
      cure of the run's "machine_busy" saturation, said once: ``one_cure_each``), or
      hopbench's own load generator, when it took more than the neighbours
      (``emulator_crowded``: the emulator elsewhere, or a lower load);
    * it used less on a machine with idle CPUs: unexplained (``emulator_late``).

    Args:
        ground_truth: the emulator's record (JSON lines); unreadable: no warning.
        host: the run's CPU figures on the emulator's machine, None when not measured.

    Returns:
        list of str, empty or one warning. Never raises.
    """
    lags: list[int] = []
    try:
        with open(ground_truth, encoding="utf-8") as f:
            for line in f:
                try:
                    lag = json.loads(line).get("lag_max_ns")
                except ValueError:
                    continue
                if isinstance(lag, int):
                    lags.append(lag)
    except OSError:
        return []
    if not lags:
        return []
    lags.sort()
    p50, p90 = lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.9))]
    if p50 <= EMULATOR_LATE_P50_NS and p90 <= EMULATOR_LATE_P90_NS:
        return []
    late = (f"the embedded emulator fell behind its own schedule (worst lateness per stream p50 "
            f"{p50 / NS_PER_MS:.1f} ms, p90 {p90 / NS_PER_MS:.1f} ms)")
    emu = host.emulator_cores if host is not None else None
    if emu is None or emu >= BUSY_CPU:
        used = "" if emu is None else f" while it used {emu:.0%} of one core"
        return [f"{late}{used}: {ADVICE['emulator_overloaded'].text}"]
    busy = host.machine_busy_share if host is not None else None
    if busy is not None and 1.0 - busy <= MACHINE_IDLE_SHARE and host is not None:
        # whose CPU it waited for: the neighbours', or hopbench's own client's (a saturated run's
        # client took 0.87 cores and the neighbours 0.39: "neighbours took" was a new user's finding)
        others = host.others_cores or 0.0
        who = "emulator_crowded" if host.client_cores > others else "emulator_starved"
        return [f"{late} while it used {emu:.0%} of one core and the machine's {host.cpus} CPUs were {busy:.0%} "
                f"busy (hopbench's load generator {host.client_cores:.2f} cores, neighbours {others:.2f}): "
                f"{ADVICE[who].text}"]
    idle = "" if busy is None else f" and the machine's CPUs were {busy:.0%} busy"
    return [f"{late} while it used {emu:.0%} of one core{idle}: {ADVICE['emulator_late'].text}"]


def base_meta(profile: Profile) -> dict[str, Any]:
    """The top-level summary.json fields known before the run starts (``workers_auto``:
    how ``--workers auto`` was resolved, only when it was asked for)."""
    meta: dict[str, Any] = {
        "name": profile.run.name,
        "profile": sanitized(profile),
        "environment": environment(),
        "started_at": None,
        "ended_at": None,
        "target": "embedded" if profile.target.embedded else profile.target.url,
        "warnings": [],
        "saturated": False,
        "gate": dict(profile.gate) or None,
        "interrupted_by": None,
        "workers": 1,
        "resolved_load": resolved_load(profile),
    }
    if profile.run.workers_note:  # docs/scaleout.md, "--workers auto"
        meta["workers_auto"] = profile.run.workers_note
    return meta


def build_meta(profile: Profile, engine: str, n_workers: int) -> dict[str, Any]:
    """The summary metadata before the run: ``run_profile``'s plus the engine."""
    meta = base_meta(profile)
    meta.update(workers=n_workers, engine=engine)
    if profile.load.mode == "trace" and profile.load.trace.zero_note:  # rows with 0 tokens, sent with 1
        meta.setdefault("notes", []).append(profile.load.trace.zero_note)
    return meta


def resolved_load(profile: Profile) -> dict[str, Any]:
    """The load shape as the run resolved it, defaults applied (summary.json
    ``resolved_load``; ``hopbench compare`` compares these, not the text):
    ``load.mode`` and that mode's keys, ``run.duration_s``, ``run.requests``,
    ``run.warmup_s`` (seconds) and ``scenarios`` ([name, weight] pairs)."""
    ld, run = profile.load, profile.run
    out: dict[str, Any] = {"load.mode": ld.mode}
    if ld.mode == "concurrency":
        out.update({"load.concurrency": ld.concurrency, "load.ramp_up_s": ld.ramp_up_ns / NS_PER_S})
    elif ld.mode == "trace":
        out.update({"load.trace": str(ld.trace.path.name), "load.speedup": ld.trace.speedup,
                    "load.loop": ld.trace.loop, "load.max_in_flight": ld.max_in_flight})
    else:
        out.update({"load.rate_rps": ld.rate_rps, "load.arrival": ld.arrival,
                    "load.max_in_flight": ld.max_in_flight})
    out.update({"run.duration_s": None if run.duration_ns is None else run.duration_ns / NS_PER_S,
                "run.requests": run.requests, "run.warmup_s": run.warmup_ns / NS_PER_S,
                "scenarios": [[s.name, s.weight] for s in profile.scenarios]})
    return out


def mark_started(meta: dict[str, Any]) -> None:
    """Stamp the wall-clock start (the base time of intervals.hlog) into ``meta``."""
    now = time.time()
    meta["started_at"] = iso_ms(now)
    meta["started_at_unix_s"] = now


@contextmanager
def hold_signals(*, announce: bool = True, then: Any = None) -> Iterator[list[str]]:
    """While the final results are written, SIGINT and SIGTERM do not
    interrupt: each one is noted (the yielded list receives its name) and
    announced (unless ``announce`` is False: the caller acts on it at once);
    the caller may then skip optional work (report.html). Outside the main
    thread (tests, worker processes' threads) nothing is changed.

    Args:
        announce: print a line to stderr for each signal held.
        then: a signal handler to install on a normal exit instead of
            restoring the previous ones (no moment between the two where the previous
            handler could act); the caller restores them itself (it reads
            them with ``signal.getsignal`` before the block).

    Yields:
        list of signal names received during the block, in order.
    """
    import signal
    import sys

    got: list[str] = []

    def note(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        got.append(name)
        if announce:
            print(f"hopbench: {name}: writing results, please wait (report.html will be skipped)",
                  file=sys.stderr, flush=True)

    old: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, note)
    except ValueError:  # not the main thread
        pass
    handover = None
    try:
        yield got
        handover = then  # only on a normal exit: after an error the previous handlers return
    finally:
        for signum, h in old.items():
            signal.signal(signum, h if handover is None else handover)


def progress_line(iv: IntervalSnapshot, line: dict[str, Any]) -> str:
    """One plain progress line for an interval (``hopbench run`` without a terminal, ``on_line``).

    Args:
        iv: the interval's measured snapshot.
        line: its timeline.jsonl record (``end_ns``, ``start_ns``: ns from the run start;
            ``in_flight_now``, ``completed``, ``output_tokens``, ``cpu``).

    Returns:
        the line (no newline): the run's time in s, the rates per second, the TTFT
        p50/p99 and ITL p99 in ms ("-" without samples), broken streams and CPU.
    """
    ttft = iv.histogram(ALL, "ttft")
    itl = iv.histogram(ALL, "itl")
    t_s = line["end_ns"] / NS_PER_S
    dur_s = max((line["end_ns"] - line["start_ns"]) / NS_PER_S, 1e-9)
    broken = sum(iv.counter(ALL, k) for k in BROKEN)

    def ms(h: Any, p: float) -> str:
        return f"{h.percentile(p) / NS_PER_MS:.1f}" if h.count else "-"

    return (f"[{t_s:6.1f}s] in flight {line['in_flight_now']:4d} "
            f"(+{line.get('connecting_now', 0)} connecting, {line.get('waiting_now', 0)} waiting)  "
            f"done {line['completed'] / dur_s:7.1f}/s  tok {line['output_tokens'] / dur_s:8.0f}/s  "
            f"ttft p50/p99 {ms(ttft, 50)}/{ms(ttft, 99)} ms  itl p99 {ms(itl, 99)} ms  "
            f"broken {broken}  cpu {line['cpu']:.0%}")


def fd_limit_for(profile: Profile) -> str | None:
    """Raise this process's soft file-descriptor limit for ``profile``'s load, before any load.

    A closed loop holds one socket per user (the embedded emulator, a child, one per
    stream too); local worker processes inherit the limit and each holds its share.
    An open loop or a trace holds at most ``max_in_flight``, usually far fewer.
    A Ray run's workers are other processes on other machines: not judged here.

    Returns:
        A warning for an open loop whose ``max_in_flight`` the limit cannot hold
        (streams past it would fail as ``connect_error.fd_limit``), else None.

    Raises:
        ProfileError: a closed loop (``[load].concurrency``, or a ``[[stage]]``'s) that even
            the hard limit cannot hold, naming the profile, the key and the cure; no load sent.
    """
    if profile.run.engine == "ray":
        return None
    workers = max(profile.run.workers, 1)
    users = profile.load.concurrency if profile.load.mode == "concurrency" else 0
    key = "[load].concurrency"
    for stage in profile.stages:
        if getattr(stage, "mode", None) == "concurrency" and int(stage.load) > users:
            users, key = int(stage.load), "[[stage]] concurrency"
    in_flight = profile.load.max_in_flight if profile.load.mode != "concurrency" else 0
    streams = max(users, in_flight)
    limit = raise_fd_limit(fds_needed(-(-streams // workers)))
    if limit.enough:
        return None
    if users and fds_needed(-(-users // workers)) > (limit.soft or 0):
        raise ProfileError(limit.advice(key), path=profile.path)
    return ("max_in_flight: " + limit.advice("[load].max_in_flight")
            + "; streams past it fail as connect_error.fd_limit")
