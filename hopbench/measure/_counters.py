"""The run-level counters of a load generator, as one frozen record that merges.

Role: the runner (``LoadRunner.counters``) turns its ``RunStats`` and its
recorder's measured snapshot into a :class:`RunCounters`; a worker ships it
(:meth:`RunCounters.to_json`) and the driver reads it back
(:meth:`RunCounters.from_json`); :meth:`RunCounters.merge` adds two of them
exactly, so W workers (or Ray tasks) become one record, which the judge
(``hopbench.driver._judge.judge``) reads like a single process's.

Invariants:

* Pure: no clock, no I/O; records are frozen and slotted.
* ``merge`` is associative and keeps the bounds of ``error_samples``
  (``hopbench.measure._wire_text.merge_samples``).
* ``counts`` are the measured run's "all"-scope counters (the same numbers as
  summary.json ``scopes.all.counters``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from .._errors import ResultsError
from .._format import plural
from ._outcomes import BROKEN, TokensSource, output_tokens, tokens_source
from ._recorder import ALL, Snapshot
from ._wire_text import merge_samples

__all__ = ["RunCounters", "RunStatsLike", "StatsLike"]


class StatsLike(Protocol):
    """The runner's run-level figures as the judge reads them
    (``hopbench.engine._runner.RunStats`` has them; so has :class:`RunCounters`)."""

    @property
    def codes_folded(self) -> int: ...
    @property
    def cancelled_by(self) -> str | None: ...
    @property
    def error_samples(self) -> Mapping[str, Sequence[str]]: ...


class RunStatsLike(StatsLike, Protocol):
    """Every ``RunStats`` field that :meth:`RunCounters.of` reads."""

    @property
    def stop_ns(self) -> int: ...
    @property
    def schedule_end_ns(self) -> int: ...
    @property
    def ended_ns(self) -> int: ...
    @property
    def interrupted_by(self) -> str | None: ...
    @property
    def requests_started(self) -> int: ...
    @property
    def arrivals(self) -> int: ...
    @property
    def max_in_flight_hits(self) -> int: ...
    @property
    def peak_in_flight(self) -> int: ...
    @property
    def peak_open(self) -> int: ...
    @property
    def in_flight_area(self) -> float: ...
    @property
    def steady_area(self) -> float: ...
    @property
    def steady_phase_area(self) -> Mapping[str, int]: ...
    @property
    def steady_think_area(self) -> int: ...
    @property
    def sent_measured(self) -> int: ...
    @property
    def due(self) -> int: ...
    @property
    def arrivals_in_window(self) -> int: ...
    @property
    def sent_in_window(self) -> int: ...
    @property
    def later_sent_in_window(self) -> int: ...
    @property
    def steady_from_ns(self) -> int: ...
    @property
    def cpu_fractions(self) -> Sequence[float]: ...
    @property
    def gc_collections(self) -> int: ...
    @property
    def gc_pause_ns(self) -> int: ...
    @property
    def gc_pause_max_ns(self) -> int: ...
    @property
    def gc_pause_p99_ns(self) -> int: ...
    @property
    def host(self) -> Mapping[str, Any] | None: ...
    @property
    def error_samples(self) -> Mapping[str, Sequence[str]]: ...


@dataclass(frozen=True, slots=True)
class RunCounters:
    """One load generator's counts and sums (one process, one worker, or several merged).

    Attributes:
        counts: the measured run's "all"-scope counters: ``started``,
            ``completed``, each outcome and outcome detail
            (``http_error.503``, ...), ``tokens.<dir>.<kind>``, ... (docs/results.md).
        stop_ns, ended_ns: when the load stopped and the last stream ended (ns
            from the run start; merged: the latest).
        schedule_end_ns: an open loop whose schedule ran out by itself (``run.requests``,
            a trace without ``loop``): one mean gap after its last arrival was due;
            a closed loop's ``run.requests``: when its last request was taken, where its
            steady window ends (ns from the run start; merged: the latest); 0 otherwise.
        steady_from_ns: start of the steady window (ns; merged: the earliest).
        interrupted_by: the first stop reason seen (a signal name, "target lost: ..."), else None.
        requests_started, arrivals, max_in_flight_hits, sent_measured: counts (merged: sums).
        due: an open loop's arrivals its schedule had due in the measured window
            (``hopbench.engine._schedule.DueCount``; merged: the sum, each worker's share of
            the schedule being its own); 0 for a closed loop.
        arrivals_in_window, sent_in_window, later_sent_in_window: an open loop's
            arrivals due in the measured window ``[start, stop)`` that the client took
            up, those of them whose request it wrote (after the stop too), and the later
            session turns due in it that it wrote (``hopbench.engine._schedule.WindowCount``;
            merged: sums); 0 for a closed loop.
        peak_in_flight, peak_open: peaks (merged: the sum, an upper bound).
        in_flight_area, steady_area: stream-ns (merged: sums).
        steady_phase_area: phase name -> stream-ns of the steady window (merged: sums).
        steady_think_area: user-ns of the steady window spent thinking between session
            turns (merged: sums).
        cpu_fractions: CPU share of one core per interval (merged: concatenated).
        gc_collections, gc_pause_ns: collections and their total pause (ns; sums).
        gc_pause_max_ns: the longest pause (ns; merged: the longest).
        gc_pause_p99_ns: the pauses' p99 (ns; merged: the worst generator's).
        host: the process's and the machine's CPU use (``_saturation.HostUsage.to_json``);
            merged: kept only when one side has it (shares of different processes do not add).
        error_samples: error kind -> first messages (bounded, hopbench.measure._wire_text).
        codes_folded: wire error codes counted as "other" (sum).
        cancelled_by: what cancelled the streams open after the stop ("run.grace_s",
            "a second SIGINT", ...; merged: the first seen), else None.
    """

    counts: Mapping[str, int] = field(default_factory=dict)
    stop_ns: int = 0
    schedule_end_ns: int = 0
    ended_ns: int = 0
    steady_from_ns: int = 0
    interrupted_by: str | None = None
    requests_started: int = 0
    arrivals: int = 0
    max_in_flight_hits: int = 0
    sent_measured: int = 0
    due: int = 0
    arrivals_in_window: int = 0
    sent_in_window: int = 0
    later_sent_in_window: int = 0
    peak_in_flight: int = 0
    peak_open: int = 0
    in_flight_area: float = 0.0
    steady_area: float = 0.0
    steady_phase_area: Mapping[str, int] = field(default_factory=dict)
    steady_think_area: int = 0
    cpu_fractions: tuple[float, ...] = ()
    gc_collections: int = 0
    gc_pause_ns: int = 0
    gc_pause_max_ns: int = 0
    gc_pause_p99_ns: int = 0
    host: Mapping[str, Any] | None = None
    error_samples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    codes_folded: int = 0
    cancelled_by: str | None = None

    @classmethod
    def of(cls, stats: RunStatsLike, total: Snapshot) -> RunCounters:
        """The record of one load generator: its runner's figures and its measured snapshot.

        Args:
            stats: the runner's ``RunStats`` (or another record with its fields).
            total: the load generator's measured snapshot (its "all" counters are kept).
        """
        scope = total.scopes.get(ALL)
        return cls(
            counts=dict(scope.counters) if scope is not None else {},
            stop_ns=stats.stop_ns, schedule_end_ns=stats.schedule_end_ns, ended_ns=stats.ended_ns, steady_from_ns=stats.steady_from_ns,
            interrupted_by=stats.interrupted_by, requests_started=stats.requests_started,
            arrivals=stats.arrivals, max_in_flight_hits=stats.max_in_flight_hits,
            sent_measured=stats.sent_measured, due=stats.due, arrivals_in_window=stats.arrivals_in_window,
            sent_in_window=stats.sent_in_window, later_sent_in_window=stats.later_sent_in_window,
            peak_in_flight=stats.peak_in_flight,
            peak_open=stats.peak_open, in_flight_area=stats.in_flight_area,
            steady_area=stats.steady_area, steady_phase_area=dict(stats.steady_phase_area),
            steady_think_area=stats.steady_think_area,
            cpu_fractions=tuple(stats.cpu_fractions), gc_collections=stats.gc_collections,
            gc_pause_ns=stats.gc_pause_ns, gc_pause_max_ns=stats.gc_pause_max_ns,
            gc_pause_p99_ns=stats.gc_pause_p99_ns, host=stats.host,
            error_samples={k: tuple(v) for k, v in stats.error_samples.items()},
            codes_folded=stats.codes_folded, cancelled_by=stats.cancelled_by)

    def merge(self, other: RunCounters) -> RunCounters:
        """Both load generators as one: sums, peaks summed (an upper bound), the
        latest stop and end, the earliest steady start, the first stop reason.

        Never raises. Associative; the empty record is its identity except for
        ``steady_from_ns`` (the earliest of the two is kept).
        """
        counts = dict(self.counts)
        for k, n in other.counts.items():
            counts[k] = counts.get(k, 0) + n
        phases = dict(self.steady_phase_area)
        for k, n in other.steady_phase_area.items():
            phases[k] = phases.get(k, 0) + n
        samples = merge_samples([self.error_samples, other.error_samples])
        return RunCounters(
            counts=counts, stop_ns=max(self.stop_ns, other.stop_ns),
            schedule_end_ns=max(self.schedule_end_ns, other.schedule_end_ns),
            ended_ns=max(self.ended_ns, other.ended_ns),
            steady_from_ns=min(self.steady_from_ns, other.steady_from_ns),
            interrupted_by=self.interrupted_by or other.interrupted_by,
            requests_started=self.requests_started + other.requests_started,
            arrivals=self.arrivals + other.arrivals,
            max_in_flight_hits=self.max_in_flight_hits + other.max_in_flight_hits,
            sent_measured=self.sent_measured + other.sent_measured,
            due=self.due + other.due,
            arrivals_in_window=self.arrivals_in_window + other.arrivals_in_window,
            sent_in_window=self.sent_in_window + other.sent_in_window,
            later_sent_in_window=self.later_sent_in_window + other.later_sent_in_window,
            peak_in_flight=self.peak_in_flight + other.peak_in_flight,
            peak_open=self.peak_open + other.peak_open,
            in_flight_area=self.in_flight_area + other.in_flight_area,
            steady_area=self.steady_area + other.steady_area,
            steady_phase_area=phases, steady_think_area=self.steady_think_area + other.steady_think_area,
            cpu_fractions=self.cpu_fractions + other.cpu_fractions,
            gc_collections=self.gc_collections + other.gc_collections,
            gc_pause_ns=self.gc_pause_ns + other.gc_pause_ns,
            gc_pause_max_ns=max(self.gc_pause_max_ns, other.gc_pause_max_ns),
            gc_pause_p99_ns=max(self.gc_pause_p99_ns, other.gc_pause_p99_ns),
            host=other.host if self.host is None else self.host if other.host is None else None,
            error_samples={k: tuple(v) for k, v in samples.items()},
            codes_folded=self.codes_folded + other.codes_folded,
            cancelled_by=self.cancelled_by or other.cancelled_by)

    def count(self, name: str) -> int:
        """One "all"-scope counter (0 when never incremented)."""
        return self.counts.get(name, 0)

    @property
    def started(self) -> int:
        """Streams started in the measured window."""
        return self.count("started")

    @property
    def completed(self) -> int:
        """Streams that completed."""
        return self.count("completed")

    @property
    def errors(self) -> int:
        """Streams that ended in error (every outcome of ``_outcomes.BROKEN``)."""
        return sum(self.count(k) for k in BROKEN)

    @property
    def cancelled(self) -> int:
        """Streams cancelled at the stop."""
        return self.count("cancelled")

    @property
    def output_tokens(self) -> int:
        """Output tokens of completed and broken streams: usage, else their output
        events (``_outcomes.output_tokens``; 0 also without any count: see :attr:`tokens_source`)."""
        return output_tokens(self.count)

    @property
    def tokens_source(self) -> TokensSource:
        """Where :attr:`output_tokens` came from (``_outcomes.tokens_source``)."""
        return tokens_source(self.count)

    def to_json(self) -> dict[str, Any]:
        """A JSON object of every field (tuples as lists), for shipping between processes."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, tuple):
                v = list(v)
            elif f.name == "error_samples":
                v = {k: list(x) for k, x in v.items()}
            elif isinstance(v, Mapping):
                v = dict(v)
            out[f.name] = v
        return out

    @classmethod
    def from_json(cls, data: object) -> RunCounters:
        """Inverse of :meth:`to_json`; missing fields take their defaults.

        Raises:
            ResultsError: not an object, or an unknown field.
        """
        if not isinstance(data, Mapping):
            raise ResultsError(f"counters: expected an object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ResultsError(f"counters: unknown {plural(len(unknown), 'field')} {', '.join(unknown)}")
        kw: dict[str, Any] = dict(data)
        if "cpu_fractions" in kw:
            kw["cpu_fractions"] = tuple(float(x) for x in kw["cpu_fractions"])
        if "error_samples" in kw:
            kw["error_samples"] = {str(k): tuple(str(t) for t in v) for k, v in kw["error_samples"].items()}
        return cls(**kw)

