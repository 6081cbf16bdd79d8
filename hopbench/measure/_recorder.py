"""The metrics recorder: histograms and counters per scope, and their snapshots.

Role: the runner feeds it integer values (ns, or milli-tokens/s, see
``_metrics.METRICS``) and counter increments; reports, progress lines and worker
processes take snapshots. The recorder is synchronous and clock-free
(STYLE.md §1): interval boundaries are given to it by the caller.

Scopes: one per scenario, plus ``"all"``, which is implied, holds everything
recorded in any scope, and also the global metrics (``record_global``:
``loop_lag``, ``schedule_lag``, ...) and global counters (``incr_global``).

Invariants:

* Every accepted value lands, exactly once, in its scope's and in "all"'s
  cumulative histogram and in the current interval's (the interval histograms
  are folded into the cumulative ones by :meth:`Recorder.take_interval`, and
  :meth:`Recorder.snapshot` adds the unfolded part, so the hot path costs one
  hdrh ``record_value`` per value and the folding runs in hdrh's C ``add``).
* A value out of a metric's range is never dropped silently: it increments
  the counter ``out_of_range.<metric>`` in its scope and in "all".
* Snapshots carry encoded histograms (hdrh V2 base64) and counters, never raw
  samples or percentiles, so they merge exactly (:meth:`Snapshot.merge`).
* Histograms are created on first record; snapshots list only non-empty ones.
* The error bounds of samples whose stamps are not exact (docs/results.md,
  "Times from the wire") are kept beside the histograms, cumulatively only (no
  intervals): per metric three histograms of those samples alone, their
  reported values (``<metric>~x``), their lower (``~lo``) and upper (``~hi``)
  bounds (:meth:`Recorder.record_bound`). The metric's histogram less ``~x``
  plus ``~lo`` (``~hi``) holds a lower (upper) bound of every sample, so the
  true percentile lies between theirs (``hopbench.measure._error_bound``).
* A snapshot's counters and histograms are of one instant: :meth:`Recorder.snapshot`
  now (on the loop), :meth:`Recorder.folded_snapshot` the last folded interval's
  end (a checkpoint beside the loop), so a histogram's count agrees with the
  counters recorded with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ResultsError, UsageError
from ._hdr import Histogram
from ._meter import GapSink
from ._metrics import METRICS

BOUND_SUFFIXES = ("~x", "~lo", "~hi")
"""Names of a metric's bound histograms: ``<metric><suffix>`` (see the module's docstring)."""

__all__ = [
    "ALL",
    "Recorder",
    "ScopeSnapshot",
    "Snapshot",
    "IntervalSnapshot",
    "DetachedInterval",
    "merge",
    "BOUND_SUFFIXES",
    "bound_metric",
]

ALL = "all"
"""The implied scope that aggregates every scope plus the global metrics."""

_BAD_SCOPE_CHARS = frozenset(",/\\\x00 \t\r\n")


def _check_scope_name(name: object) -> str:
    # Scope names become file names (<scope>.<metric>.hgrm) and hlog tags
    # (Tag=<scope>.<metric>,): a comma, a slash or white space would break them.
    if not isinstance(name, str) or not name:
        raise UsageError(f"scope names must be non-empty strings, got {name!r}")
    if name == ALL:
        raise UsageError('scope "all" is implied and must not be listed')
    if name.startswith(".") or _BAD_SCOPE_CHARS.intersection(name):
        raise UsageError(
            f"scope name {name!r} cannot be used in file names and log tags: "
            "no leading '.', no ',', '/', '\\' or white space"
        )
    return name


def bound_metric(name: str) -> str | None:
    """The metric of a bound histogram's name (``"itl~lo"`` -> ``"itl"``), None
    when ``name`` is not one (no known suffix, or an unknown metric)."""
    base, sep, tail = name.rpartition("~")
    if not sep or "~" + tail not in BOUND_SUFFIXES or base not in METRICS:
        return None
    return base



#: metric -> the names of its bounds' three histograms (value, lower end, upper end)
_BOUND_NAMES: dict[str, tuple[str, str, str]] = {}

@dataclass(frozen=True, slots=True)
class ScopeSnapshot:
    """One scope's state: counters and encoded histograms.

    Attributes:
        counters: counter name -> value (only counters that were incremented).
        histograms: metric name -> hdrh V2 base64 encoding (non-empty only).
        bounds: bound histogram name (``<metric>~x``, ``~lo``, ``~hi``: see
            the module's docstring) -> encoding; empty when every sample was exact.
    """

    counters: dict[str, int]
    histograms: dict[str, str]
    bounds: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"counters": {...}, "histograms": {...}}`` and ``"bounds"`` when not empty (fresh dicts)."""
        out: dict[str, Any] = {"counters": dict(self.counters), "histograms": dict(self.histograms)}
        if self.bounds:
            out["bounds"] = dict(self.bounds)
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "scope") -> ScopeSnapshot:
        """Inverse of :meth:`to_json`.

        Raises:
            ResultsError: the shape or a type is wrong (message names ``where``).
        """
        if not isinstance(data, Mapping):
            raise ResultsError(f"{where}: expected an object, got {type(data).__name__}")
        counters = data.get("counters", {})
        histograms = data.get("histograms", {})
        if not isinstance(counters, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in counters.items()
        ):
            raise ResultsError(f"{where}.counters: expected an object of integers")
        if not isinstance(histograms, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in histograms.items()
        ):
            raise ResultsError(f"{where}.histograms: expected an object of strings")
        for metric in histograms:
            if metric not in METRICS:
                raise ResultsError(f"{where}.histograms: unknown metric {metric!r}")
        bounds = data.get("bounds", {})
        if not isinstance(bounds, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and bound_metric(k) for k, v in bounds.items()
        ):
            raise ResultsError(f"{where}.bounds: expected an object of strings named <metric>~x|~lo|~hi")
        return cls(dict(counters), dict(histograms), dict(bounds))


