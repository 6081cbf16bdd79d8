"""The records of a finished run: what summary.json holds, typed.

Role: the judge (``hopbench.driver._judge.judge``) takes :class:`Part` (one per
load generator: its profile, counters and snapshot, and :class:`WorkerInfo`
with workers) and :class:`RunEnd` (the facts only the engine's shell knows),
and returns one :class:`Summary`: its :class:`Verdict`, :class:`Headline`,
:class:`Generator` and, with workers, one :class:`WorkerDetail` per worker.
:meth:`Summary.to_json` is the one serialiser of the final summary.json
(``hopbench.driver._results.ResultsWriter.write_final`` writes it atomically).

Invariants:

* Every record is frozen: built once by the judge, read by the writer, the
  exit code and the views.
* The document's keys and their order are those of the pre-run metadata
  (``hopbench.driver._common.base_meta``), then the judged fields;
  docs/results.md defines every figure. Times: ns inside, ms in the document
  (``start_skew_ms``, ``ended_ms``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._units import NS_PER_MS
from ..config._records import Profile
from ..measure._counters import RunCounters
from ..measure._outcomes import TokensSource
from ..measure._recorder import Snapshot
from ._results import SCHEMA, summary_scopes

__all__ = ["Generator", "Headline", "Part", "RunEnd", "Summary", "Verdict", "WorkerDetail", "WorkerInfo"]


@dataclass(frozen=True, slots=True)
class Headline:
    """The run in a few figures (summary.json ``headline``, docs/results.md).

    Attributes:
        started, completed, errors, cancelled: stream counts of the measured run.
        client_cancelled: streams closed on purpose by a scenario's cancel key (hopbench.workload._cancel).
        error_rate, interrupted_rate: in [0, 1], 4 decimals; None when nothing started.
        completed_per_s, output_tokens_per_s: over the measured window (``load.measured_s``);
            output tokens are usage, else the output events the client counted, and
            ``output_tokens_per_s`` is None when no stream had either (never 0 for "unknown").
        tokens_source: where the output tokens came from (``measure._outcomes.tokens_source``).
    """

    started: int
    completed: int
    errors: int
    cancelled: int
    client_cancelled: int
    error_rate: float | None
    interrupted_rate: float | None
    completed_per_s: float
    output_tokens_per_s: float | None
    tokens_source: TokensSource = TokensSource("none", 0, 0)

    def to_json(self) -> dict[str, Any]:
        """The ``headline`` object, keys in the order above."""
        return {"started": self.started, "completed": self.completed, "errors": self.errors,
                "cancelled": self.cancelled, "client_cancelled": self.client_cancelled,
                "error_rate": self.error_rate,
                "interrupted_rate": self.interrupted_rate, "completed_per_s": self.completed_per_s,
                "output_tokens_per_s": self.output_tokens_per_s, "tokens_source": self.tokens_source.to_json()}


@dataclass(frozen=True, slots=True)
class Generator:
    """The load generator's own figures (summary.json ``generator``).

    Attributes:
        cpu_mean, cpu_max: share of one core (workers: mean of the workers' means, max of maxes).
        loop_lag_p99_ms: event-loop lag p99 (ms; workers: the worst worker's).
        intervals: intervals written to intervals.hlog / timeline.jsonl.
        gc: the collector's figures (:func:`gc_figures`).
        host: the process's and the machine's CPU use (:func:`host_figures`; with workers
            the driver's sample of its machine over the load window, every worker's CPU in
            ``client_cpu_cores``: ``_saturation.run_host``).
        saturation: the saturation verdict (``_saturation.Verdict.to_json``; with workers
            the workers' verdicts merged: :func:`merge_saturation`).
    """

    cpu_mean: float
    cpu_max: float
    loop_lag_p99_ms: float
    intervals: int
    gc: Mapping[str, Any]
    host: Mapping[str, Any]
    saturation: Mapping[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        """The ``generator`` object, keys in the order above."""
        return {"cpu_mean": self.cpu_mean, "cpu_max": self.cpu_max, "loop_lag_p99_ms": self.loop_lag_p99_ms,
                "intervals": self.intervals, **self.gc, **self.host, "saturation": self.saturation}


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What the driver knows of one worker beyond its counters.

    Attributes:
        index: 0..W-1.
        host, pid: where it ran (None when it never reported).
        state: "done" or "crashed".
        error: why it died (traceback or reason), else None.
        share: its share of the load as summary.json shows it
            (``concurrency`` or ``rate_rps``/``max_in_flight``/``arrival_offset_ms``, and ``requests``).
        skew_ns: how late it started after the common start (ns).
    """

    index: int
    host: str | None
    pid: int | None
    state: str
    error: str | None
    share: Mapping[str, Any]
    skew_ns: int = 0


@dataclass(frozen=True, slots=True)
class Part:
    """One load generator as the judge sees it.

    Attributes:
        profile: the profile as it ran it (a worker: its share, ``_share.share_profile``).
        counters: its run-level record.
        total: its measured snapshot (a dead worker: the intervals it shipped).
        worker: the worker's facts; None for a single-process run.
    """

    profile: Profile
    counters: RunCounters
    total: Snapshot
    worker: WorkerInfo | None = None


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The facts of the end that only the engine's shell knows (clock, files, signals).

    Attributes:
        ended_at_unix_s: wall-clock end (s since the epoch).
        crashed: hopbench's own failure (traceback or reason), else None.
        interrupted_by: the stop reason the shell saw (signal name, "target lost: ..."), else None.
        intervals: intervals written.
        notes: warnings from beside the load (unused ``[emulator]``, ``[[scrape]]`` failures).
        emulator_warnings: the embedded emulator's own lateness (``_common.emulator_warnings``).
        engine: "local" or "ray" with workers; None for one process.
        host: with workers, the run on the driver's machine over the load window
            (``_saturation.run_host(...).to_json()``); None when not measured or for
            one process (its own is in its counters).
    """

    ended_at_unix_s: float
    crashed: str | None = None
    interrupted_by: str | None = None
    intervals: int = 0
    notes: tuple[str, ...] = ()
    emulator_warnings: tuple[str, ...] = ()
    engine: str | None = None
    host: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The run judged (what exit codes, the gate and compare read).

    Attributes:
        complete: reached its planned end: no crash, no interruption, no dead worker.
        saturated: the client (any worker) was the bottleneck (``analyse``).
        load_held: ``load.held`` (None: not judged: a closed loop's ``run.requests``
            budget, nothing due or measured).
        interrupted_by: the stop reason, else None.
        warnings: what went wrong, most important first, no repeats.
    """

    complete: bool
    saturated: bool
    load_held: bool | None
    interrupted_by: str | None
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkerDetail:
    """One worker in summary.json ``worker_detail`` (docs/scaleout.md, "The summary")."""

    info: WorkerInfo
    started: int
    completed: int
    saturated: bool
    cpu_mean: float
    cpu_max: float
    loop_lag_p99_ms: float
    schedule_lag_p99_ms: float | None
    peak_in_flight: int
    gc: Mapping[str, Any]
    saturation: Mapping[str, Any] | None
    ended_ms: float
    interrupted_by: str | None
    host_cpu: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The object as summary.json shows it."""
        w = self.info
        return {"index": w.index, "host": w.host, "pid": w.pid, "state": w.state, "error": w.error,
                "share": dict(w.share), "started": self.started, "completed": self.completed,
                "saturated": self.saturated, "cpu_mean": self.cpu_mean, "cpu_max": self.cpu_max,
                "loop_lag_p99_ms": self.loop_lag_p99_ms, "schedule_lag_p99_ms": self.schedule_lag_p99_ms,
                "peak_in_flight": self.peak_in_flight, **self.gc, "saturation": self.saturation,
                "start_skew_ms": w.skew_ns / NS_PER_MS,
                "ended_ms": self.ended_ms, "interrupted_by": self.interrupted_by,
                "host_cpu": dict(self.host_cpu)}


@dataclass(frozen=True, slots=True)
class Summary:
    """One finished run: what summary.json holds.

    Attributes:
        meta: the facts known before the judging (``_common.base_meta`` and what the
            shell added: start, ground truth, scrape, crash); its keys lead the document.
        verdict: complete, saturated, load held, interrupted, warnings.
        ended_at: ISO 8601 UTC, ms; duration_s: wall-clock run time (s, 3 decimals).
        load: requested vs achieved figures (``analyse``; workers: merged, CPU from the workers).
        headline, generator: see their records.
        slo: the scenarios' SLO block (``hopbench.measure._slo.slo_summary``), None without SLOs.
        error_samples: error kind -> first messages, sorted by kind.
        counters: the merged run-level record.
        workers: one detail per worker; None for one process.
        engine: "local" / "ray" with workers, else None.
        total, warmup: the measured and warm-up snapshots (warmup None without a warm-up).
    """

    meta: Mapping[str, Any]
    verdict: Verdict
    ended_at: str
    duration_s: float
    load: Mapping[str, Any]
    headline: Headline
    slo: Mapping[str, Any] | None
    error_samples: Mapping[str, tuple[str, ...]]
    generator: Generator
    counters: RunCounters
    total: Snapshot
    warmup: Snapshot | None
    workers: tuple[WorkerDetail, ...] | None = None
    engine: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The summary.json document (docs/results.md): ``schema``, the metadata
        keys in their order, the judged fields, ``complete``, ``scopes``, ``warmup``."""
        doc: dict[str, Any] = {"schema": SCHEMA}
        doc.update((k, v) for k, v in self.meta.items() if k != "notes")
        v = self.verdict
        doc.update(ended_at=self.ended_at, duration_s=self.duration_s, saturated=v.saturated,
                   warnings=list(v.warnings), interrupted_by=v.interrupted_by, load=dict(self.load),
                   headline=self.headline.to_json(), slo=self.slo,
                   error_samples={k: list(x) for k, x in self.error_samples.items()})
        if self.workers is not None:
            doc.update(workers=len(self.workers), engine=self.engine,
                       hosts=sorted({d.info.host for d in self.workers if d.info.host}),
                       worker_detail=[d.to_json() for d in self.workers])
        doc["generator"] = self.generator.to_json()
        doc["schema"] = SCHEMA
        doc["complete"] = v.complete
        doc["scopes"] = summary_scopes(self.total)
        doc["warmup"] = None if self.warmup is None else summary_scopes(self.warmup)
        return doc

