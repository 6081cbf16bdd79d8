"""``hopbench run``: a profile in, a results folder out (the synchronous shell).

Order of work, so that bad input costs nothing and a run loses nothing:
1. validate the profile (and its ``[emulator]`` table) - errors before any load;
2. create the results folder and write a first summary.json (complete: false);
3. start the embedded emulator in a child process when the target is embedded;
4. ``trio.run`` the ``LoadRunner``; every interval goes to intervals.hlog and
   timeline.jsonl as it ends, summary.json is checkpointed every few seconds;
5. whatever happened (end, SIGINT/SIGTERM, a crash), write the final files,
   with ``complete: false`` unless the run reached its planned end.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
import traceback
from collections import deque
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import trio

from ._clock import NS_PER_MS, NS_PER_S
from ._errors import HopbenchError
from ._profile import Profile, sanitized
from ._recorder import ALL, IntervalSnapshot, Recorder, Snapshot
from ._results import ResultsWriter, environment
from ._runner import LoadRunner, RunStats

__all__ = ["Interrupted", "RunOutcome", "emulator_warnings", "run_profile", "analyse", "default_out_dir", "base_meta", "mark_started",
           "timeline_line", "finish_run", "progress_line"]

SATURATION_LAG_NS = 25 * NS_PER_MS
SATURATION_CPU = 0.95
LOAD_HELD_FRACTION = 0.9
_CHECKPOINT_S = 5.0


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What ``run_profile`` produced.

    Attributes:
        summary: the summary.json content.
        out_dir: the results folder.
        complete: False when the run was interrupted or crashed.
        crashed: the traceback text when hopbench itself failed mid-run, else None.
    """

    summary: dict[str, Any]
    out_dir: Path
    complete: bool
    crashed: str | None


