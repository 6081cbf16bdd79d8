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
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Callable

import trio

from ..measure._burst import FlaggedLog, join_bursts, not_rejudged
from .._clock import NS_PER_MS, NS_PER_S
from .._errors import HopbenchError, ResultsError, RunAborted
from ._finish import (LOAD_HELD_FRACTION, SATURATION_CPU, SATURATION_LAG_NS, Part, RunCounters, RunEnd,
                      analyse, gc_figures, headline, host_figures, judge, outcome_warnings, slo_block)
from ..measure._outcomes import BROKEN, ERROR_RATE_WARN
from ..config._profile import Profile, sanitized
from ..measure._recorder import ALL, IntervalSnapshot, Recorder, Snapshot
from ._results import ResultsWriter, environment, write_error
from ..engine._open_loop import Tuning
from ..engine._runner import LoadRunner, RunStats

__all__ = ["Interrupted", "RunOutcome", "emulator_warnings", "rejudge_bursts", "run_profile", "analyse", "default_out_dir", "base_meta", "mark_started",
           "timeline_line", "finish_run", "progress_line", "outcome_warnings", "headline", "gc_figures", "host_figures",
           "SATURATION_LAG_NS", "SATURATION_CPU", "LOAD_HELD_FRACTION", "ERROR_RATE_WARN", "slo_block"]

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