def _scopes_from_json(data: object, where: str) -> dict[str, ScopeSnapshot]:
    if not isinstance(data, Mapping) or not isinstance(data.get("scopes"), Mapping):
        raise ResultsError(f"{where}: expected an object with a \"scopes\" object")
    return {
        str(name): ScopeSnapshot.from_json(s, f"{where}.scopes.{name}")
        for name, s in data["scopes"].items()
    }


def _histogram(scopes: Mapping[str, ScopeSnapshot], scope: str, metric: str) -> Histogram:
    s = scopes.get(scope)
    text = None if s is None else s.histograms.get(metric)
    if text is None:
        return Histogram(metric)
    return Histogram.decode(metric, text)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Cumulative state of a recorder (or of several, merged).

    Attributes:
        scopes: scope name (each scenario and "all") -> :class:`ScopeSnapshot`.
    """

    scopes: dict[str, ScopeSnapshot]

    def to_json(self) -> dict[str, Any]:
        """``{"scopes": {scope: {"counters": {...}, "histograms": {...}}}}``."""
        return {"scopes": {k: v.to_json() for k, v in self.scopes.items()}}

    @classmethod
    def from_json(cls, data: object) -> Snapshot:
        """Inverse of :meth:`to_json`.

        Raises:
            ResultsError: the shape is wrong.
        """
        return cls(_scopes_from_json(data, "snapshot"))

    @classmethod
    def merge(cls, snapshots: Iterable[Snapshot]) -> Snapshot:
        """Merge snapshots exactly: histograms decoded and added, counters summed.

        Returns:
            A new Snapshot over the union of the scopes; empty for no input.
        """
        hists: dict[str, dict[str, Histogram]] = {}
        bnds: dict[str, dict[str, Histogram]] = {}
        counters: dict[str, dict[str, int]] = {}
        for snap in snapshots:
            for name, scope in snap.scopes.items():
                hs = hists.setdefault(name, {})
                bs = bnds.setdefault(name, {})
                cs = counters.setdefault(name, {})
                for metric, text in scope.histograms.items():
                    h = hs.get(metric)
                    if h is None:
                        hs[metric] = Histogram.decode(metric, text)
                    else:
                        h.add(Histogram.decode(metric, text))
                for key, text in scope.bounds.items():
                    h = bs.get(key)
                    other = Histogram.decode(bound_metric(key) or key, text)
                    if h is None:
                        bs[key] = other
                    else:
                        h.add(other)
                for key, n in scope.counters.items():
                    cs[key] = cs.get(key, 0) + n
        return cls(
            {
                name: ScopeSnapshot(
                    counters[name],
                    {m: h.encode() for m, h in hs.items() if h.count},
                    {k: h.encode() for k, h in sorted(bnds[name].items()) if h.count},
                )
                for name, hs in hists.items()
            }
        )

    def histogram(self, scope: str, metric: str) -> Histogram:
        """The decoded histogram (an empty one when absent)."""
        return _histogram(self.scopes, scope, metric)

    def counter(self, scope: str, name: str) -> int:
        """A counter's value (0 when absent)."""
        s = self.scopes.get(scope)
        return 0 if s is None else s.counters.get(name, 0)


