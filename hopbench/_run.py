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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Callable

import trio

from ._clock import NS_PER_MS, NS_PER_S
from ._errors import HopbenchError, ResultsError, RunAborted
from ._outcomes import BROKEN, ERROR_RATE_WARN
from ._profile import Profile, sanitized
from ._recorder import ALL, IntervalSnapshot, Recorder, Snapshot
from ._results import ResultsWriter, environment, write_error
from ._inflight import BUSY_PHASES, PHASES
from ._runner import LoadRunner, RunStats
from ._slo import slo_summary
from ._saturation import SATURATION_CPU, SATURATION_LAG_NS, GeneratorFigures, HostUsage, judge

__all__ = ["Interrupted", "RunOutcome", "emulator_warnings", "run_profile", "analyse", "default_out_dir", "base_meta", "mark_started",
           "timeline_line", "finish_run", "progress_line", "slo_block"]

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


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


def gc_figures(stats: RunStats) -> dict[str, Any]:
    """The garbage collector's share of the run (hopbench._collector): collections,
    their total, longest and p99 pause in ms (several workers: the worst worker's p99)."""
    return {"gc_collections": stats.gc_collections,
            "gc_pause_total_ms": round(stats.gc_pause_ns / NS_PER_MS, 3),
            "gc_pause_max_ms": round(stats.gc_pause_max_ns / NS_PER_MS, 3),
            "gc_pause_p99_ms": round(stats.gc_pause_p99_ns / NS_PER_MS, 3)}


def host_figures(stats: RunStats) -> dict[str, Any]:
    """The process's and the machine's CPU use over the run (hopbench._saturation):
    ``process_cpu_cores`` (every thread, cores on average), ``machine_busy_share``
    and ``steal_share`` (shares of all CPUs' time; None without /proc/stat),
    ``cpus``; {} when not measured."""
    host = HostUsage.from_json(stats.host)
    if host is None:
        return {}
    return {"process_cpu_cores": round(host.process_cores, 4), "cpus": host.cpus,
            "machine_busy_share": None if host.machine_busy_share is None else round(host.machine_busy_share, 4),
            "steal_share": None if host.steal_share is None else round(host.steal_share, 4)}