def run_profile(profile: Profile, *, out_dir: Path | None = None,
                on_line: Callable[[str], None] | None = None,
                progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None = None,
                base_url: str | None = None, tuning: Tuning | None = None) -> RunOutcome:
    """Run ``profile`` and write its results folder.

    Args:
        profile: a validated profile.
        out_dir: results folder (default ``results/<name>-<UTC timestamp>``).
        on_line: receives plain progress lines (None: silent).
        progress: receives each interval's snapshot and its timeline record
            (e.g. ``LiveProgress.on_interval``).
        base_url: overrides the profile's target (tests).
        tuning: the open loop's knobs (``LoadRunner``'s; None: the defaults). A
            test seam: a profile never sets them.

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
    if profile.load.mode == "trace" and profile.load.trace.zero_note:  # rows with 0 tokens, sent with 1
        meta.setdefault("notes", []).append(profile.load.trace.zero_note)
    scrapers: list[Any] = []  # the [[scrape]] threads (hopbench.observe._scrape), stopped with the stack
    upstream: Any = None  # the gateway's upstream (hopbench.driver._gateway.UpstreamHandle)
    made = False  # the folder exists (ResultsWriter made it)
    # The try opens before the folder is made: a signal that lands just as the hold ends (the
    # CLI's handler back in place) is caught below like any signal of the start-up. From the
    # moment the folder exists, whatever happens leaves a summary.json.
    try:
        with hold_signals(announce=False) as early:
            writer = ResultsWriter(out)
            made = True
        if early:  # a signal while the folder was made
            raise Interrupted(early[0])
        files["timeline"] = open(out / "timeline.jsonl", "a", encoding="utf-8")
        files["streams"] = open(out / "streams.jsonl", "a", encoding="utf-8")
        with ExitStack() as stack:
            url = base_url or profile.target.url
            arms = start_arms(profile, stack, out, meta) if profile.arms else []
            if arms:
                url = arms[0][1]  # (the runner sends each request to its arm's URL)
            elif url is None:
                from ..emulator import EmbeddedEmulator

                emulator = stack.enter_context(EmbeddedEmulator(
                    profile.emulator_config, record_path=out / "ground_truth.jsonl"))
                url = emulator.base_url
                meta["ground_truth"] = "ground_truth.jsonl"
            if profile.upstream is not None:  # the emulator behind the gateway (docs/gateway-overhead.md)
                from ._gateway import open_upstream

                upstream = open_upstream(profile.upstream, stack, out, profile.path)
            if profile.scrape:  # started (imports paid) before the load, scraping from its start
                from ..observe._scrape import Scraper

                scrapers.append(stack.enter_context(Scraper(
                    profile.scrape, out, None, embedded_url=url if meta.get("ground_truth") else None)))
            mark_started(meta)
            writer.start(meta)
            for scraper in scrapers:
                scraper.begin(time.monotonic_ns())
            runner = LoadRunner(profile, url, rec, warm, on_interval=on_interval,
                                on_stream=on_stream if profile.run.stream_log or upstream else None,
                                arms=[(name, u) for name, u, _ in arms], tuning=tuning)
            # hopbench's own emulators on this machine: their CPU is not the neighbours' (_saturation)
            runner.emulator_pids = tuple(pid for pid in (
                emulator.pid if meta.get("ground_truth") else None,
                *(e.pid for _, _, e in arms if e is not None),
                upstream.pid if upstream is not None else None) if pid is not None)
            if meta.get("ground_truth"):  # the embedded emulator: notice its death at once
                runner.target_alive = emulator.exit_reason
            elif any(e is not None for _, _, e in arms):
                runner.target_alive = arms_alive(arms)
            elif upstream is not None and upstream.alive is not None:  # the emulator behind the gateway
                runner.target_alive = upstream.alive
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
        if not made:  # as the hold began, before the folder was made: no folder, nothing owed
            raise
        meta["interrupted_by"] = exc.signal_name
    finally:
        if made:  # else the folder was never made (ResultsError, or a signal first)
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
                        from ..workload._cancel import join_record  # the emulator has stopped: its record is whole

                        meta.setdefault("notes", []).extend(
                            join_record(rec, runner.cancels, out / meta["ground_truth"]))
                    for arm in meta.get("arms") or ():  # embedded arms: each its own record
                        if arm.get("ground_truth"):
                            from ..workload._cancel import join_record

                            cancels = [c for c in runner.cancels if c.scope == arm["name"]] if runner else []
                            notes = meta.setdefault("notes", [])
                            notes.extend(join_record(rec, cancels, out / arm["ground_truth"]))
                            notes.extend(f"arm {arm['name']}: {w}"
                                         for w in emulator_warnings(out / arm["ground_truth"]))
                    if upstream is not None and runner is not None and runner.cancels:
                        from ._gateway import join_upstream_cancels  # cancels behind a gateway: its upstream's record

                        meta.setdefault("notes", []).extend(join_upstream_cancels(upstream, runner.cancels, rec))
                    if runner is not None:  # the flagged bursts, against what the origin did
                        meta.setdefault("notes", []).extend(rejudge_bursts(rec, runner.flagged, out, meta, upstream))
                    if upstream is not None and runner is not None and runner.t0_mono_ns:
                        from ._gateway import gateway_overhead

                        try:
                            meta["gateway_overhead"], notes = gateway_overhead(
                                upstream, out / "streams.jsonl", runner.t0_mono_ns, profile.run.warmup_ns, rec)
                        except Exception as exc:  # a bug here must not cost the run's results
                            meta["gateway_overhead"] = {"upstream": upstream.source, "error": _crash_reason(exc)}
                            notes = [f"gateway overhead could not be computed: {_crash_reason(exc)}"]
                        meta.setdefault("notes", []).extend(notes)
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


def rejudge_bursts(rec: Recorder, flagged: FlaggedLog, out: Path, meta: Mapping[str, Any],
                   upstream: Any = None) -> list[str]:
    """Re-judge a one-process run's flagged bursts against each origin's record (hopbench.measure._burst).

    Which record: the embedded emulator's (``meta["ground_truth"]``), the ``[upstream]``
    emulator's behind a gateway (only the lines this run added), or, with ``[[arm]]``
    tables, each embedded arm's own ``ground_truth.<arm>.jsonl`` for that arm's streams.
    An arm whose target is a URL has no record: beside an embedded arm (whose flagged
    streams are re-judged) its flagged streams are named in a note, so that the arms'
    counters are not read alike. A URL target without ``[upstream]`` (or URL arms
    only) has no record at all, by design: nothing is noted there (the client's flag
    and its warning say all a client can know).

    Args:
        rec: the run's measured recorder: receives the verdict counters per scope.
        flagged: the runner's ``FlaggedLog`` (the measured flagged streams, in memory:
            ``run.stream_log`` plays no part).
        out: the results folder; meta: the run's metadata (``ground_truth``, ``arms``).
        upstream: the ``[upstream]`` handle (hopbench.driver._gateway.UpstreamHandle), else None.

    Returns:
        notes for summary.json's warnings (``join_bursts``'s, and per arm prefixed
        ``arm NAME: ``), possibly none. Never raises on a missing or cut record.
    """
    from ..workload._cancel import read_record

    if not len(flagged):
        return []
    if meta.get("ground_truth"):  # the embedded emulator: stopped, its record is whole
        path = out / meta["ground_truth"]
        return join_bursts(rec, flagged, partial(read_record, path), proxy_possible=False, record=path.name)
    if upstream is not None:
        from ._gateway import _complete_lines

        return join_bursts(rec, flagged, lambda: _complete_lines(upstream.ground_truth, upstream.offset)[0],
                           proxy_possible=True, record=upstream.source)
    arms = meta.get("arms") or ()
    if not any(arm.get("ground_truth") for arm in arms):
        return []  # no record at all (URL arms only): as a URL target, nothing to note
    notes: list[str] = []
    for arm in arms:  # each arm against its own emulator's record
        mine = flagged.only(arm["name"])
        if not len(mine):
            continue
        if arm.get("ground_truth"):
            path = out / arm["ground_truth"]
            got = join_bursts(rec, mine, partial(read_record, path), proxy_possible=False, record=path.name)
        else:
            got = [not_rejudged(len(mine), f"its target is a URL ({arm['target']}), whose origin's record "
                                           "hopbench does not hold")]
        notes += [f"arm {arm['name']}: {n}" for n in got]
    return notes


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
    meta["started_at"] = _iso(now)
    meta["started_at_unix_s"] = now


def timeline_line(line: dict[str, Any], iv: IntervalSnapshot, warm_iv: IntervalSnapshot) -> dict[str, Any]:
    """One timeline.jsonl record: the runner's interval figures plus the counts."""
    def both(name: str) -> int:
        return iv.counter(ALL, name) + warm_iv.counter(ALL, name)

    return dict(line, completed=both("completed"), started=both("started"),
                output_tokens=both("tokens.output.completed") + both("tokens.output.broken"))


