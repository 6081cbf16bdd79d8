"""Scale out: one run over several worker processes, merged exactly (the process plumbing).

Role: ``run_profile_workers`` is ``run_profile`` for ``run.workers > 1``. The
driver (this process) starts the embedded emulator once, splits the load
(``hopbench.driver._share.split_load``), starts one worker process per share
(multiprocessing, "spawn" context), releases them together at a common start
time, hands what they ship to the merger (``hopbench.driver._merge.Merger``)
and writes one results folder. The same worker body (:func:`run_worker`) and the
same engine-independent shell (``_drive_run``) serve the Ray engine
(``hopbench.driver._ray``).

Invariants:

* Workers ship recorder snapshots, never raw samples and never percentiles
  (messages: :func:`run_worker`); the merge is exact (``hopbench.driver._merge``).
* Interval stamps are relative to each worker's own start, which is the common
  start (plus the skew it reports, ns).
* A worker that dies is reported (summary ``warnings`` and ``worker_detail``),
  the others finish, the run is ``complete: false``; what the dead worker
  shipped before it died is kept (its intervals merged into the total).
* SIGINT/SIGTERM on the driver is forwarded once per signal to the workers
  (each in its own process group, so a terminal's Ctrl-C reaches them only
  through the driver): they stop new load and drain with ``run.grace_s``; a
  second signal cancels in-flight streams. Everything is still written,
  ``complete: false``.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import socket
import threading
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import trio

from .._clock import NS_PER_S
from .._errors import HopbenchError, ResultsError
from .._exit import STOP_TARGET_LOST
from ..config._records import Profile
from ..measure._recorder import IntervalSnapshot, Recorder
from ._results import ResultsWriter, write_error
from ._common import RunOutcome, build_meta, fd_limit_for, default_out_dir, emulator_warnings, hold_signals, mark_started
from ._merge import Merger
from ._share import WorkerShare, split_load
from ..engine._runner import LoadRunner
from ..engine._saturation import emulator_here

__all__ = [
    "run_worker",
    "run_profile_workers",
    "START_DELAY_S",
]

START_DELAY_S = 0.2
"""The common start is this long after the last worker reported ready (s):
enough for the "go" message to reach every worker before it is due."""

_POLL_S = 0.1
_READY_TIMEOUT_S = 60.0
_KILL_AFTER_S = 10.0  # after the run should have ended (duration + grace)


# -- the worker body (runs in a worker process or a Ray task) -----------------

def run_worker(profile: Profile, base_url: str, share: WorkerShare,
               send: Callable[[dict[str, Any]], None],
               wait_go: Callable[[], float | None],
               poll_stop: Callable[[], str | None] = lambda: None,
               install_signals: bool = True) -> None:
    """One worker: build its runner, wait for the common start, run, ship.

    Messages (JSON-able dicts, each with "kind" and "worker"):
    ``ready`` (host, pid); ``interval`` (iv, warm: ``IntervalSnapshot.to_json()``,
    line: the runner's timeline record) at each interval end; ``streams`` (lines:
    the streams.jsonl lines of the streams that ended since the last, before each
    ``interval`` and before ``done``; only when ``share.streams_part`` is None and
    ``run.stream_log`` is on: with a part the worker appends them to that file
    itself, a JSON line each, in the order they ended); ``done`` (total,
    warmup: ``Snapshot.to_json()``; counters: ``RunCounters.to_json()``; start_skew_ns;
    cancels: the client cancels as [request id, scope, CLOCK_MONOTONIC ns, events];
    bursts: the measured flagged bursts, ``_burst.FlaggedLog.to_json()``) at the end;
    the driver joins the last two with the embedded emulator's record. Interval
    stamps are relative to this worker's own start, which is the common start (plus
    the skew, reported).

    Args:
        profile: the whole profile (the share says what part of it to run).
        base_url: the target's URL.
        share: this worker's share.
        send: delivers one message to the driver (must not raise on success).
        wait_go: blocks until the driver's start; returns the common start as
            Unix time in s, or None when the run was called off.
        poll_stop: returns a stop reason (e.g. "SIGTERM") once the driver wants
            the load stopped; called at each interval end.
        install_signals: route SIGINT/SIGTERM to a graceful stop (worker
            processes; not inside Ray, which owns its workers' signals).
    """
    k = share.index
    scopes = [s.name for s in profile.scenarios]
    rec, warm = Recorder(scopes), Recorder(scopes)
    stop_reason: list[str | None] = [None]
    runner: LoadRunner | None = None

    def on_signal(signum: int, frame: object) -> None:
        stop_reason[0] = signal.Signals(signum).name
        if runner is not None and runner.stats.interrupted_by is not None:
            # a second signal while draining: no grace (as the runner does)
            raise KeyboardInterrupt

    if install_signals and threading.current_thread() is threading.main_thread():
        # Until the runner's own trio signal receiver is up (and between its
        # intervals, should it be down), a signal only records the wish to stop.
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    lines: deque[dict[str, Any]] = deque()  # streams.jsonl lines: the runner appends, ship_streams takes
    part = _open_part(share.streams_part) if profile.run.stream_log else None

    def ship_streams() -> None:
        # the local engine: this worker's own part file; a Ray task: to the driver, in order
        if not lines:
            return
        batch = [lines.popleft() for _ in range(len(lines))]
        if part is None:
            send({"kind": "streams", "worker": k, "lines": batch})
            return
        try:
            part.write("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in batch))
            part.flush()
        except OSError as exc:  # e.g. a full disk: this worker stops, the driver says why
            raise ResultsError(write_error(Path(part.name), exc)) from exc

    def on_interval(iv: IntervalSnapshot, warm_iv: IntervalSnapshot, line: dict[str, Any]) -> None:
        ship_streams()
        send({"kind": "interval", "worker": k, "iv": iv.to_json(), "warm": warm_iv.to_json(),
              "line": line})
        reason = stop_reason[0] or poll_stop()
        if reason is not None and runner is not None:
            runner.request_stop(reason)

    runner = LoadRunner(profile, base_url, rec, warm, on_interval=on_interval, load=share.load,
                        request_budget=share.request_budget, seed_offset=k,
                        arrival_offset_ns=share.arrival_offset_ns,
                        on_stream=lines.append if profile.run.stream_log else None)
    runner.notice = lambda text: None  # the driver announces what a signal does, once
    if share.emulator_boot_id is None:  # the local engine: the driver's machine
        runner.emulator_pids, emulator_note = share.emulator_pids, None
    else:  # a Ray task: measure the driver's emulator only on its machine, else say why not
        runner.emulator_pids, emulator_note = emulator_here(
            share.emulator_pids, share.emulator_starts, share.emulator_boot_id)
    send({"kind": "ready", "worker": k, "host": socket.gethostname(), "pid": os.getpid()})
    go_at = wait_go()
    skew_ns = 0
    if go_at is not None:
        start_at = go_at
        while (left := start_at - time.time()) > 0 and stop_reason[0] is None:
            time.sleep(min(left, 0.05))
        skew_ns = int((time.time() - start_at) * NS_PER_S)
        go_at = None if stop_reason[0] is not None else go_at
    if go_at is not None:
        trio.run(runner.run)
    else:
        runner.stats.interrupted_by = stop_reason[0] or "cancelled before start"
    try:
        ship_streams()  # the streams that ended after the last interval, before "done"
    finally:
        if part is not None:
            part.close()
    counters = runner.counters()
    if emulator_note is not None and counters.host is not None:  # never silently absent
        counters = dataclasses.replace(counters, host={**counters.host, "emulator_note": emulator_note})
    send({"kind": "done", "worker": k, "total": rec.snapshot().to_json(),
          "warmup": warm.snapshot().to_json(), "counters": counters.to_json(),
          "start_skew_ns": skew_ns,
          # client cancels, joined with the embedded emulator's record by the driver (hopbench.workload._cancel)
          "cancels": [[c.request_id, c.scope, c.closed_mono_ns, c.events_read] for c in runner.cancels],
          # flagged bursts, re-judged by the driver against the same record (hopbench.measure._burst)
          "bursts": runner.flagged.to_json()})


def _open_part(path: str | None) -> IO[str] | None:
    """This worker's streams.jsonl part, opened to append (None: ship the lines instead).

    Raises:
        ResultsError: it cannot be opened (naming the file and why).
    """
    if path is None:
        return None
    try:
        return open(path, "a", encoding="utf-8")
    except OSError as exc:
        raise ResultsError(write_error(Path(path), exc)) from exc


# -- the local engine: worker processes ----------------------------------------

def _process_main(profile: Profile, base_url: str, share: WorkerShare, conn: Any) -> None:
    """Entry point of a worker process (spawned; module-level so it pickles)."""
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the driver only; it forwards
    stop: list[str | None] = [None]

    def send(msg: dict[str, Any]) -> None:
        try:
            conn.send(msg)
        except (BrokenPipeError, OSError):
            stop[0] = stop[0] or "driver gone"

    def wait_go() -> float | None:
        msg = conn.recv()
        return float(msg[1]) if msg[0] == "go" else None

    def poll_stop() -> str | None:
        return stop[0]

    try:
        run_worker(profile, base_url, share, send, wait_go, poll_stop, install_signals=True)
    except BaseException:
        send({"kind": "error", "worker": share.index, "error": traceback.format_exc()})
        raise
    finally:
        conn.close()


WorkerTarget = Callable[[Profile, str, WorkerShare, Any], None]


def run_profile_workers(profile: Profile, *, out_dir: Path | None = None,
                        on_line: Callable[[str], None] | None = None,
                        progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None = None,
                        base_url: str | None = None) -> RunOutcome:
    """``run_profile`` over ``profile.run.workers`` local worker processes.

    Same contract as :func:`hopbench.driver._single.run_profile`: validated profile in,
    results folder out, written also when interrupted (``complete: false``).
    summary.json gains ``engine`` ("local"), ``hosts``, and ``worker_detail``
    (one object per worker: index, host, pid, state, error, share, started,
    completed, saturated, cpu_mean, cpu_max, loop_lag_p99_ms,
    schedule_lag_p99_ms, peak_in_flight, start_skew_ms, interrupted_by).

    Raises:
        ResultsError: the results folder cannot be written (before any load).
        ProfileError: a closed loop whose per-worker share even the hard
            file-descriptor limit cannot hold (``fd_limit_for``; the workers inherit it).
    """
    fd_limit_for(profile)
    return _run_local(profile, out_dir=out_dir, on_line=on_line, progress=progress,
                      base_url=base_url, target=_process_main)


def _run_local(profile: Profile, *, out_dir: Path | None, on_line: Callable[[str], None] | None,
               progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None,
               base_url: str | None, target: WorkerTarget) -> RunOutcome:
    shares = split_load(profile, profile.run.workers)

    def drive(merger: Merger, url: str, interrupted: list[str | None]) -> None:
        ctx = multiprocessing.get_context("spawn")
        procs: dict[int, Any] = {}
        conns: dict[int, Any] = {}
        for s in shares:
            parent, child = ctx.Pipe(duplex=True)
            # one host: the pid is valid here, and the worker writes its own streams.jsonl part
            s = dataclasses.replace(s, emulator_pids=merger.emulator_pids,
                                    streams_part=str(merger.stream_part(s.index)) if profile.run.stream_log else None)
            p = ctx.Process(target=target, args=(profile, url, s, child),
                            name=f"hopbench-worker-{s.index}", daemon=True)
            p.start()
            child.close()
            procs[s.index], conns[s.index] = p, parent
        forwarded = [0]

        def forward() -> None:
            # called from the poll loop, once per signal received by the driver
            sig = signal.SIGINT if interrupted[0] == "SIGINT" else signal.SIGTERM
            for i, p in procs.items():
                if p.is_alive() and i in merger.running:
                    try:
                        os.kill(p.pid, sig)
                    except ProcessLookupError:
                        pass

        try:
            _pump_local(merger, procs, conns, interrupted, forwarded, forward, profile)
        finally:
            for c in conns.values():
                c.close()
            for p in procs.values():
                p.join(timeout=5.0)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5.0)

    return _drive_run(profile, shares, "local", out_dir=out_dir, on_line=on_line,
                      progress=progress, base_url=base_url, drive=drive)


def _pump_local(merger: Merger, procs: dict[int, Any], conns: dict[int, Any],
                interrupted: list[str | None], forwarded: list[int],
                forward: Callable[[], None], profile: Profile) -> None:
    from multiprocessing.connection import wait

    open_conns = dict(conns)
    # workers whose pipe has closed: each is reaped as soon as it exits, not at the run's end
    # (a worker that ended first was left a zombie while the others ran)
    exiting: dict[int, Any] = {}
    go_sent = False
    ready_deadline = time.monotonic() + _READY_TIMEOUT_S
    run_deadline: float | None = None
    signals_seen = [0]

    while open_conns:
        if interrupted[1:] and len(interrupted) - 1 > signals_seen[0]:  # a new signal
            signals_seen[0] = len(interrupted) - 1
            if go_sent:
                forward()
        if not go_sent:
            ready = all(merger.workers[i].state != "starting" for i in open_conns)
            if ready or time.monotonic() > ready_deadline or interrupted[0] is not None:
                go_at = time.time() + START_DELAY_S
                msg = ("go", go_at) if interrupted[0] is None else ("stop",)
                for i, c in open_conns.items():
                    try:
                        c.send(msg)
                    except OSError:
                        pass
                go_sent = True
                if interrupted[0] is None:
                    merger.load_window(go_at)
                run_s = (profile.run.duration_ns or 0) / NS_PER_S
                # a request budget has no planned end: no kill deadline then
                run_deadline = (time.monotonic() + START_DELAY_S + run_s + profile.run.grace_ns / NS_PER_S
                                + _KILL_AFTER_S) if profile.run.duration_ns and profile.run.requests is None else None
        ready_list = wait(list(open_conns.values()) + [p.sentinel for i, p in procs.items()
                                                     if i in open_conns or i in exiting], timeout=_POLL_S)
        for i, c in list(open_conns.items()):
            if c in ready_list and not _drain(c, i, merger):
                del open_conns[i]
                exiting[i] = procs[i]
                _lost_if_unfinished(merger, i, procs[i])
                continue
            if i in open_conns and not procs[i].is_alive():
                _drain(c, i, merger)  # what the pipe still holds, then call it
                del open_conns[i]
                _lost_if_unfinished(merger, i, procs[i])
        for i, p in list(exiting.items()):
            if not p.is_alive():  # is_alive() polls waitpid(WNOHANG): an exited worker is reaped here
                del exiting[i]
        if run_deadline is not None and time.monotonic() > run_deadline:
            for i in list(open_conns):
                procs[i].kill()
                merger.lost(i, f"killed: still running {_KILL_AFTER_S:g} s after the planned end")
                del open_conns[i]


def _drain(conn: Any, index: int, merger: Merger) -> bool:
    """Hand every message waiting on a worker's pipe to the merger.

    Returns:
        False when the pipe is closed or broken (the worker is gone).
    """
    try:
        while conn.poll():
            msg = conn.recv()
            if msg.get("kind") == "error":
                merger.lost(index, msg.get("error", ""))
            else:
                merger.handle(msg)
    except (EOFError, OSError):
        return False
    return True


def _lost_if_unfinished(merger: Merger, i: int, proc: Any) -> None:
    if merger.workers[i].state in ("done", "crashed"):
        return
    proc.join(timeout=1.0)
    code = proc.exitcode
    why = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
           else f"exited with status {code}")
    merger.lost(i, f"worker process {proc.pid} {why} before reporting its end")


def _watch_emulator(emulator: Any, interrupted: list[str | None], watching: threading.Event,
                    t0_s: float) -> None:
    """Stop the workers as soon as the embedded emulator's process exits: the
    stop goes through ``interrupted`` as a signal would (workers get SIGTERM
    and the run records "target lost: ..."). Polls every 50 ms."""
    while watching.is_set():
        reason = emulator.exit_reason()
        if reason is not None:
            if watching.is_set() and interrupted[0] is None:
                interrupted[0] = f"{STOP_TARGET_LOST}: {reason} {time.monotonic() - t0_s:.1f} s into the run"
                interrupted.append(interrupted[0])
                print(f"hopbench: {interrupted[0]}; stopping the run", file=sys.stderr, flush=True)
            return
        time.sleep(0.05)


class _StoppedEarly(Exception):
    """A signal arrived while the results folder was made: no worker starts."""


def _drive_run(profile: Profile, shares: list[WorkerShare], engine: str, *,
               out_dir: Path | None, on_line: Callable[[str], None] | None,
               progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None,
               base_url: str | None,
               drive: Callable[[Merger, str, list[str | None]], None]) -> RunOutcome:
    """The engine-independent shell: results folder, emulator, signals, summary.

    ``drive(merger, url, interrupted)`` starts the workers and feeds ``merger``
    until they are all finished or lost; ``interrupted[0]`` holds the first
    signal's name, and one more entry is appended per signal received.
    """
    out = out_dir if out_dir is not None else default_out_dir(profile)
    interrupted: list[str | None] = [None]

    def on_signal(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if interrupted[0] is None:
            interrupted[0] = name
        interrupted.append(name)
        n = len(interrupted) - 1
        grace_s = profile.run.grace_ns / NS_PER_S
        print("hopbench: " + (f"{name}: stopping: the workers send no new streams; those in flight get "
                              f"{grace_s:g} s to finish ({name} again cancels them now)" if n == 1 else
                              f"{name} again: the workers cancel the streams in flight; then writing results"
                              if n == 2 else f"{name}: already stopping; writing results"),
              file=sys.stderr, flush=True)

    old: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    # the folder, then the try that owes it a summary: the hold hands over to on_signal with no
    # moment where the CLI's handler (raising Interrupted outside that try) is back in place
    with hold_signals(announce=False, then=on_signal if old else None) as early:
        writer = ResultsWriter(out)
        meta = build_meta(profile, engine, len(shares))
        timeline = open(out / "timeline.jsonl", "a", encoding="utf-8")
        merger = Merger(profile, shares, writer, timeline, meta, progress=progress, on_line=on_line)
    if early:  # held while the folder was made: first in the list, before any on_signal
        later = interrupted[1:]
        interrupted[:] = [early[0], *early, *later]
    emulator = None
    scraper: Any = None
    crashed: str | None = None
    watching = threading.Event()  # cleared when the run ends: the emulator may then stop
    watching.set()
    try:
        if early:  # a signal while the folder was made: no worker starts
            raise _StoppedEarly
        url = base_url or profile.target.url
        if url is None:
            from ..emulator import EmbeddedEmulator

            emulator = EmbeddedEmulator(profile.emulator_config, record_path=out / "ground_truth.jsonl")
            url = emulator.__enter__().base_url
            meta["ground_truth"] = "ground_truth.jsonl"
            merger.emulator_pids = () if emulator.pid is None else (emulator.pid,)
            threading.Thread(target=_watch_emulator, name="hopbench-emulator-watch", daemon=True,
                             args=(emulator, interrupted, watching, time.monotonic())).start()
        if profile.scrape:  # [[scrape]]: the driver scrapes (hopbench.observe._scrape)
            from ..observe._scrape import Scraper

            scraper = Scraper(profile.scrape, out, None, embedded_url=url if emulator is not None else None)
            scraper.start()
        mark_started(meta)
        writer.start(meta)
        if scraper is not None:
            scraper.begin(time.monotonic_ns())
        drive(merger, url, interrupted)
    except _StoppedEarly:
        pass
    except HopbenchError:
        raise
    except Exception:
        crashed = traceback.format_exc()
        meta["crash"] = crashed.strip().splitlines()[-1]
    finally:
        watching.clear()
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if scraper is not None:
            scraper.stop()
            meta["scrape"] = scraper.summary()
            meta.setdefault("notes", []).extend(scraper.warnings())
        if emulator is not None:
            emulator.__exit__(None, None, None)  # its record is whole now
            meta.setdefault("notes", []).extend(merger.join_cancels(out / meta["ground_truth"]))
            meta.setdefault("notes", []).extend(merger.join_bursts(out / meta["ground_truth"]))
        if interrupted[0] is not None:
            meta["interrupted_by"] = interrupted[0]
        with hold_signals() as late:  # a further Ctrl-C must not cut the final writes
            try:
                truth = (tuple(emulator_warnings(out / meta["ground_truth"], merger.driver_host()))
                         if meta.get("ground_truth") else ())
                summary, complete = merger.finish(crashed, engine, truth)
            finally:
                timeline.close()
    return RunOutcome(summary, out, complete, crashed, tuple(late))