def analyse(profile: Profile, stats: RunStats, total: Snapshot) -> tuple[bool, list[str], dict[str, Any]]:
    """Judge the load generator and the load actually held.

    Returns:
        (saturated, warnings, load): saturated is True when the client itself
        was the bottleneck (event-loop lag p99 or open-loop schedule lag p99
        over 25 ms, judged on p90 when there are fewer than 100 samples, or
        CPU over 95 % of a core), so latencies are not to be trusted, whatever
        the cause; the warning names the cause with its figure
        (hopbench._saturation.judge: the client's CPU, collector pauses, a busy
        machine); ``load`` holds requested vs achieved figures and
        ``saturation`` (the verdict, moved to ``generator`` by finish_run).

    In flight (hopbench._inflight; docs/results.md, "In flight"):
    ``mean_in_flight`` and ``peak_in_flight`` count what a gateway sees (the
    request sent, not finished); ``in_flight_by_phase`` the steady window's
    mean per phase, ``mean_busy`` (connecting + in flight) and ``mean_open``
    (every phase, client-side waiting too). Load held: a closed loop of N
    users holds its load when on average at least 90 % of N users are busy
    with the target (connecting to it counts: a k6 VU or a wrk connection
    that is connecting is still offering load; waiting on the client side,
    or closing a stream the target has finished, does not); an open loop when the requests actually sent to the target
    reach 90 % of the requested rate and no arrival was dropped.
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
    # Say what was measured and what it points at (hopbench._saturation): the
    # client's own CPU, collector pauses, or a busy machine (steal, neighbours).
    verdict = judge(GeneratorFigures(
        lag_p99, sched_p99, cpu_mean, max(cpu, default=0.0), stats.gc_collections, stats.gc_pause_ns,
        stats.gc_pause_max_ns, stats.ended_ns or stats.stop_ns, HostUsage.from_json(stats.host)))
    saturated = verdict.saturated
    if verdict.saturated:
        warnings.append(str(verdict.warning()))
    measured_ns = max(stats.stop_ns - profile.run.warmup_ns, 1)
    load: dict[str, Any] = {"mode": profile.load.mode, "peak_in_flight": stats.peak_in_flight,
                            "peak_open": stats.peak_open,
                            "measured_s": round(measured_ns / NS_PER_S, 6),
                            "cpu_mean": round(cpu_mean, 4), "cpu_max": round(max(cpu, default=0), 4),
                            "loop_lag_p99_ms": (lag.percentile(99.0) if lag.count else 0) / NS_PER_MS,
                            "saturation": verdict.to_json()}  # moved to generator by finish_run
    steady_ns = stats.stop_ns - min(stats.steady_from_ns, stats.stop_ns)
    mean_in_flight = stats.steady_area / steady_ns if steady_ns > 0 else None
    load["mean_in_flight"] = None if mean_in_flight is None else round(mean_in_flight, 3)
    by_phase = {name: (stats.steady_phase_area.get(name, 0) / steady_ns if steady_ns > 0 else None)
                for name in PHASES}
    load["in_flight_by_phase"] = {k: None if v is None else round(v, 3) for k, v in by_phase.items()}
    mean_busy = None if steady_ns <= 0 else sum(by_phase[PHASES[p]] or 0.0 for p in BUSY_PHASES)
    load["mean_busy"] = None if mean_busy is None else round(mean_busy, 3)
    load["mean_open"] = None if steady_ns <= 0 else round(sum(v or 0.0 for v in by_phase.values()), 3)
    if profile.load.mode == "concurrency":
        load["requested_concurrency"] = profile.load.concurrency
        want = profile.load.concurrency
        # a request budget that ends the run early is not a failure to hold load
        if (mean_busy is not None and profile.run.requests is None
                and mean_busy < LOAD_HELD_FRACTION * want):
            warnings.append(f"load not held: {mean_busy:.1f} of {want} users busy with the target on "
                            f"average ({mean_in_flight or 0.0:.1f} in flight, "
                            f"{by_phase['connecting'] or 0.0:.1f} connecting); "
                            f"{by_phase['waiting'] or 0.0:.1f} waiting to start on the client side")
            load["held"] = False
        else:
            load["held"] = True
    else:
        arrivals = total.counter(ALL, "started") + total.counter(ALL, "max_in_flight_hits")
        # the requests the target received: written to it, not just started (a
        # stream still waiting for the client's loop or a connection is not load)
        achieved = stats.sent_measured / (measured_ns / NS_PER_S)
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
            warnings.append(f"load not held: {achieved:.1f} requests/s sent to the target, "
                            f"{profile.load.rate_rps:g} requested")
        load["held"] = held
    completed = total.counter(ALL, "completed")
    buffered = total.counter(ALL, "proxy_buffering_suspected")
    if completed and buffered > completed / 2:
        warnings.append(f"proxy buffering suspected: {buffered} of {completed} streams arrived as "
                        "one burst (TTFT close to E2E)")
    lagged = total.counter(ALL, "client_lagged")
    if completed and lagged > completed / 2:
        warnings.append(f"client_lagged: {lagged} of {completed} streams arrived as one burst because "
                        "hopbench's own event loop was late to read them (not evidence of a proxy; "
                        "see loop_lag)")
    counters = total.scopes[ALL].counters if ALL in total.scopes else {}
    for key, n in sorted(counters.items()):
        if key.startswith("out_of_range.") and n:
            warnings.append(f"{n} {key[13:]} values outside the histogram's range (counted, not recorded)")
    warnings += outcome_warnings(counters, stats)
    return saturated, warnings, load


def _top_details(counters: Mapping[str, int], outcomes: tuple[str, ...], n: int = 4) -> str:
    """"http_error.501 50, connect_error.refused 3": the commonest outcome details."""
    details = [(k, v) for k, v in counters.items() if v and k.partition(".")[0] in outcomes
               and "." in k and not k.startswith("http_error_code.")]
    if not details:
        details = [(k, counters.get(k, 0)) for k in outcomes if counters.get(k)]
    details.sort(key=lambda kv: (-kv[1], kv[0]))
    more = f", +{len(details) - n} more" if len(details) > n else ""
    return ", ".join(f"{k} {v}" for k, v in details[:n]) + more


def outcome_warnings(counters: Mapping[str, int], stats: RunStats) -> list[str]:
    """Warnings about how the streams ended (docs/results.md, "Warnings").

    Args:
        counters: the "all" scope's counters of the measured run.
        stats: the runner's figures (``codes_folded``).

    Returns:
        list of str, possibly empty: always one when streams started and none
        completed; one when the error rate or the interruption rate is above
        ``ERROR_RATE_WARN``; one for file-descriptor exhaustion
        (``connect_error.fd_limit``); one for wire error codes folded into
        "other".
    """
    out: list[str] = []
    # streams the scenario's cancel key closed on purpose say nothing either way
    started = counters.get("started", 0) - counters.get("client_cancelled", 0)
    completed = counters.get("completed", 0)
    errors = sum(counters.get(k, 0) for k in BROKEN)
    cancelled = counters.get("cancelled", 0)
    if started and not completed:
        out.append(f"nothing completed: none of the {started} streams completed "
                   f"({_top_details(counters, BROKEN + ('cancelled',))}); "
                   "see error_samples in summary.json for what the target said")
    elif started and errors / started > ERROR_RATE_WARN:
        out.append(f"error rate {errors / started:.1%} (> {ERROR_RATE_WARN:.0%}): {errors} of {started} "
                   f"streams ended in error ({_top_details(counters, BROKEN)})")
    if started and completed and cancelled / started > ERROR_RATE_WARN:
        out.append(f"interruption rate {cancelled / started:.1%} (> {ERROR_RATE_WARN:.0%}): {cancelled} of "
                   f"{started} streams were cancelled at the stop (still running after run.grace_s)")
    fd = counters.get("connect_error.fd_limit", 0)
    if fd:
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = f"{soft} per process" if soft != resource.RLIM_INFINITY else "the system's"
        except (ImportError, OSError, ValueError):
            limit = "the process's"
        out.append(f"{fd} streams could not open a connection: hopbench ran out of file descriptors "
                   f"(limit: {limit}, `ulimit -n`); raise it (e.g. `ulimit -n 65536` before the run) "
                   "or lower the concurrency / --workers share per process")
    if stats.codes_folded:
        out.append(f"{stats.codes_folded} streams' error codes were counted as \"other\": the server sent "
                   "more distinct error codes than hopbench counts by name")
    return out


def headline(total: Snapshot, measured_s: float) -> dict[str, Any]:
    """The run in a few figures (summary.json ``headline``, docs/results.md).

    Args:
        total: the measured run's snapshot.
        measured_s: the measured window in seconds (``load.measured_s``).

    Returns:
        {started, completed, errors, cancelled: int; error_rate,
        interrupted_rate: float in [0, 1] or None when nothing started;
        completed_per_s, output_tokens_per_s: float over the measured window}.
    """
    c = total.counter
    started, completed = c(ALL, "started"), c(ALL, "completed")
    errors = sum(c(ALL, k) for k in BROKEN)
    cancelled = c(ALL, "cancelled")
    window = measured_s if measured_s > 0 else 1.0
    out_tokens = c(ALL, "tokens.output.completed") + c(ALL, "tokens.output.broken")
    return {"started": started, "completed": completed, "errors": errors, "cancelled": cancelled,
            "client_cancelled": c(ALL, "client_cancelled"),  # on purpose: the scenarios' cancel key
            "error_rate": round(errors / started, 4) if started else None,
            "interrupted_rate": round(cancelled / started, 4) if started else None,
            "completed_per_s": round(completed / window, 3),
            "output_tokens_per_s": round(out_tokens / window, 3)}


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
    scopes = profile.scopes  # the arms' names with [[arm]] tables
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
        for name, write in (("timeline.jsonl", lambda: (files["timeline"].write(json.dumps(line) + "\n"),
                                                        files["timeline"].flush())),
                            ("streams.jsonl", write_streams)):
            try:
                write()
            except OSError as exc:  # e.g. a full disk: stop the run, say which file and why
                raise ResultsError(write_error(out / name, exc)) from exc
        if progress is not None:
            progress(iv, line)  # LiveProgress sums the intervals: no re-encoding of totals
        if on_line is not None:
            on_line(progress_line(iv, line))
        if time.monotonic() - last_checkpoint[0] >= _CHECKPOINT_S:
            last_checkpoint[0] = time.monotonic()
            writer.update(dict(meta, ended_at=None), rec.folded_snapshot(), complete=False)

    crashed: str | None = None
    write_failed: list[ResultsError] = []
    stats: RunStats | None = None
    runner: LoadRunner | None = None
    if profile.target.url is not None and profile.emulator:
        meta["notes"] = [f"the [emulator] table is not used: the target is {profile.target.url}"]
    writer = ResultsWriter(out)
    scrapers: list[Any] = []  # the [[scrape]] threads (hopbench._scrape), stopped with the stack
    try:  # from the moment the folder exists, whatever happens leaves a summary.json
        files["timeline"] = open(out / "timeline.jsonl", "a", encoding="utf-8")
        files["streams"] = open(out / "streams.jsonl", "a", encoding="utf-8")
        with ExitStack() as stack:
            url = base_url or profile.target.url
            arms = start_arms(profile, stack, out, meta) if profile.arms else []
            if arms:
                url = arms[0][1]  # (the runner sends each request to its arm's URL)
            elif url is None:
                from .emulator import EmbeddedEmulator

                emulator = stack.enter_context(EmbeddedEmulator(
                    profile.emulator_config, record_path=out / "ground_truth.jsonl"))
                url = emulator.base_url
                meta["ground_truth"] = "ground_truth.jsonl"
            if profile.scrape:  # started (imports paid) before the load, scraping from its start
                from ._scrape import Scraper

                scrapers.append(stack.enter_context(Scraper(
                    profile.scrape, out, None, embedded_url=url if meta.get("ground_truth") else None)))
            mark_started(meta)
            writer.start(meta)
            for scraper in scrapers:
                scraper.begin(time.monotonic_ns())
            runner = LoadRunner(profile, url, rec, warm, on_interval=on_interval,
                                on_stream=on_stream if profile.run.stream_log else None,
                                arms=[(name, u) for name, u, _ in arms])
            if meta.get("ground_truth"):  # the embedded emulator: notice its death at once
                runner.target_alive = emulator.exit_reason
            elif any(e is not None for _, _, e in arms):
                runner.target_alive = arms_alive(arms)
            try:
                stats = trio.run(runner.run)
            except KeyboardInterrupt as exc:
                meta["interrupted_by"] = getattr(exc, "signal_name", "SIGINT")
            except Exception as exc:
                lost = _first(exc, ResultsError)
                if lost is not None:  # results could not be written mid-run (e.g. a full disk)
                    write_failed.append(lost)
                    crashed = meta["crash"] = str(lost)
                elif isinstance(exc, HopbenchError):
                    raise
                else:
                    crashed = traceback.format_exc()
                    meta["crash"] = _crash_reason(exc)
    except Interrupted as exc:  # a signal before the load started (e.g. while the emulator starts)
        meta["interrupted_by"] = exc.signal_name
    finally:
        with hold_signals() as late:  # a further Ctrl-C must not cut the final writes
            try:
                write_streams()  # the streams that ended after the last interval
            except OSError as exc:
                if crashed is None:
                    crashed = meta["crash"] = write_error(out / "streams.jsonl", exc)
            for f in files.values():
                try:
                    f.close()
                except OSError:
                    pass
            try:
                if "started_at_unix_s" not in meta:  # stopped (or failed) before the load started
                    mark_started(meta)
                    writer.start(meta)
                stats = stats or (runner.stats if runner is not None else RunStats())
                if runner is not None and runner.cancels and meta.get("ground_truth"):
                    from ._cancel import join_record  # the emulator has stopped: its record is whole

                    meta.setdefault("notes", []).extend(
                        join_record(rec, runner.cancels, out / meta["ground_truth"]))
                for arm in meta.get("arms") or ():  # embedded arms: each its own record
                    if arm.get("ground_truth"):
                        from ._cancel import join_record

                        cancels = [c for c in runner.cancels if c.scope == arm["name"]] if runner else []
                        notes = meta.setdefault("notes", [])
                        notes.extend(join_record(rec, cancels, out / arm["ground_truth"]))
                        notes.extend(f"arm {arm['name']}: {w}"
                                     for w in emulator_warnings(out / arm["ground_truth"]))
                for scraper in scrapers:  # gateway metrics: counted, warned, never failing the run
                    meta["scrape"] = scraper.summary()
                    meta.setdefault("notes", []).extend(scraper.warnings())
                summary = finish_run(profile, writer, meta, stats, rec.snapshot(),
                                     warm.snapshot() if profile.run.warmup_ns else None, crashed)
            except ResultsError as exc:
                writer.close()
                raise RunAborted(f"the run's results were not fully written: {exc}") from exc
    if write_failed:
        raise RunAborted(f"the run stopped: its results could not be written: {write_failed[0]} "
                         f"(what was written is in {out})")
    complete = summary["complete"]
    return RunOutcome(summary, out, complete, crashed, tuple(late))


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM outside the trio run (the CLI installs a handler that
    raises it), so that a signal during start-up still leaves a results folder."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def _first(exc: BaseException, kind: type[ResultsError]) -> ResultsError | None:
    """The first ``kind`` in ``exc`` or inside its (nested) exception groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            found = _first(e, kind)
            if found is not None:
                return found
    return None


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
        "resolved_load": resolved_load(profile),
    }