def default_out_dir(profile: Profile, root: Path = Path("results")) -> Path:
    """``results/<name>-<UTC timestamp>`` (unique: a suffix is added on a clash)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = root / f"{profile.run.name}-{stamp}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


def gc_figures(stats: RunStats) -> dict[str, Any]:
    """The garbage collector's share of the run (hopbench._collector): collections,
    their total and longest pause in ms."""
    return {"gc_collections": stats.gc_collections,
            "gc_pause_total_ms": round(stats.gc_pause_ns / NS_PER_MS, 3),
            "gc_pause_max_ms": round(stats.gc_pause_max_ns / NS_PER_MS, 3)}


def analyse(profile: Profile, stats: RunStats, total: Snapshot) -> tuple[bool, list[str], dict[str, Any]]:
    """Judge the load generator and the load actually held.

    Returns:
        (saturated, warnings, load): saturated is True when the client itself
        was the bottleneck (event-loop lag p99 or open-loop schedule lag p99
        over 25 ms, judged on p90 when there are fewer than 100 samples, or
        CPU over 95 % of a core), so latencies are not to be trusted; ``load``
        holds requested vs achieved figures.
    """
    warnings: list[str] = []
    lag = total.histogram(ALL, "loop_lag")
    sched = total.histogram(ALL, "schedule_lag")
    cpu = stats.cpu_fractions
    cpu_mean = sum(cpu) / len(cpu) if cpu else 0.0
    # p99 needs >= 100 samples to mean anything (1 s of lag probes, 100 arrivals);
    # shorter runs are judged on p90 so that one startup hiccup is not a verdict.
    def judged(h: Any) -> int:
        return h.percentile(99.0 if h.count >= 100 else 90.0) if h.count else 0

    lag_p99, sched_p99 = judged(lag), judged(sched)
    saturated = False
    if lag_p99 > SATURATION_LAG_NS:
        saturated = True
        warnings.append(f"load generator saturated: event-loop lag {lag_p99 / NS_PER_MS:.1f} ms "
                        f"(> {SATURATION_LAG_NS / NS_PER_MS:.0f} ms); latencies are not trustworthy")
    if sched_p99 > SATURATION_LAG_NS:
        saturated = True
        warnings.append(f"load generator saturated: open-loop schedule lag "
                        f"{sched_p99 / NS_PER_MS:.1f} ms; arrivals left late")
    if cpu_mean >= SATURATION_CPU:
        saturated = True
        warnings.append(f"load generator saturated: CPU {cpu_mean:.0%} of one core; "
                        "add --workers or lower the load")
    measured_ns = max(stats.stop_ns - profile.run.warmup_ns, 1)
    load: dict[str, Any] = {"mode": profile.load.mode, "peak_in_flight": stats.peak_in_flight,
                            "measured_s": round(measured_ns / NS_PER_S, 6),
                            "cpu_mean": round(cpu_mean, 4), "cpu_max": round(max(cpu, default=0), 4),
                            "loop_lag_p99_ms": (lag.percentile(99.0) if lag.count else 0) / NS_PER_MS}
    steady_ns = stats.stop_ns - min(stats.steady_from_ns, stats.stop_ns)
    mean_in_flight = stats.steady_area / steady_ns if steady_ns > 0 else None
    load["mean_in_flight"] = None if mean_in_flight is None else round(mean_in_flight, 3)
    if profile.load.mode == "concurrency":
        load["requested_concurrency"] = profile.load.concurrency
        want = profile.load.concurrency
        # a request budget that ends the run early is not a failure to hold load
        if (mean_in_flight is not None and profile.run.requests is None
                and mean_in_flight < LOAD_HELD_FRACTION * want):
            warnings.append(f"load not held: {mean_in_flight:.1f} streams in flight on average, "
                            f"{want} requested")
            load["held"] = False
        else:
            load["held"] = True
    else:
        arrivals = total.counter(ALL, "started") + total.counter(ALL, "max_in_flight_hits")
        achieved = total.counter(ALL, "started") / (measured_ns / NS_PER_S)  # sent, not dropped
        load.update(requested_rate_rps=profile.load.rate_rps, achieved_rate_rps=round(achieved, 3),
                    arrival_rate_rps=round(arrivals / (measured_ns / NS_PER_S), 3),
                    max_in_flight=profile.load.max_in_flight,
                    max_in_flight_hits=total.counter(ALL, "max_in_flight_hits"),
                    schedule_lag_p99_ms=(sched.percentile(99.0) if sched.count else 0) / NS_PER_MS)
        held = True
        if total.counter(ALL, "max_in_flight_hits"):
            held = False
            warnings.append(f"load not held: {total.counter(ALL, 'max_in_flight_hits')} arrivals "
                            f"dropped at max_in_flight = {profile.load.max_in_flight}")
        if profile.run.requests is None and achieved < LOAD_HELD_FRACTION * profile.load.rate_rps:
            held = False
            warnings.append(f"load not held: {achieved:.1f} arrivals/s achieved, "
                            f"{profile.load.rate_rps:g} requested")
        load["held"] = held
    completed = total.counter(ALL, "completed")
    buffered = total.counter(ALL, "proxy_buffering_suspected")
    if completed and buffered > completed / 2:
        warnings.append(f"proxy buffering suspected: {buffered} of {completed} streams arrived as "
                        "one burst (TTFT close to E2E)")
    counters = total.scopes[ALL].counters if ALL in total.scopes else {}
    for key, n in sorted(counters.items()):
        if key.startswith("out_of_range.") and n:
            warnings.append(f"{n} {key[13:]} values outside the histogram's range (counted, not recorded)")
    return saturated, warnings, load


def run_profile(profile: Profile, *, out_dir: Path | None = None,
                on_line: Callable[[str], None] | None = None,
                progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None = None,
                base_url: str | None = None) -> RunOutcome:
    """Run ``profile`` and write its results folder.

    Args:
        profile: a validated profile.
        out_dir: results folder (default ``results/<name>-<UTC timestamp>``).
        on_line: receives plain progress lines (None: silent).
        progress: receives each interval's snapshot and its timeline record
            (e.g. ``LiveProgress.on_interval``).
        base_url: overrides the profile's target (tests).

    Returns:
        RunOutcome. Results are written even when the run is interrupted or
        hopbench crashes mid-run (``complete: false``).

    Raises:
        ResultsError: the results folder cannot be written (before any load).
    """
    out = out_dir if out_dir is not None else default_out_dir(profile)
    scopes = [s.name for s in profile.scenarios]
    rec, warm = Recorder(scopes), Recorder(scopes)
    meta = base_meta(profile)
    files: dict[str, Any] = {}  # timeline, streams: opened inside the try below
    pending: deque[dict[str, Any]] = deque()  # the loop appends, the publishing thread drains

    def on_stream(line: dict[str, Any]) -> None:
        pending.append(line)

    def write_streams() -> None:
        f = files.get("streams")
        if f is None:
            return
        while pending:
            f.write(json.dumps(pending.popleft(), separators=(",", ":")) + "\n")
        f.flush()

    last_checkpoint = [time.monotonic()]

    def on_interval(iv: IntervalSnapshot, warm_iv: IntervalSnapshot, line: dict[str, Any]) -> None:
        writer.write_interval(warm_iv)
        writer.write_interval(iv)
        line = timeline_line(line, iv, warm_iv)
        files["timeline"].write(json.dumps(line) + "\n")
        files["timeline"].flush()
        write_streams()
        if progress is not None:
            progress(iv, line)  # LiveProgress sums the intervals: no re-encoding of totals
        if on_line is not None:
            on_line(progress_line(iv, line))
        if time.monotonic() - last_checkpoint[0] >= _CHECKPOINT_S:
            last_checkpoint[0] = time.monotonic()
            writer.update(dict(meta, ended_at=None), rec.folded_snapshot(), complete=False)

    crashed: str | None = None
    stats: RunStats | None = None
    runner: LoadRunner | None = None
    if profile.target.url is not None and profile.emulator:
        meta["notes"] = [f"the [emulator] table is not used: the target is {profile.target.url}"]
    writer = ResultsWriter(out)
    try:  # from the moment the folder exists, whatever happens leaves a summary.json
        files["timeline"] = open(out / "timeline.jsonl", "a", encoding="utf-8")
        files["streams"] = open(out / "streams.jsonl", "a", encoding="utf-8")
        with ExitStack() as stack:
            url = base_url or profile.target.url
            if url is None:
                from .emulator import EmbeddedEmulator

                emulator = stack.enter_context(EmbeddedEmulator(
                    profile.emulator_config, record_path=out / "ground_truth.jsonl"))
                url = emulator.base_url
                meta["ground_truth"] = "ground_truth.jsonl"
            mark_started(meta)
            writer.start(meta)
            runner = LoadRunner(profile, url, rec, warm, on_interval=on_interval,
                                on_stream=on_stream if profile.run.stream_log else None)
            try:
                stats = trio.run(runner.run)
            except KeyboardInterrupt as exc:
                meta["interrupted_by"] = getattr(exc, "signal_name", "SIGINT")
            except HopbenchError:
                raise
            except Exception as exc:
                crashed = traceback.format_exc()
                meta["crash"] = _crash_reason(exc)
    except Interrupted as exc:  # a signal before the load started (e.g. while the emulator starts)
        meta["interrupted_by"] = exc.signal_name
    finally:
        write_streams()  # the streams that ended after the last interval
        for f in files.values():
            f.close()
        if "started_at_unix_s" not in meta:  # stopped (or failed) before the load started
            mark_started(meta)
            writer.start(meta)
        stats = stats or (runner.stats if runner is not None else RunStats())
        summary = finish_run(profile, writer, meta, stats, rec.snapshot(),
                             warm.snapshot() if profile.run.warmup_ns else None, crashed)
    complete = summary["complete"]
    return RunOutcome(summary, out, complete, crashed)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM outside the trio run (the CLI installs a handler that
    raises it), so that a signal during start-up still leaves a results folder."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def _crash_reason(exc: BaseException) -> str:
    """One line naming the first real exception inside (trio wraps them in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


EMULATOR_LATE_P50_NS = 5 * NS_PER_MS
EMULATOR_LATE_P90_NS = 20 * NS_PER_MS


def emulator_warnings(ground_truth: Path) -> list[str]:
    """Warn when the embedded emulator could not keep its own schedule.

    Its ground truth records each stream's worst lateness (``lag_max_ns``).
    When the typical stream's worst event was over 5 ms late (p50), or one
    stream in ten over 20 ms (p90), the emulator, not the client or a gateway,
    shaped the measured latencies. (A few streams with one late event, the
    p99, are scheduling noise on a shared machine, not overload.)
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
    return [f"the embedded emulator fell behind its own schedule (worst lateness per stream p50 "
            f"{p50 / NS_PER_MS:.1f} ms, p90 {p90 / NS_PER_MS:.1f} ms): the latencies measure the "
            "emulator's overload, not the injected timings; lower the load or use a real target"]


def base_meta(profile: Profile) -> dict[str, Any]:
    """The top-level summary.json fields known before the run starts."""
    return {
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
    }


def mark_started(meta: dict[str, Any]) -> None:
    """Stamp the wall-clock start (the base time of intervals.hlog) into ``meta``."""
    now = time.time()
    meta["started_at"] = _iso(now)
    meta["started_at_unix_s"] = now


def timeline_line(line: dict[str, Any], iv: IntervalSnapshot, warm_iv: IntervalSnapshot) -> dict[str, Any]:
    """One timeline.jsonl record: the runner's interval figures plus the counts."""
    def both(name: str) -> int:
        return iv.counter(ALL, name) + warm_iv.counter(ALL, name)

    return dict(line, completed=both("completed"), started=both("started"),
                output_tokens=both("tokens.output.completed") + both("tokens.output.broken"))


def finish_run(profile: Profile, writer: ResultsWriter, meta: dict[str, Any], stats: RunStats,
               total: Snapshot, warmup: Snapshot | None, crashed: str | None,
               extra_warnings: list[str] | None = None, saturated: bool = False) -> dict[str, Any]:
    """Judge the run (``analyse``) and write the final results files.

    Returns:
        the summary dict as written to summary.json.
    """
    if stats.interrupted_by:
        meta["interrupted_by"] = stats.interrupted_by
    sat, warnings, load = analyse(profile, stats, total)
    warnings = (extra_warnings or []) + list(meta.pop("notes", [])) + warnings
    if meta.get("ground_truth"):
        warnings += emulator_warnings(writer.path / meta["ground_truth"])
    if total.counter(ALL, "started") == 0 and (meta.get("interrupted_by") is None and crashed is None):
        started_warm = warmup.counter(ALL, "started") if warmup is not None else 0
        warnings.append(f"no stream was measured: {started_warm} started during the warm-up and none "
                        "after it (lengthen run.duration_s or shorten run.warmup_s)")
    complete = crashed is None and meta.get("interrupted_by") is None and not extra_warnings
    if not complete:
        reason = meta.get("interrupted_by") or ""
        warnings.insert(0, f"hopbench crashed mid-run: {meta.get('crash')}" if crashed
                        else reason if reason.startswith("target unreachable")
                        else f"run interrupted ({reason or 'stopped'}): results are partial (complete: false)")
    ended = time.time()
    meta.update(ended_at=_iso(ended), duration_s=round(ended - meta["started_at_unix_s"], 3),
                saturated=sat or saturated, warnings=warnings, load=load,
                generator={"cpu_mean": load["cpu_mean"], "cpu_max": load["cpu_max"],
                           "loop_lag_p99_ms": load["loop_lag_p99_ms"],
                           "intervals": len(stats.intervals), **gc_figures(stats)})
    return writer.finish(meta, total, warmup, complete=complete)



def progress_line(iv: IntervalSnapshot, line: dict[str, Any]) -> str:
    ttft = iv.histogram(ALL, "ttft")
    itl = iv.histogram(ALL, "itl")
    t_s = line["end_ns"] / NS_PER_S
    dur_s = max((line["end_ns"] - line["start_ns"]) / NS_PER_S, 1e-9)
    broken = sum(iv.counter(ALL, k) for k in ("failed", "truncated", "timeout", "connect_error", "http_error"))

    def ms(h: Any, p: float) -> str:
        return f"{h.percentile(p) / NS_PER_MS:.1f}" if h.count else "-"

    return (f"[{t_s:6.1f}s] in flight {line['in_flight_now']:4d}  "
            f"done {line['completed'] / dur_s:7.1f}/s  tok {line['output_tokens'] / dur_s:8.0f}/s  "
            f"ttft p50/p99 {ms(ttft, 50)}/{ms(ttft, 99)} ms  itl p99 {ms(itl, 99)} ms  "
            f"broken {broken}  cpu {line['cpu']:.0%}")