@dataclass(frozen=True, slots=True)
class IntervalSnapshot:
    """What was recorded between two :meth:`Recorder.take_interval` calls.

    Attributes:
        start_ns, end_ns: interval bounds in ns relative to the run start.
        scopes: as in :class:`Snapshot`, for this interval only.
    """

    start_ns: int
    end_ns: int
    scopes: dict[str, ScopeSnapshot]

    def to_json(self) -> dict[str, Any]:
        """``{"start_ns", "end_ns", "scopes": {...}}``."""
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "scopes": {k: v.to_json() for k, v in self.scopes.items()},
        }

    @classmethod
    def from_json(cls, data: object) -> IntervalSnapshot:
        """Inverse of :meth:`to_json`.

        Raises:
            ResultsError: the shape is wrong.
        """
        scopes = _scopes_from_json(data, "interval")
        assert isinstance(data, Mapping)
        start, end = data.get("start_ns"), data.get("end_ns")
        if not isinstance(start, int) or not isinstance(end, int):
            raise ResultsError("interval: start_ns and end_ns must be integers")
        return cls(start, end, scopes)

    def histogram(self, scope: str, metric: str) -> Histogram:
        """The decoded histogram (an empty one when absent)."""
        return _histogram(self.scopes, scope, metric)

    def counter(self, scope: str, name: str) -> int:
        """A counter's value in this interval (0 when absent)."""
        s = self.scopes.get(scope)
        return 0 if s is None else s.counters.get(name, 0)


def merge(snapshots: Iterable[Snapshot]) -> Snapshot:
    """Same as :meth:`Snapshot.merge`."""
    return Snapshot.merge(snapshots)


def _bump(counters: dict[str, int], key: str, n: int) -> None:
    counters[key] = counters.get(key, 0) + n


@dataclass(frozen=True, slots=True)
class DetachedInterval:
    """One interval's live histograms and counters, handed over by
    :meth:`Recorder.detach_interval` for :meth:`Recorder.fold`."""

    start_ns: int
    end_ns: int
    histograms: dict[str, dict[str, Histogram]]
    counters: dict[str, dict[str, int]]


