"""Merging on the driver: worker messages in, merged intervals and one summary.json out.

Role: :class:`Merger` is synchronous and transport-free: the local engine
(``hopbench.driver._workers``) feeds it from pipes, the Ray engine
(``hopbench.driver._ray``) from an actor's inbox. It writes the merged intervals
(intervals.hlog, timeline.jsonl, progress) as they complete, samples the driver's
machine over the load window, joins the client cancels and flagged bursts with the
embedded emulator's record, and judges the whole (``hopbench.driver._judge.judge``).

Invariants:

* Workers ship recorder snapshots (hdrh-encoded histograms and counters, per
  interval and in total), never raw samples and never percentiles; the merge
  uses hdrh's exact ``add``, so the merged summary is what one recorder fed
  every sample would hold (tested).
* Interval ``k`` of every worker covers ``[k, k+1) * run.interval_ns`` from
  the common start; the merged interval ``k`` is written once every worker
  still running has shipped an interval ``>= k``, in index order, so the log
  is in time order.
* The machine is sampled once, by the driver, over the load window (the common
  start to the last worker's end: :meth:`Merger.load_window`); each worker's own
  host figures count the other workers on its host and, on the driver's host,
  the driver as the run's own CPU (``siblings_cpu_ns``), never as neighbours
  (hopbench.engine._saturation).
* A worker that dies is kept: what it shipped before it died (its intervals)
  is merged into the total, and the judge reports it.
* Per-stream records are merged like the histograms, never held whole: each
  worker's streams.jsonl lines go to a part file (``STREAM_PART``; a local worker
  writes its own, a Ray task's come in ``streams`` messages), and
  :func:`merge_stream_parts` sorts the parts into one streams.jsonl by start
  time with at most ``SORT_CHUNK_BYTES`` of lines in memory (an external merge sort).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

from .._clock import NS_PER_MS
from .._textfile import iter_lines
from ..config._records import Profile
from ..engine._runner import RunStats
from ..engine._saturation import (HostSample, HostUsage, host_usage, parse_pid_stat, read_boot_id, run_host,
                                  sample_host, with_siblings)
from ..measure._burst import FlaggedLog, join_bursts, not_rejudged
from ..measure._counters import RunCounters
from ..measure._hdr import Histogram
from ..measure._inflight import PHASES
from ..measure._recorder import ALL, IntervalSnapshot, Recorder, ScopeSnapshot, Snapshot
from ._common import CHECKPOINT_S, progress_line
from ._judge import judge
from ._results import ResultsWriter
from ._share import WorkerShare, share_profile
from ._single import timeline_line
from ._summary import Part, RunEnd, WorkerInfo

__all__ = ["Merger", "merge_stream_parts", "STREAM_PART", "SORT_CHUNK_BYTES"]

STREAM_PART = "streams.part-{index}.jsonl"
"""A worker's streams.jsonl part in the results folder (removed once merged)."""
SORT_CHUNK_BYTES = 16 << 20
"""The most streams.jsonl bytes the merge sorts in memory at once (16 MiB);
more spill to sorted runs on disk beside the result, merged in passes of ``_FAN_IN``."""
_FAN_IN = 64
#: a line's start stamp: the first "start_ns" key of a compact streams.jsonl line is the
#: record's own (measure._lines.stream_line writes it before any nested object, and a
#: quote inside a JSON string is escaped, so the bytes cannot occur in a value)
_START = re.compile(rb'"start_ns":(-?\d+)')



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
        #: the streams.jsonl parts the driver writes for workers that ship their lines (Ray)
        self._parts: dict[int, IO[str]] = {}
        self._lost_lines, self._lost_why = 0, ""  # shipped lines that could not be written

    def stream_part(self, index: int) -> Path:
        """Worker ``index``'s streams.jsonl part in the results folder (``STREAM_PART``)."""
        return self.writer.path / STREAM_PART.format(index=index)

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
        elif kind == "streams":  # a Ray task's lines: appended to its part as they come
            try:
                f = self._parts.get(w.share.index)
                if f is None:
                    f = self._parts[w.share.index] = open(self.stream_part(w.share.index), "a", encoding="utf-8")
                f.write("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in msg["lines"]))
                f.flush()
            except OSError as exc:  # e.g. a full disk: the load goes on, the summary says what is missing
                self._lost_lines += len(msg["lines"])
                self._lost_why = exc.strerror or str(exc)
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
            # the phases add up across workers like in_flight (docs/results/in-flight.md, "In flight")
            **{f"{ph}_{k}": sum(x.get(f"{ph}_{k}", 0) for x in lines)
               for ph in PHASES for k in ("mean", "now")},
            "cpu": max(cpus.values(), default=0.0),
            "started_total": sum(w.started_total for w in self.workers.values()),
            "dropped_total": sum(w.dropped_total for w in self.workers.values()),
            "workers": len(parts),
            "cpu_by_worker": cpus,
        }
        # completed, started and output tokens of the measured and the warm-up streams, by the rule
        # one process's timeline uses (its progress line said "tok 0/s" through the warm-up)
        line = timeline_line(line, iv, warm)
        self.timeline.write(json.dumps(line) + "\n")
        self.timeline.flush()
        self.intervals_written += 1
        if self.progress is not None:
            self.progress(iv, line)  # as run_profile calls it (LiveProgress sums the intervals)
        if self.on_line is not None:
            self.on_line(progress_line(iv, line) + f"  workers {len(parts)}")
        if time.monotonic() - self._last_checkpoint >= CHECKPOINT_S:
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

    def merge_streams(self) -> list[str]:
        """Merge the workers' streams.jsonl parts into the folder's streams.jsonl
        (:func:`merge_stream_parts`: start order, bounded memory), once every worker
        has finished or died.

        Returns:
            notes for summary.json's warnings: a cut part's last line, or why the
            merge failed (the parts are then kept in the folder). Never raises.
        """
        notes = ([f"streams.jsonl: {self._lost_lines:,} streams' lines could not be written on the driver "
                  f"({self._lost_why}) and are missing"] if self._lost_lines else [])
        for f in self._parts.values():
            try:
                f.close()
            except OSError:
                pass
        self._parts.clear()
        dest = self.writer.path / "streams.jsonl"
        try:
            return notes + merge_stream_parts([(i, self.stream_part(i)) for i in sorted(self.workers)], dest)[1]
        except OSError as exc:
            return notes + [f"streams.jsonl: the workers' parts could not be merged: {exc.strerror or exc} "
                            f"(they are kept in {self.writer.path} as {STREAM_PART.format(index='K')})"]

    def finish(self, crashed: str | None, engine: str, truth: tuple[str, ...] = ()) -> tuple[dict[str, Any], bool]:
        """Flush what is left, judge every worker and the whole (``hopbench.driver._judge.judge``),
        write summary.json.

        Args:
            crashed: the driver's own failure (traceback), else None.
            engine: "local" or "ray".
            truth: the embedded emulator's lateness warnings (``_common.emulator_warnings``).

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
        if self.profile.run.stream_log:
            self.meta.setdefault("notes", []).extend(self.merge_streams())
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


# -- streams.jsonl: the workers' parts, merged in start order ------------------------------

#: a line's sort key, as bytes that compare as the key does: (start_ns + 2**62, worker index,
#: place in its part), zero-padded to fixed widths, so that sorting and merging compare bytes
_KEY = b"%020d%06d%012d"
_KEY_LEN = 38
_NO_START = -(1 << 62)  # a line without a start stamp sorts first


def _open_runs(stack: ExitStack, runs: Sequence[Path]) -> list[IO[bytes]]:
    return [stack.enter_context(open(r, "rb")) for r in runs]


def merge_stream_parts(parts: Sequence[tuple[int, Path]], dest: Path, chunk_bytes: int = SORT_CHUNK_BYTES,
                       fan_in: int = _FAN_IN) -> tuple[int, list[str]]:
    """Merge the workers' streams.jsonl parts into one ``dest``, in start order, in bounded memory.

    Order: by ``start_ns`` (ns from the worker's own start, which is the common start
    plus its ``start_skew_ms``: as its intervals), then worker index, then the part's
    own order (the order its streams ended); a line without a start stamp sorts first.
    Each line is copied byte for byte: the schema is the one-process run's. At most
    ``chunk_bytes`` of lines are sorted in memory at once; past that, sorted runs are
    written beside ``dest`` (``<dest>.run-N.tmp``, each line behind its fixed-width key)
    and merged ``fan_in`` at a time. ``dest`` is written to a temporary file and renamed,
    then the parts and runs are removed.

    Args:
        parts: (worker index, its part file); a missing file is a worker that wrote none.
        dest: the results folder's streams.jsonl.
        chunk_bytes: the sort's memory bound, bytes (``SORT_CHUNK_BYTES``).
        fan_in: how many runs one pass merges (a bound on the files open at once).

    Returns:
        (lines written, notes for summary.json's warnings: a part's cut last line,
        left out, when its worker stopped mid-write).

    Raises:
        OSError: a part cannot be read or ``dest`` cannot be written (the parts are then kept).
    """
    runs: list[Path] = []
    chunk: list[bytes] = []
    held = 0
    notes: list[str] = []
    written = 0
    made = 0  # runs written, for their names

    def run_path() -> Path:
        nonlocal made
        made += 1
        return dest.with_name(f"{dest.name}.run-{made}.tmp")

    for k, path in parts:
        if not path.exists():
            continue
        for seq, (n, raw, _) in enumerate(iter_lines(path)):
            if not raw.endswith(b"\n"):  # only a last line can lack it: its worker died mid-write
                notes.append(f"streams.jsonl: worker {k}'s last line was cut (it stopped mid-write): "
                             f"left out ({path.name}:{n})")
                continue
            if not raw.strip():
                continue
            m = _START.search(raw)
            chunk.append(_KEY % ((int(m.group(1)) if m else _NO_START) - _NO_START, k, seq) + raw)
            written += 1
            held += len(raw) + 100  # the key and the list's own share beside the line
            if held >= chunk_bytes:
                chunk.sort()
                runs.append(run_path())
                with open(runs[-1], "wb") as f:
                    f.writelines(chunk)
                chunk, held = [], 0
    chunk.sort()
    if runs and chunk:
        runs.append(run_path())
        with open(runs[-1], "wb") as f:
            f.writelines(chunk)
        chunk = []
    while len(runs) > fan_in:  # merge the oldest runs first: keys are unique, the order holds
        group, runs = runs[:fan_in], runs[fan_in:]
        runs.append(run_path())
        with ExitStack() as stack, open(runs[-1], "wb") as f:
            f.writelines(heapq.merge(*_open_runs(stack, group)))
        for r in group:
            r.unlink()
    tmp = dest.with_name(dest.name + ".tmp")
    with ExitStack() as stack, open(tmp, "wb") as f:
        for line in (heapq.merge(*_open_runs(stack, runs)) if runs else chunk):
            f.write(line[_KEY_LEN:])
    os.replace(tmp, dest)
    for r in runs:
        r.unlink(missing_ok=True)
    for _, path in parts:
        path.unlink(missing_ok=True)
    return written, notes