def resolved_load(profile: Profile) -> dict[str, Any]:
    """The load shape as the run resolved it, defaults applied (summary.json
    ``resolved_load``; ``hopbench compare`` compares these, not the text):
    ``load.mode`` and that mode's keys, ``run.duration_s``, ``run.requests``,
    ``run.warmup_s`` (seconds) and ``scenarios`` ([name, weight] pairs)."""
    ld, run = profile.load, profile.run
    out: dict[str, Any] = {"load.mode": ld.mode}
    if ld.mode == "concurrency":
        out.update({"load.concurrency": ld.concurrency, "load.ramp_up_s": ld.ramp_up_ns / NS_PER_S})
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
                        else reason if reason.startswith(("target unreachable", "target lost"))
                        else f"run interrupted ({reason or 'stopped'}): results are partial (complete: false)")
    ended = time.time()
    meta.update(ended_at=_iso(ended), duration_s=round(ended - meta["started_at_unix_s"], 3),
                saturated=sat or saturated, warnings=_unique(warnings), load=load,
                headline=headline(total, load["measured_s"]),
                slo=slo_block(profile, total, load["measured_s"]),
                error_samples=dict(sorted(stats.error_samples.items())),
                generator={"cpu_mean": load["cpu_mean"], "cpu_max": load["cpu_max"],
                           "loop_lag_p99_ms": load["loop_lag_p99_ms"],
                           "intervals": stats.interval_count, **gc_figures(stats),
                           **host_figures(stats), "saturation": load.pop("saturation", None)})
    return writer.finish(meta, total, warmup, complete=complete)