class Recorder:
    """Histograms and counters per scope, cumulative and per interval.

    Synchronous, clock-free, not thread-safe: one recorder per process or
    trio run; worker processes ship :class:`Snapshot` objects to merge.
    """

    __slots__ = ("_scopes", "_cur", "_tot", "_ctr_tot", "_ctr_iv", "_ctr_folded", "_bnd")

    def __init__(self, scopes: Sequence[str]) -> None:
        """Create a recorder for these scenario scopes ("all" is implied).

        Raises:
            UsageError: a name is "all", repeated, empty, or unusable in a
                file name / log tag (contains ',', '/', '\\' or white space).
        """
        names = tuple(_check_scope_name(s) for s in scopes)
        if len(set(names)) != len(names):
            raise UsageError(f"scope names must be unique, got {list(names)}")
        self._scopes: tuple[str, ...] = names + (ALL,)
        # _cur: values since the last take_interval (in "all": global ones only);
        # _tot: folded cumulative values (in "all": everything).
        self._cur: dict[str, dict[str, Histogram]] = {s: {} for s in self._scopes}
        self._tot: dict[str, dict[str, Histogram]] = {s: {} for s in self._scopes}
        self._ctr_tot: dict[str, dict[str, int]] = {s: {} for s in self._scopes}
        self._ctr_iv: dict[str, dict[str, int]] = {s: {} for s in self._scopes}
        # _ctr_folded: the counters of the folded intervals only (fold adds each interval's),
        # so that folded_snapshot pairs them with _tot: both as of the last detach.
        self._ctr_folded: dict[str, dict[str, int]] = {s: {} for s in self._scopes}
        # _bnd: the bound histograms (cumulative only), per scope and in "all"
        self._bnd: dict[str, dict[str, Histogram]] = {s: {} for s in self._scopes}

    @property
    def scopes(self) -> tuple[str, ...]:
        """The scenario scopes followed by "all"."""
        return self._scopes

    def _record_into(self, scope: str, metric: str, value: int) -> None:
        hists = self._cur[scope]
        h = hists.get(metric)
        if h is None:
            h = hists[metric] = Histogram(metric)  # UsageError for an unknown metric
        if not h.record(value):
            key = "out_of_range." + metric
            _bump(self._ctr_tot[scope], key, 1)
            _bump(self._ctr_iv[scope], key, 1)
            if scope != ALL:
                _bump(self._ctr_tot[ALL], key, 1)
                _bump(self._ctr_iv[ALL], key, 1)

    def _check(self, scope: str) -> None:
        if scope not in self._cur or scope == ALL:
            raise UsageError(
                f"unknown scope {scope!r}: expected one of {list(self._scopes[:-1])}"
                + ' (use record_global/incr_global for "all")' * (scope == ALL)
            )

    def record(self, scope: str, metric: str, value: int) -> None:
        """Record ``value`` (recorded unit, see ``METRICS``) in ``scope`` and "all".

        Out-of-range values increment ``out_of_range.<metric>`` instead.

        Raises:
            UsageError: unknown scope (or "all") or unknown metric.
        """
        if scope not in self._cur or scope == ALL:
            self._check(scope)
        self._record_into(scope, metric, value)

    def sink(self, scope: str) -> GapSink:
        """A function ``(metric, value, n=1)`` that records ``value`` ``n`` times like
        :meth:`record` into ``scope`` and "all" (the meter's :data:`GapSink`), with the
        scope checked once here instead of per
        value (the per-token path: a stream's meter records each gap as it is
        measured, into the interval open at that moment).

        Raises:
            UsageError: unknown scope (or "all") now; unknown metric when called.
        """
        self._check(scope)

        def record(metric: str, value: int, n: int = 1, /) -> None:
            hists = self._cur[scope]
            h = hists.get(metric)
            if h is None:
                h = hists[metric] = Histogram(metric)  # UsageError for an unknown metric
            if not (h.record(value) if n == 1 else h.record_n(value, n)):
                key = "out_of_range." + metric
                for counters in (self._ctr_tot[scope], self._ctr_iv[scope], self._ctr_tot[ALL],
                                 self._ctr_iv[ALL]):
                    _bump(counters, key, n)

        return record

    def record_bound(self, scope: str, metric: str, value: int, below: int, above: int) -> None:
        """Keep the bounds of one sample of ``metric`` (already recorded with
        :meth:`record` or a sink) whose true value lies in ``[value - below,
        value + above]`` (ns; a lower bound under 0 counts as 0), in ``scope``
        and "all". A value the metric's histogram rejects (out of range) is not kept.

        Raises:
            UsageError: unknown scope (or "all") or unknown metric.
        """
        if scope not in self._cur or scope == ALL:
            self._check(scope)
        self._bound_into(scope, metric, value, below, above, 1)

    def _bound_into(self, scope: str, metric: str, value: int, below: int, above: int, n: int) -> None:
        names = _BOUND_NAMES.get(metric)
        if names is None:
            names = _BOUND_NAMES[metric] = (metric + "~x", metric + "~lo", metric + "~hi")
        kx, klo, khi = names
        lo = value - below
        if lo < 0:
            lo = 0
        for s in (scope, ALL):
            hists = self._bnd[s]
            x = hists.get(kx)
            if x is None:
                x = hists[kx] = Histogram(metric)  # UsageError for an unknown metric
                hists[klo] = Histogram(metric)
                hists[khi] = Histogram(metric)
            if not x.record_n(value, n):
                return
            hists[klo].record_n(lo, n)
            hi = hists[khi]
            if not hi.record_n(value + above, n):
                hi.record_n(x.spec.highest, n)

    def bound_sink(self, scope: str) -> Callable[[str, int, int, int, int], None]:
        """A function ``(metric, value, below, above, n)`` that does :meth:`record_bound`
        ``n`` times into ``scope`` and "all" (``n`` samples alike: the meter's run of
        events that shared a read), the scope checked once here (the meter's
        ``BoundSink``).

        Raises:
            UsageError: unknown scope (or "all") now; unknown metric when called.
        """
        self._check(scope)

        def record(metric: str, value: int, below: int, above: int, n: int) -> None:
            self._bound_into(scope, metric, value, below, above, n)

        return record

    def many_sink(self, scope: str, metric: str) -> Callable[[Sequence[int], int], None]:
        """A function ``(values, zeros)`` that does :meth:`record_many` of ``metric``
        into ``scope`` and "all", and records ``zeros`` values of 0 with one counter
        update (the meter's ``read_lags``: one call per batch of reads).

        Raises:
            UsageError: unknown scope (or "all") or unknown metric, now.
        """
        self._check(scope)
        if metric not in METRICS:
            raise UsageError(f"unknown metric {metric!r}: expected one of {', '.join(METRICS)}")

        def record(values: Sequence[int], zeros: int = 0) -> None:
            self.record_many(scope, metric, values)
            if zeros > 0:
                hists = self._cur[scope]
                h = hists.get(metric)
                if h is None:
                    h = hists[metric] = Histogram(metric)
                h.record_n(0, zeros)

        return record

    def record_many(self, scope: str, metric: str, values: Sequence[int]) -> None:
        """Record several values of one metric in ``scope`` and "all" (as
        :meth:`record`, one lookup for all of them).

        Raises:
            UsageError: unknown scope (or "all") or unknown metric.
        """
        if not values:
            return
        if scope not in self._cur or scope == ALL:
            self._check(scope)
        hists = self._cur[scope]
        h = hists.get(metric)
        if h is None:
            h = hists[metric] = Histogram(metric)
        bad = h.record_many(values)
        if bad:
            key = "out_of_range." + metric
            for counters in (self._ctr_tot[scope], self._ctr_iv[scope], self._ctr_tot[ALL], self._ctr_iv[ALL]):
                _bump(counters, key, bad)

    def record_global(self, metric: str, value: int) -> None:
        """Record a value that belongs to no scenario (loop_lag, ...) in "all" only.

        Raises:
            UsageError: unknown metric.
        """
        self._record_into(ALL, metric, value)

    def incr(self, scope: str, counter: str, n: int = 1) -> None:
        """Add ``n`` to ``counter`` in ``scope`` and in "all".

        Raises:
            UsageError: unknown scope (or "all").
        """
        if scope not in self._cur or scope == ALL:
            self._check(scope)
        _bump(self._ctr_tot[scope], counter, n)
        _bump(self._ctr_iv[scope], counter, n)
        _bump(self._ctr_tot[ALL], counter, n)
        _bump(self._ctr_iv[ALL], counter, n)

    def incr_global(self, counter: str, n: int = 1) -> None:
        """Add ``n`` to ``counter`` in "all" only."""
        _bump(self._ctr_tot[ALL], counter, n)
        _bump(self._ctr_iv[ALL], counter, n)

    def _current_all(self) -> dict[str, Histogram]:
        """The not-yet-folded part of "all": every scope's current interval."""
        out: dict[str, Histogram] = {}
        for scope in self._scopes:
            for metric, h in self._cur[scope].items():
                if h.count:
                    acc = out.get(metric)
                    if acc is None:
                        out[metric] = acc = Histogram(metric)
                    acc.add(h)
        return out

    def snapshot(self) -> Snapshot:
        """A deep copy of the cumulative state (all intervals, folded or not).

        Returns:
            Snapshot with every scope (scenarios and "all"), possibly empty;
            only non-empty histograms are encoded.
        """
        scopes: dict[str, ScopeSnapshot] = {}
        for scope in self._scopes:
            tot = self._tot[scope]
            cur = self._current_all() if scope == ALL else self._cur[scope]
            encoded: dict[str, str] = {}
            for metric in tot.keys() | cur.keys():
                t, c = tot.get(metric), cur.get(metric)
                if t is not None and c is not None and c.count and t.count:
                    h = t.copy()
                    h.add(c)
                else:
                    h = t if t is not None and t.count else c  # type: ignore[assignment]
                if h is not None and h.count:
                    encoded[metric] = h.encode()
            bounds = {k: h.encode() for k, h in sorted(self._bnd[scope].items()) if h.count}
            scopes[scope] = ScopeSnapshot(dict(self._ctr_tot[scope]), dict(sorted(encoded.items())), bounds)
        return Snapshot(scopes)

    def detach_interval(self, start_ns: int, end_ns: int) -> DetachedInterval:
        """Hand over the current interval and start a new one: O(scopes), no encoding.

        This is the only part of closing an interval that must run where
        ``record`` runs (the event loop); :meth:`fold` does the rest and may
        run in another thread while ``record`` goes on (the two touch disjoint
        state). Never run two folds, or a fold and :meth:`snapshot`, at once.
        """
        d = DetachedInterval(start_ns, end_ns, self._cur, self._ctr_iv)
        self._cur = {s: {} for s in self._scopes}
        self._ctr_iv = {s: {} for s in self._scopes}
        return d

    def fold(self, d: DetachedInterval) -> IntervalSnapshot:
        """Encode a detached interval and add it into the cumulative totals.

        Returns:
            IntervalSnapshot with every scope; only non-empty histograms.
        """
        cur_by_scope = d.histograms
        cur_all: dict[str, Histogram] = {}
        for scope in self._scopes:
            for metric, h in cur_by_scope[scope].items():
                if h.count:
                    acc = cur_all.get(metric)
                    if acc is None:
                        cur_all[metric] = acc = Histogram(metric)
                    acc.add(h)
        scopes: dict[str, ScopeSnapshot] = {}
        for scope in self._scopes:
            cur = cur_all if scope == ALL else cur_by_scope[scope]
            tot = self._tot[scope]
            encoded: dict[str, str] = {}
            for metric in sorted(cur):
                h = cur[metric]
                if not h.count:
                    continue
                encoded[metric] = h.encode()
                t = tot.get(metric)
                if t is None:
                    tot[metric] = t = Histogram(metric)
                t.add(h)
            folded = self._ctr_folded[scope]
            for key, n in d.counters[scope].items():
                _bump(folded, key, n)
            scopes[scope] = ScopeSnapshot(d.counters[scope], encoded)
        return IntervalSnapshot(d.start_ns, d.end_ns, scopes)

    def folded_snapshot(self) -> Snapshot:
        """The cumulative state up to the last folded interval, counters and
        histograms alike: for checkpoints taken beside the event loop, in the
        same thread as :meth:`fold`, while ``record`` and ``incr`` go on.

        Both are as of the instant the last folded interval was detached
        (:meth:`detach_interval`, on the loop), so each histogram's count
        agrees with the counters recorded with it (``e2e`` and ``completed``:
        one stream's record is one synchronous step on the loop), at no cost
        to the loop: :meth:`fold` adds each interval's counters into a folded
        total in the folding thread. What was recorded since that detach (at
        most about one interval) is left out of both; :meth:`snapshot` has it.
        The bound histograms (``ScopeSnapshot.bounds``) are recorded on the loop
        and never folded: they are left out here (a checkpoint has no error
        bounds) and are in :meth:`snapshot`.

        Returns:
            Snapshot with every scope; only non-empty histograms.
        """
        scopes: dict[str, ScopeSnapshot] = {}
        for scope in self._scopes:
            encoded = {m: h.encode() for m, h in sorted(self._tot[scope].items()) if h.count}
            scopes[scope] = ScopeSnapshot(dict(self._ctr_folded[scope]), encoded)
        return Snapshot(scopes)

    def take_interval(self, start_ns: int, end_ns: int) -> IntervalSnapshot:
        """Return what was recorded since the last call, then start a new interval.

        Args:
            start_ns, end_ns: the interval's bounds in ns relative to the run
                start (the caller's clock; stored, not checked).

        Returns:
            IntervalSnapshot with every scope; only non-empty histograms.
        """
        return self.fold(self.detach_interval(start_ns, end_ns))