def finish_run(profile: Profile, writer: ResultsWriter, meta: dict[str, Any], stats: RunStats,
               total: Snapshot, warmup: Snapshot | None, crashed: str | None) -> dict[str, Any]:
    """Judge a single-process run (``hopbench.driver._finish.judge``) and write the final results files.

    Args:
        profile: the profile run; writer: its results folder; meta: the pre-run metadata.
        stats: the runner's figures; total, warmup: its measured and warm-up snapshots
            (warmup None when the profile has no warm-up).
        crashed: hopbench's own failure (traceback), else None.

    Returns:
        the summary dict as written to summary.json.

    Raises:
        ResultsError: a file cannot be written.
    """
    truth = tuple(emulator_warnings(writer.path / meta["ground_truth"])) if meta.get("ground_truth") else ()
    end = RunEnd(ended_at_unix_s=time.time(), crashed=crashed, interrupted_by=stats.interrupted_by,
                 intervals=stats.interval_count, emulator_warnings=truth)
    summary = judge(profile, [Part(profile, RunCounters.of(stats, total), total)], total, warmup, meta, end)
    return writer.write_final(summary.to_json(), total)


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
    """Start the embedded emulators of a profile's A/B arms (hopbench.config._arm_spec).

    Each embedded arm gets its own emulator process and ground-truth file
    ``ground_truth.<arm>.jsonl``; arms with a URL are used as they are.
    ``meta["arms"]`` lists them (name, target, ground_truth file or None).

    Returns:
        (name, base URL, the EmbeddedEmulator or None) per arm, in profile order.

    Raises:
        EmulatorStartError: an arm's emulator did not start.
    """
    from ..emulator import EmbeddedEmulator

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
