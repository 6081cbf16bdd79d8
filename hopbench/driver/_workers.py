"""Scale out: one run over several worker processes, merged exactly.

Role: ``run_profile_workers`` is ``run_profile`` for ``run.workers > 1``. The
driver (this process) starts the embedded emulator once, splits the load
(:func:`split_load`), starts one worker process per share (multiprocessing,
"spawn" context), releases them together at a common start time, merges what
they ship and writes one results folder. The same worker body
(:func:`run_worker`) and the same merging (:class:`Merger`) serve the Ray
engine (``hopbench.driver._ray``).

Invariants:

* Workers ship recorder snapshots (hdrh-encoded histograms and counters, per
  interval and in total), never raw samples and never percentiles; the driver
  merges them with hdrh's exact ``add``, so the merged summary is what one
  recorder fed every sample would hold (tested).
* Interval ``k`` of every worker covers ``[k, k+1) * run.interval_ns`` from
  the common start; the merged interval ``k`` is written (intervals.hlog,
  timeline.jsonl, progress) once every worker still running has shipped an
  interval ``>= k``, in index order, so the log is in time order.
* Load split: concurrency, ``max_in_flight`` and ``run.requests`` are split in
  shares that differ by at most 1 and sum to the profile's; workers whose share
  would be 0 are not started. A rate R is split R/W per worker: Poisson
  arrivals with independent seeds (a superposition of independent Poisson
  processes of rates R/W is a Poisson process of rate R), constant arrivals
  phase-shifted by k/R so the merged schedule is evenly spaced at 1/R.
* The machine is sampled once, by the driver, over the load window (the common
  start to the last worker's end: :meth:`Merger.load_window`); each worker's own
  host figures count the other workers on its host and, on the driver's host,
  the driver as the run's own CPU (``siblings_cpu_ns``), never as neighbours
  (hopbench.engine._saturation).
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

import trio

from ..measure._burst import FlaggedLog, join_bursts, not_rejudged
from .._clock import NS_PER_MS, NS_PER_S
from .._errors import HopbenchError
from ..measure._hdr import Histogram
from ..measure._inflight import PHASES
from ..config._records import LoadSpec, Profile
from ..measure._recorder import ALL, IntervalSnapshot, Recorder, ScopeSnapshot, Snapshot
from ._results import ResultsWriter
from ._finish import Part, RunCounters, RunEnd, WorkerInfo, judge
from ._single import RunOutcome, base_meta, default_out_dir, emulator_warnings, hold_signals, mark_started, progress_line
from ..engine._runner import LoadRunner, RunStats
from ..engine._saturation import (HostSample, HostUsage, emulator_here, host_usage, parse_pid_stat, read_boot_id,
                          run_host, sample_host, with_siblings)

__all__ = [
    "WorkerShare",
    "split_load",
    "run_worker",
    "Merger",
    "run_profile_workers",
    "START_DELAY_S",
]

START_DELAY_S = 0.2
"""The common start is this long after the last worker reported ready (s):
enough for the "go" message to reach every worker before it is due."""

_CHECKPOINT_S = 5.0
_POLL_S = 0.1
_READY_TIMEOUT_S = 60.0
_KILL_AFTER_S = 10.0  # after the run should have ended (duration + grace)


# -- the load split (pure) ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WorkerShare:
    """What one worker generates.

    Attributes:
        index: worker index 0..W-1; also its ``seed_offset`` (distinct random
            choices and request ids ``<index>-<n>``).
        load: its share of ``[load]`` (concurrency / rate / max_in_flight).
        request_budget: its share of ``run.requests`` (None: no request limit).
        arrival_offset_ns: open loop, constant arrivals: the phase shift of
            this worker's schedule (k / R), so that the merged schedule stays
            evenly spaced; 0 otherwise. All workers start together.
        emulator_pids: the embedded emulator the driver started on its
            machine, whose CPU the worker keeps apart from the neighbours'
            (hopbench.engine._saturation); () without one.
        emulator_starts, emulator_boot_id: how a worker that may run on
            another machine (a Ray task) tells whether ``emulator_pids`` are
            its machine's processes (``_saturation.emulator_here``): their
            start times (clock ticks since boot) and the driver's boot id.
            ``emulator_boot_id`` None: the pids are trusted as they are (the
            local engine: one machine by construction).
    """

    index: int
    load: LoadSpec
    request_budget: int | None
    arrival_offset_ns: int
    emulator_pids: tuple[int, ...] = ()
    emulator_starts: tuple[int, ...] = ()
    emulator_boot_id: str | None = None


def _split_int(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` integers differing by at most 1, larger first."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def split_load(profile: Profile, workers: int) -> list[WorkerShare]:
    """Split the profile's load over at most ``workers`` workers.

    Args:
        profile: the validated profile.
        workers: the number of workers asked for (>= 1).

    Returns:
        One WorkerShare per worker that gets a non-zero share, indices 0..n-1
        (n <= workers: a closed loop of 3 users runs on at most 3 workers, a
        budget of 2 requests on at most 2).

    Raises:
        HopbenchError: ``workers`` < 1.
    """
    if workers < 1:
        raise HopbenchError(f"workers: expected a positive integer, got {workers}")
    load = profile.load
    n = workers
    if load.mode == "concurrency":
        n = min(n, load.concurrency)
    else:
        n = min(n, load.max_in_flight)
    if profile.run.requests is not None:
        n = min(n, profile.run.requests)
    n = max(n, 1)
    budgets: list[int | None] = (
        list(_split_int(profile.run.requests, n)) if profile.run.requests is not None else [None] * n)
    shares = []
    if load.mode == "concurrency":
        for i, c in enumerate(_split_int(load.concurrency, n)):
            shares.append(WorkerShare(i, dataclasses.replace(load, concurrency=c, max_in_flight=c),
                                      budgets[i], 0))
    else:
        rate = load.rate_rps / n
        gap_ns = NS_PER_S / load.rate_rps
        for i, m in enumerate(_split_int(load.max_in_flight, n)):
            delay = int(round(i * gap_ns)) if load.arrival == "constant" and load.mode == "rate" else 0
            # a trace: every n-th entry, at its own time (hopbench.workload._trace.TraceSpec.arrivals)
            shares.append(WorkerShare(i, dataclasses.replace(load, rate_rps=rate, concurrency=m,
                                                             max_in_flight=m, trace_part=(i, n)),
                                      budgets[i], delay))
    return shares


def share_profile(profile: Profile, share: WorkerShare) -> Profile:
    """The profile as one worker sees it (its load and request budget)."""
    return dataclasses.replace(profile, load=share.load,
                               run=dataclasses.replace(profile.run, requests=share.request_budget))


# -- the worker body (runs in a worker process or a Ray task) -----------------

def run_worker(profile: Profile, base_url: str, share: WorkerShare,
               send: Callable[[dict[str, Any]], None],
               wait_go: Callable[[], float | None],
               poll_stop: Callable[[], str | None] = lambda: None,
               install_signals: bool = True) -> None:
    """One worker: build its runner, wait for the common start, run, ship.

    Messages (JSON-able dicts, each with "kind" and "worker"):
    ``ready`` (host, pid); ``interval`` (iv, warm: ``IntervalSnapshot.to_json()``,
    line: the runner's timeline record) at each interval end; ``done`` (total,
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

    def on_interval(iv: IntervalSnapshot, warm_iv: IntervalSnapshot, line: dict[str, Any]) -> None:
        send({"kind": "interval", "worker": k, "iv": iv.to_json(), "warm": warm_iv.to_json(),
              "line": line})
        reason = stop_reason[0] or poll_stop()
        if reason is not None and runner is not None:
            runner.request_stop(reason)

    runner = LoadRunner(profile, base_url, rec, warm, on_interval=on_interval, load=share.load,
                        request_budget=share.request_budget, seed_offset=k,
                        arrival_offset_ns=share.arrival_offset_ns)
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


# -- merging on the driver -----------------------------------------------------

class _Accumulator:
    """Running exact sum of scope snapshots (decoded histograms, counters)."""

    __slots__ = ("_h", "_c")

    def __init__(self) -> None:
        self._h: dict[str, dict[str, Histogram]] = {}
        self._c: dict[str, dict[str, int]] = {}

    def add(self, scopes: Mapping[str, ScopeSnapshot]) -> None:
        for name, s in scopes.items():
            hs = self._h.setdefault(name, {})
            cs = self._c.setdefault(name, {})
            for metric, text in s.histograms.items():
                h = Histogram.decode(metric, text)
                if metric in hs:
                    hs[metric].add(h)
                else:
                    hs[metric] = h
            for key, n in s.counters.items():
                cs[key] = cs.get(key, 0) + n

    def snapshot(self) -> Snapshot:
        return Snapshot({name: ScopeSnapshot(dict(self._c.get(name, {})),
                                             {m: h.encode() for m, h in sorted(hs.items()) if h.count})
                         for name, hs in self._h.items()})


def _merge_scopes(parts: list[Mapping[str, ScopeSnapshot]],
                  scopes: list[str]) -> dict[str, ScopeSnapshot]:
    merged = Snapshot.merge(Snapshot(dict(p)) for p in parts).scopes
    # every scope present, as a single recorder's snapshot would have it
    return {s: merged.get(s, ScopeSnapshot({}, {})) for s in scopes}


@dataclass(slots=True)
class _Worker:
    share: WorkerShare
    host: str | None = None
    pid: int | None = None
    state: str = "starting"  # starting, ready, running, done, crashed
    last_index: int = -1
    error: str | None = None
    total: Snapshot | None = None
    warmup: Snapshot | None = None
    counters: RunCounters | None = None  # shipped with "done"
    skew_ns: int = 0
    started_total: int = 0
    dropped_total: int = 0
    acc: _Accumulator = dataclasses.field(default_factory=_Accumulator)
    warm_acc: _Accumulator = dataclasses.field(default_factory=_Accumulator)
    cancels: list[Any] = dataclasses.field(default_factory=list)  # [request id, scope, mono ns, events]
    flagged: FlaggedLog = dataclasses.field(default_factory=FlaggedLog)  # shipped with "done"


class Merger:
    """Receives worker messages; writes merged intervals and the final summary.

    Synchronous and transport-free: the local engine feeds it from pipes, the
    Ray engine from an actor's inbox.

    Args:
        profile: the whole profile.
        shares: the workers' shares.
        writer: the results writer (already ``start``-ed).
        timeline: the open timeline.jsonl.
        meta: the summary metadata (updated in place at the end).
        progress, on_line: as for ``run_profile``; they see the merged view.
        sample: reads the driver's machine now: (``_saturation.sample_host`` of the
            given emulator pids, ``time.monotonic_ns()``); tests give fake readings.
    """

    def __init__(self, profile: Profile, shares: list[WorkerShare], writer: ResultsWriter,
                 timeline: IO[str], meta: dict[str, Any],
                 progress: Callable[[IntervalSnapshot, dict[str, Any]], None] | None = None,
                 on_line: Callable[[str], None] | None = None,
                 sample: Callable[[tuple[int, ...]], tuple[HostSample, int]] | None = None) -> None:
        self.profile = profile
        self.writer = writer
        self.timeline = timeline
        self.meta = meta
        self.progress = progress
        self.on_line = on_line
        self.scopes = [s.name for s in profile.scenarios] + [ALL]
        self.workers = {s.index: _Worker(s) for s in shares}
        self.interval_ns = profile.run.interval_ns
        self._pending: dict[int, dict[int, tuple[IntervalSnapshot, IntervalSnapshot, dict[str, Any]]]] = {}
        self._total = _Accumulator()
        #: the joins with the emulator's record (client cancels, re-judged bursts): added to the totals
        self._joined: list[Snapshot] = []
        #: the embedded emulator the driver started on this host (set once it runs): the
        #: local engine hands it to its workers (WorkerShare.emulator_pids)
        self.emulator_pids: tuple[int, ...] = ()
        self.intervals_written = 0
        #: the driver's machine (workers reporting this host share it: hopbench.engine._saturation)
        self.hostname = socket.gethostname()
        #: the driver's host samples over the load window (common start, last worker's end):
        #: (sample, time.monotonic_ns()) at each end; see load_window
        self._host_at: list[tuple[HostSample, int] | None] = [None, None]
        self._host_timer: threading.Timer | None = None
        self._sample = sample if sample is not None else (
            lambda pids: (sample_host(emulator_pids=pids), time.monotonic_ns()))
        self._last_checkpoint = time.monotonic()

    # -- the driver's view of the machine ----------------------------------------
    def remote_share(self, share: WorkerShare) -> WorkerShare:
        """``share`` for a worker that may run on another machine (a Ray task): the
        emulator's pids with their start times and this machine's boot id, so that
        the worker measures the emulator only where it is (``_saturation.emulator_here``)."""
        starts: list[int] = []
        for pid in self.emulator_pids:
            try:
                got = parse_pid_stat(Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace"))
            except OSError:
                got = None
            starts.append(-1 if got is None else got[1])  # -1: no process will match it
        return dataclasses.replace(share, emulator_pids=self.emulator_pids, emulator_starts=tuple(starts),
                                   emulator_boot_id=read_boot_id() or "")

    def load_window(self, go_at: float) -> None:
        """The load starts at ``go_at`` (Unix time, s): sample the machine, the
        emulator and the driver's own CPU then (a timer thread), and again when the
        last worker has finished (:meth:`handle`, :meth:`lost`, :meth:`finish`).
        One sample of the one machine for the whole run: the workers' own samples
        would count it once per worker."""
        def start() -> None:
            if self._host_at[1] is None:
                self._host_at[0] = self._sample(self.emulator_pids)

        delay_s = go_at - time.time()
        if delay_s <= 0:  # already due (and tests): now, in this thread
            start()
            return
        self._host_timer = threading.Timer(delay_s, start)
        self._host_timer.daemon = True
        self._host_timer.start()

    def _load_ended(self) -> None:
        if self._host_at[0] is not None and self._host_at[1] is None and not self.running:
            self._host_at[1] = self._sample(self.emulator_pids)

    def driver_host(self) -> HostUsage | None:
        """The driver's sample over the load window (its machine, its emulator,
        its own process CPU), None when the window was not both opened and closed."""
        a, b = self._host_at
        if a is None or b is None:
            return None
        return host_usage(a[0], b[0], max(b[1] - a[1], 0))

    def _hosts(self) -> tuple[dict[int, Mapping[str, Any]], dict[str, Any] | None]:
        """Each worker's host figures with its siblings counted as the run's own
        (``siblings_cpu_ns``: the workers on its machine and, on the driver's machine,
        the driver), and the run's figures on the driver's machine (``run_host``)."""
        own = {i: HostUsage.from_json(w.counters.host if w.counters is not None else None)
               for i, w in self.workers.items()}
        driver = self.driver_host()
        out: dict[int, Mapping[str, Any]] = {}
        for i, h in own.items():
            if h is None:
                continue
            here = self.workers[i].host
            sib = sum(o.process_cores for j, o in own.items()
                      if o is not None and j != i and self.workers[j].host == here)
            if driver is not None and here == self.hostname:
                sib += driver.process_cores
            out[i] = with_siblings(h, sib).to_json()
        run = None
        if driver is not None:
            run = run_host(driver, [h for j, h in own.items()
                                    if h is not None and self.workers[j].host == self.hostname]).to_json()
        return out, run

    # -- messages ----------------------------------------------------------------
    def handle(self, msg: Mapping[str, Any]) -> None:
        """Take one worker message (see :func:`run_worker`)."""
        w = self.workers[int(msg["worker"])]
        kind = msg["kind"]
        if kind == "ready":
            w.host, w.pid, w.state = msg.get("host"), msg.get("pid"), "ready"
        elif kind == "interval":
            iv = IntervalSnapshot.from_json(msg["iv"])
            warm = IntervalSnapshot.from_json(msg["warm"])
            idx = iv.start_ns // self.interval_ns
            w.state = "running"
            w.last_index = max(w.last_index, idx)
            w.started_total = int(msg["line"].get("started_total", w.started_total))
            w.dropped_total = int(msg["line"].get("dropped_total", w.dropped_total))
            w.acc.add(iv.scopes)
            w.warm_acc.add(warm.scopes)
            self._pending.setdefault(idx, {})[w.share.index] = (iv, warm, dict(msg["line"]))
            self._flush()
        elif kind == "done":
            w.total = Snapshot.from_json(msg["total"])
            w.warmup = Snapshot.from_json(msg["warmup"])
            w.counters = RunCounters.from_json(msg["counters"])
            w.skew_ns = int(msg.get("start_skew_ns", 0))
            w.cancels = list(msg.get("cancels") or [])
            w.flagged = FlaggedLog.from_json(msg.get("bursts"))
            w.state = "done"
            self._load_ended()
            self._flush()

    def lost(self, index: int, error: str) -> None:
        """Worker ``index`` died or failed without a ``done`` message."""
        w = self.workers[index]
        if w.state in ("done", "crashed"):
            return
        w.state, w.error = "crashed", error.strip() or "exited without a result"
        self._load_ended()
        self._flush()

    @property
    def running(self) -> list[int]:
        """Indices of the workers that have neither finished nor died."""
        return [i for i, w in self.workers.items() if w.state not in ("done", "crashed")]

    # -- merged intervals --------------------------------------------------------
    def _flush(self) -> None:
        live = [w for w in self.workers.values() if w.state not in ("done", "crashed")]
        while self._pending:
            k = min(self._pending)
            if any(w.last_index < k for w in live):
                return
            self._emit(k, self._pending.pop(k))

    def _emit(self, k: int, parts: dict[int, tuple[IntervalSnapshot, IntervalSnapshot, dict[str, Any]]]) -> None:
        ivs = [p[0] for p in parts.values()]
        warms = [p[1] for p in parts.values()]
        lines = [p[2] for p in parts.values()]
        start = k * self.interval_ns
        end = max(iv.end_ns for iv, _, _ in parts.values())
        iv = IntervalSnapshot(start, end, _merge_scopes([x.scopes for x in ivs], self.scopes))
        warm = IntervalSnapshot(start, end, _merge_scopes([x.scopes for x in warms], self.scopes))
        self._total.add(iv.scopes)
        self.writer.write_interval(warm)
        self.writer.write_interval(iv)
        cpus = {str(i): p[2].get("cpu", 0.0) for i, p in sorted(parts.items())}
        line = {
            "start_ns": start, "end_ns": end,
            "in_flight_mean": sum(x.get("in_flight_mean", 0.0) for x in lines),
            "in_flight_now": sum(int(x.get("in_flight_now", 0)) for x in lines),
            # the phases add up across workers like in_flight (docs/results.md, "In flight")
            **{f"{ph}_{k}": sum(x.get(f"{ph}_{k}", 0) for x in lines)
               for ph in PHASES for k in ("mean", "now")},
            "cpu": max(cpus.values(), default=0.0),
            "started_total": sum(w.started_total for w in self.workers.values()),
            "dropped_total": sum(w.dropped_total for w in self.workers.values()),
            "completed": iv.counter(ALL, "completed") + warm.counter(ALL, "completed"),
            "started": iv.counter(ALL, "started") + warm.counter(ALL, "started"),
            "output_tokens": sum(iv.counter(ALL, f"tokens.output.{x}") for x in ("completed", "broken")),
            "workers": len(parts),
            "cpu_by_worker": cpus,
        }
        self.timeline.write(json.dumps(line) + "\n")
        self.timeline.flush()
        self.intervals_written += 1
        if self.progress is not None:
            self.progress(iv, line)  # as run_profile calls it (LiveProgress sums the intervals)
        if self.on_line is not None:
            self.on_line(progress_line(iv, line) + f"  workers {len(parts)}")
        if time.monotonic() - self._last_checkpoint >= _CHECKPOINT_S:
            self._last_checkpoint = time.monotonic()
            self.writer.update(dict(self.meta, ended_at=None), self._total.snapshot(), complete=False)

    # -- the end -------------------------------------------------------------------
    def totals(self) -> tuple[Snapshot, Snapshot]:
        """The merged (measured, warm-up) totals: each finished worker's shipped
        snapshot, and for a dead one the intervals it shipped before dying."""
        tot, warm = [], []
        for w in self.workers.values():
            if w.total is not None and w.warmup is not None:
                tot.append(w.total)
                warm.append(w.warmup)
            else:
                tot.append(w.acc.snapshot())
                warm.append(w.warm_acc.snapshot())
        tot.extend(self._joined)
        return (Snapshot(_merge_scopes([s.scopes for s in tot], self.scopes)),
                Snapshot(_merge_scopes([s.scopes for s in warm], self.scopes)))

    def join_cancels(self, record: Path) -> list[str]:
        """Join the workers' client cancels with the upstream's record
        (hopbench.workload._cancel.join_record); the figures join the totals.

        Returns:
            warnings for summary.json, possibly empty.
        """
        from ..workload._cancel import ClientCancel, join_record

        cancels = [ClientCancel(str(r), str(s), int(t), int(n))
                   for w in self.workers.values() for r, s, t, n in w.cancels]
        if not cancels:
            return []
        rec = Recorder([s for s in self.scopes if s != ALL])
        warnings = join_record(rec, cancels, record)
        self._joined.append(rec.snapshot())
        return warnings

    def join_bursts(self, record: Path) -> list[str]:
        """Re-judge the workers' flagged bursts against the embedded emulator's whole
        record (hopbench.measure._burst.join_bursts), as one process would; the verdict
        counters join the totals (not the workers' own parts).

        A worker that died before its final message shipped no flagged streams:
        those it counted (``proxy_buffering_suspected`` in the intervals it
        shipped) are named in a note (``_burst.not_rejudged``), never re-judged in part.

        Args:
            record: the emulator's ground_truth.jsonl (the emulator has stopped).

        Returns:
            notes for summary.json's warnings, possibly none.
        """
        from ..workload._cancel import read_record

        flagged = FlaggedLog()
        notes: list[str] = []
        for i, w in sorted(self.workers.items()):
            flagged.merge(w.flagged)
            lost = w.acc.snapshot().counter(ALL, "proxy_buffering_suspected") if w.total is None else 0
            if lost:
                notes.append(not_rejudged(lost, f"worker {i} ended before its final message, which carries its "
                                                "flagged streams to the driver"))
        if len(flagged):
            rec = Recorder([s for s in self.scopes if s != ALL])
            notes[:0] = join_bursts(rec, flagged, partial(read_record, record), proxy_possible=False,
                                    record=record.name)
            self._joined.append(rec.snapshot())
        return notes

    def finish(self, crashed: str | None, engine: str, truth: tuple[str, ...] = ()) -> tuple[dict[str, Any], bool]:
        """Flush what is left, judge every worker and the whole (``hopbench.driver._finish.judge``),
        write summary.json.

        Args:
            crashed: the driver's own failure (traceback), else None.
            engine: "local" or "ray".
            truth: the embedded emulator's lateness warnings (``_run.emulator_warnings``).

        Returns:
            (summary, complete).
        """
        for w in self.workers.values():
            if w.state not in ("done", "crashed"):
                self.lost(w.share.index, "did not report its end")
        while self._pending:  # everything is final now: write in index order
            k = min(self._pending)
            self._emit(k, self._pending.pop(k))
        if self._host_timer is not None:
            self._host_timer.cancel()
        self._load_ended()
        profile = self.profile
        total, warm = self.totals()
        hosts, run_host_json = self._hosts()
        parts: list[Part] = []
        for i, w in sorted(self.workers.items()):
            snap = w.total if w.total is not None else w.acc.snapshot()
            share = w.share.load
            info = WorkerInfo(
                index=i, host=w.host, pid=w.pid, state=w.state, error=w.error,
                share=({"concurrency": share.concurrency} if share.mode == "concurrency" else
                       {"rate_rps": share.rate_rps, "max_in_flight": share.max_in_flight,
                        "arrival_offset_ms": w.share.arrival_offset_ns / NS_PER_MS})
                | {"requests": w.share.request_budget},
                skew_ns=w.skew_ns)
            # a dead worker: the counts of the intervals it shipped, no run figures; the
            # stream counts are always those of the snapshot merged into the total
            counters = (RunCounters.of(RunStats(), snap) if w.counters is None else
                        dataclasses.replace(w.counters, counts=RunCounters.of(RunStats(), snap).counts,
                                            host=hosts.get(i, w.counters.host)))
            parts.append(Part(share_profile(profile, w.share), counters, snap, info))
        end = RunEnd(ended_at_unix_s=time.time(), crashed=crashed, intervals=self.intervals_written,
                     emulator_warnings=tuple(truth), engine=engine, host=run_host_json)
        summary = judge(profile, parts, total, warm if profile.run.warmup_ns else None, self.meta, end)
        return self.writer.write_final(summary.to_json(), total), summary.verdict.complete


def build_meta(profile: Profile, engine: str, n_workers: int) -> dict[str, Any]:
    """The summary metadata before the run: ``run_profile``'s plus the engine."""
    meta = base_meta(profile)
    meta.update(workers=n_workers, engine=engine)
    if profile.load.mode == "trace" and profile.load.trace.zero_note:  # rows with 0 tokens, sent with 1
        meta.setdefault("notes", []).append(profile.load.trace.zero_note)
    return meta


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
    """
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
            s = dataclasses.replace(s, emulator_pids=merger.emulator_pids)  # one host: the pid is valid here
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
                                                     if i in open_conns], timeout=_POLL_S)
        for i, c in list(open_conns.items()):
            if c in ready_list and not _drain(c, i, merger):
                del open_conns[i]
                _lost_if_unfinished(merger, i, procs[i])
                continue
            if i in open_conns and not procs[i].is_alive():
                _drain(c, i, merger)  # what the pipe still holds, then call it
                del open_conns[i]
                _lost_if_unfinished(merger, i, procs[i])
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
                interrupted[0] = f"target lost: {reason} {time.monotonic() - t0_s:.1f} s into the run"
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
                truth = (tuple(emulator_warnings(out / meta["ground_truth"])) if meta.get("ground_truth")
                         else ())
                summary, complete = merger.finish(crashed, engine, truth)
            finally:
                timeline.close()
    return RunOutcome(summary, out, complete, crashed, tuple(late))
