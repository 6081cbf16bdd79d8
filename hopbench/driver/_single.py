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

import json
import time
import traceback
from collections import deque
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

import trio

from ..measure._burst import FlaggedLog, join_bursts, not_rejudged
from .._errors import HopbenchError, ResultsError, RunAborted
from ._common import (CHECKPOINT_S, RunOutcome, base_meta, fd_limit_for, default_out_dir, emulator_warnings, hold_signals, mark_started,
                      progress_line)
from ._judge import judge
from ._summary import Part, RunEnd
from ..measure._counters import RunCounters
from ..measure._outcomes import output_tokens
from ..config._records import Profile
from ..measure._recorder import ALL, IntervalSnapshot, Recorder, Snapshot
from ._results import ResultsWriter, write_error
from ..engine._open_loop import Tuning
from ..engine._runner import LoadRunner, RunStats

__all__ = ["Interrupted", "arms_alive", "finish_run", "rejudge_bursts", "run_profile", "start_arms", "timeline_line"]



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
        ProfileError: a closed loop that even the hard file-descriptor limit cannot
            hold (the soft limit is raised for the load first; ``fd_limit_for``).
    """
    fd_limit_for(profile)
    run = _OneRun(profile, out_dir if out_dir is not None else default_out_dir(profile), on_line, progress)
    made = False  # the folder exists (ResultsWriter made it)
    # The try opens before the folder is made: a signal that lands just as the hold ends (the
    # CLI's handler back in place) is caught below like any signal of the start-up. From the
    # moment the folder exists, whatever happens leaves a summary.json.
    try:
        with hold_signals(announce=False) as early:
            run.writer = ResultsWriter(run.out)
            made = True
        if early:  # a signal while the folder was made
            raise Interrupted(early[0])
        run.open_files()
        with ExitStack() as stack:
            run.start(stack, base_url, tuning)
            run.run_load()
    except Interrupted as exc:  # a signal before the load started (e.g. while the emulator starts)
        if not made:  # as the hold began, before the folder was made: no folder, nothing owed
            raise
        run.meta["interrupted_by"] = exc.signal_name
    finally:
        if made:  # else the folder was never made (ResultsError, or a signal first)
            with hold_signals() as late:  # a further Ctrl-C must not cut the final writes
                summary = run.write_final()
    if run.write_failed:
        raise RunAborted(f"the run stopped: its results could not be written: {run.write_failed[0]} "
                         f"(what was written is in {run.out})")
    complete = summary["complete"]
    return RunOutcome(summary, run.out, complete, run.crashed, tuple(late))


class _OneRun:
    """One process's run, step by step: :func:`run_profile` calls :meth:`open_files`,
    :meth:`start` (targets, scrapers, the runner), :meth:`run_load` and, whatever
    happened, :meth:`write_final` (the joins with the origins' records, the judge).

    Attributes:
        profile, out: the profile and its results folder.
        rec, warm: the measured and warm-up recorders.
        meta: the pre-run metadata, completed as the run goes (notes, crash, interrupted_by).
        writer: the results folder's writer (set by :func:`run_profile`, which makes it).
        files: timeline.jsonl and streams.jsonl, open during the load.
        pending: streams.jsonl lines: the loop appends, the publishing thread drains.
        runner, stats: the load runner and its figures (None until they exist).
        upstream: the gateway's upstream (hopbench.driver._gateway.UpstreamHandle), else None.
        scrapers: the [[scrape]] threads (hopbench.observe._scrape), stopped with the stack.
        crashed: hopbench's own failure (traceback or reason), else None.
        write_failed: the ResultsError that stopped the load (results not writable), if any.
    """

    def __init__(self, profile: Profile, out: Path, on_line: Callable[[str], None] | None,
                 progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None) -> None:
        self.profile, self.out, self.on_line, self.progress = profile, out, on_line, progress
        scopes = profile.scopes  # the arms' names with [[arm]] tables
        self.rec, self.warm = Recorder(scopes), Recorder(scopes)
        self.meta = base_meta(profile)
        if profile.target.url is not None and profile.emulator:
            self.meta["notes"] = [f"the [emulator] table is not used: the target is {profile.target.url}"]
        for arm in profile.arms:
            if arm.emulator_unused:
                self.meta.setdefault("notes", []).append(
                    f"arm {arm.name}: its emulator table is not used: the arm's url is {arm.url}")
        if profile.load.mode == "trace" and profile.load.trace.zero_note:  # rows with 0 tokens, sent with 1
            self.meta.setdefault("notes", []).append(profile.load.trace.zero_note)
        self.writer: ResultsWriter | None = None
        self.files: dict[str, Any] = {}  # timeline, streams: opened inside run_profile's try
        self.pending: deque[dict[str, Any]] = deque()
        self.last_checkpoint = time.monotonic()
        self.runner: LoadRunner | None = None
        self.stats: RunStats | None = None
        self.upstream: Any = None
        self.scrapers: list[Any] = []
        self.crashed: str | None = None
        self.write_failed: list[ResultsError] = []

    def open_files(self) -> None:
        """Open timeline.jsonl and streams.jsonl (appended to as the load goes)."""
        self.files["timeline"] = open(self.out / "timeline.jsonl", "a", encoding="utf-8")
        self.files["streams"] = open(self.out / "streams.jsonl", "a", encoding="utf-8")

    def write_streams(self) -> None:
        """Write the streams.jsonl lines that are waiting."""
        f = self.files.get("streams")
        if f is None:
            return
        pending = self.pending
        while pending:
            f.write(json.dumps(pending.popleft(), separators=(",", ":")) + "\n")
        f.flush()

    def on_interval(self, iv: IntervalSnapshot, warm_iv: IntervalSnapshot, line: dict[str, Any]) -> None:
        """The runner's interval hook: the interval to intervals.hlog, timeline.jsonl and
        the streams that ended, progress, and a summary.json checkpoint every ``CHECKPOINT_S``.

        Raises:
            ResultsError: a file cannot be written (it stops the run).
        """
        writer, out, files = self.writer, self.out, self.files
        assert writer is not None
        writer.write_interval(warm_iv)
        writer.write_interval(iv)
        line = timeline_line(line, iv, warm_iv)
        for name, write in (("timeline.jsonl", lambda: (files["timeline"].write(json.dumps(line) + "\n"),
                                                        files["timeline"].flush())),
                            ("streams.jsonl", self.write_streams)):
            try:
                write()
            except OSError as exc:  # e.g. a full disk: stop the run, say which file and why
                raise ResultsError(write_error(out / name, exc)) from exc
        if self.progress is not None:
            self.progress(iv, line)  # LiveProgress sums the intervals: no re-encoding of totals
        if self.on_line is not None:
            self.on_line(progress_line(iv, line))
        if time.monotonic() - self.last_checkpoint >= CHECKPOINT_S:
            self.last_checkpoint = time.monotonic()
            writer.update(dict(self.meta, ended_at=None), self.rec.folded_snapshot(), complete=False)

    def start(self, stack: ExitStack, base_url: str | None, tuning: Tuning | None = None) -> None:
        """Start what the load needs, each closed by ``stack``: the arms' or the embedded
        emulator, the ``[upstream]`` emulator, the scrapers; then stamp the start and
        build the runner (:attr:`runner`).

        Raises:
            EmulatorStartError: an emulator did not start.
            ResultsError: the first summary.json cannot be written.
        """
        profile, out, meta, writer = self.profile, self.out, self.meta, self.writer
        assert writer is not None
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

            self.upstream = open_upstream(profile.upstream, stack, out, profile.path)
        upstream = self.upstream
        if profile.scrape:  # started (imports paid) before the load, scraping from its start
            from ..observe._scrape import Scraper

            self.scrapers.append(stack.enter_context(Scraper(
                profile.scrape, out, None, embedded_url=url if meta.get("ground_truth") else None)))
        mark_started(meta)
        writer.start(meta)
        for scraper in self.scrapers:
            scraper.begin(time.monotonic_ns())
        self.runner = runner = LoadRunner(
            profile, url, self.rec, self.warm, on_interval=self.on_interval,
            on_stream=self.pending.append if profile.run.stream_log or upstream else None,
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

    def run_load(self) -> None:
        """``trio.run`` the runner; a signal, a crash or unwritable results are noted in
        :attr:`meta`, :attr:`crashed` and :attr:`write_failed`, never raised.

        Raises:
            HopbenchError: hopbench's own error other than unwritable results.
        """
        assert self.runner is not None
        meta = self.meta
        try:
            self.stats = trio.run(self.runner.run)
        except KeyboardInterrupt as exc:
            meta["interrupted_by"] = getattr(exc, "signal_name", "SIGINT")
        except Exception as exc:
            lost = _first(exc, ResultsError)
            if lost is not None:  # results could not be written mid-run (e.g. a full disk)
                self.write_failed.append(lost)
                self.crashed = meta["crash"] = str(lost)
            elif isinstance(exc, HopbenchError):
                raise
            else:
                self.crashed = traceback.format_exc()
                meta["crash"] = _crash_reason(exc)

    def write_final(self) -> dict[str, Any]:
        """Close the line files, join the run with the origins' records (:meth:`join_records`),
        judge it and write the final summary.json (:func:`finish_run`).

        Returns:
            the summary as written.

        Raises:
            RunAborted: the final results could not be written.
        """
        out, meta, writer = self.out, self.meta, self.writer
        assert writer is not None
        try:
            self.write_streams()  # the streams that ended after the last interval
        except OSError as exc:
            if self.crashed is None:
                self.crashed = meta["crash"] = write_error(out / "streams.jsonl", exc)
        for f in self.files.values():
            try:
                f.close()
            except OSError:
                pass
        try:
            if "started_at_unix_s" not in meta:  # stopped (or failed) before the load started
                mark_started(meta)
                writer.start(meta)
            runner = self.runner
            stats = self.stats or (runner.stats if runner is not None else RunStats())
            self.join_records()
            return finish_run(self.profile, writer, meta, stats, self.rec.snapshot(),
                              self.warm.snapshot() if self.profile.run.warmup_ns else None, self.crashed)
        except ResultsError as exc:
            writer.close()
            raise RunAborted(f"the run's results were not fully written: {exc}") from exc

    def join_records(self) -> None:
        """After the load: join the client cancels and the flagged bursts with each origin's
        record, compute the gateway overhead, read the scrapers; notes go to ``meta``."""
        out, meta, rec, runner, upstream = self.out, self.meta, self.rec, self.runner, self.upstream
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
                    upstream, out / "streams.jsonl", runner.t0_mono_ns, self.profile.run.warmup_ns, rec)
            except Exception as exc:  # a bug here must not cost the run's results
                meta["gateway_overhead"] = {"upstream": upstream.source, "error": _crash_reason(exc)}
                notes = [f"gateway overhead could not be computed: {_crash_reason(exc)}"]
            meta.setdefault("notes", []).extend(notes)
        for scraper in self.scrapers:  # gateway metrics: counted, warned, never failing the run
            meta["scrape"] = scraper.summary()
            meta.setdefault("notes", []).extend(scraper.warnings())


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


def timeline_line(line: dict[str, Any], iv: IntervalSnapshot, warm_iv: IntervalSnapshot) -> dict[str, Any]:
    """One timeline.jsonl record: the runner's interval figures plus the counts."""
    def both(name: str) -> int:
        return iv.counter(ALL, name) + warm_iv.counter(ALL, name)

    return dict(line, completed=both("completed"), started=both("started"),
                output_tokens=output_tokens(both))


def finish_run(profile: Profile, writer: ResultsWriter, meta: dict[str, Any], stats: RunStats,
               total: Snapshot, warmup: Snapshot | None, crashed: str | None) -> dict[str, Any]:
    """Judge a single-process run (``hopbench.driver._judge.judge``) and write the final results files.

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
    from ..engine._saturation import HostUsage

    truth = (tuple(emulator_warnings(writer.path / meta["ground_truth"], HostUsage.from_json(stats.host)))
             if meta.get("ground_truth") else ())
    end = RunEnd(ended_at_unix_s=time.time(), crashed=crashed, interrupted_by=stats.interrupted_by,
                 intervals=stats.interval_count, emulator_warnings=truth)
    summary = judge(profile, [Part(profile, RunCounters.of(stats, total), total)], total, warmup, meta, end)
    return writer.write_final(summary.to_json(), total)


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