def slo_block(profile: Profile, total: Snapshot, measured_s: float) -> dict[str, Any] | None:
    """summary.json's ``slo`` block for ``profile``'s scenarios (hopbench._slo.slo_summary)."""
    return slo_summary({sc.name: sc.slo for sc in profile.scenarios}, total, measured_s)


def _unique(warnings: list[str]) -> list[str]:
    """``warnings`` without repeats, in first-seen order."""
    return list(dict.fromkeys(warnings))


@contextmanager
def hold_signals() -> Iterator[list[str]]:
    """While the final results are written, SIGINT and SIGTERM do not
    interrupt: each one is noted (the yielded list receives its name) and
    announced; the caller may then skip optional work (report.html). Outside
    the main thread (tests, worker processes' threads) nothing is changed.

    Yields:
        list of signal names received during the block, in order.
    """
    import signal
    import sys

    got: list[str] = []

    def note(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        got.append(name)
        print(f"hopbench: {name}: writing results, please wait (report.html will be skipped)",
              file=sys.stderr, flush=True)

    old: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, note)
    except ValueError:  # not the main thread
        pass
    try:
        yield got
    finally:
        for signum, h in old.items():
            signal.signal(signum, h)


def progress_line(iv: IntervalSnapshot, line: dict[str, Any]) -> str:
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


def start_arms(profile: Profile, stack: ExitStack, out: Path,
               meta: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Start the embedded emulators of a profile's A/B arms (hopbench._arms).

    Each embedded arm gets its own emulator process and ground-truth file
    ``ground_truth.<arm>.jsonl``; arms with a URL are used as they are.
    ``meta["arms"]`` lists them (name, target, ground_truth file or None).

    Returns:
        (name, base URL, the EmbeddedEmulator or None) per arm, in profile order.

    Raises:
        EmulatorStartError: an arm's emulator did not start.
    """
    from .emulator import EmbeddedEmulator

    arms: list[tuple[str, str, Any]] = []
    listed: list[dict[str, Any]] = []
    meta["arms"] = listed
    for arm in profile.arms:
        if arm.url is not None:
            arms.append((arm.name, arm.url, None))
            listed.append({"name": arm.name, "target": arm.url, "ground_truth": None})
            continue
        record = f"ground_truth.{arm.name}.jsonl"
        emulator = stack.enter_context(EmbeddedEmulator(arm.emulator_config, record_path=out / record))
        arms.append((arm.name, emulator.base_url, emulator))
        listed.append({"name": arm.name, "target": "embedded", "ground_truth": record})
    meta["target"] = " | ".join(f"{a['name']}: {a['target']}" for a in listed)
    return arms


def arms_alive(arms: list[tuple[str, str, Any]]) -> Callable[[], str | None]:
    """A ``LoadRunner.target_alive`` over the arms' embedded emulators: the first
    one's exit reason (prefixed with its arm), or None while all run."""
    def alive() -> str | None:
        for name, _, emulator in arms:
            reason = emulator.exit_reason() if emulator is not None else None
            if reason is not None:
                return f"arm {name}: {reason}"
        return None
    return alive
