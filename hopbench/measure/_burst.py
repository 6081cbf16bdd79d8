"""Bursts re-judged after the run against what the origin itself did.

Role: the client flags a completed stream ``proxy_buffering_suspected`` when it
arrived as one burst that its own lag does not explain (``hopbench.measure._rules.measure``,
docs/results.md). A client alone cannot tell a buffering proxy from an origin that
wrote the answer at once or late. Where the origin's own record exists (the
embedded emulator's ground_truth.jsonl, or the ``[upstream]`` emulator's behind a
gateway; docs/emulator.md), this module judges each flagged stream again, after
the run, by its request id:

- the origin wrote the stream's content events as a burst itself (the span from
  its first to its last content event under (its events - 1) x
  :data:`PACED_GAP_MIN_NS`), or its own lateness (``queue_ns`` + ``lag_max_ns``)
  covers the hold (the client's hold less that lateness is under the same
  (output events - 1) x :data:`PACED_GAP_MIN_NS` the client's flag needs):
  ``origin_burst``, not proxy buffering;
- otherwise the origin wrote the events paced and the client still got them in
  one burst, with no client lag: ``proxy_buffering_confirmed`` when a proxy can
  be in between (a gateway), ``burst_unexplained`` when none can (the embedded
  emulator: the client talks straight to it);
- a flagged stream without a line in the record: ``burst_unmatched`` (it stays
  only suspected).

Each re-judged counter is a subset of ``proxy_buffering_suspected``, which keeps
the client's own flag, but for one case: where no proxy can be in between (the
embedded emulator, which hopbench talks to directly) a stream the record judges
``origin_burst`` leaves ``proxy_buffering_suspected`` (``withdraw_origin``): the
flag names a proxy, there is none, and the origin's record explains the burst.
This is the false flag of a client-saturated machine (issue 36: 256 fast streams
on the embedded emulator, 1 to 5 flagged in one run of three): the client's CPU
use starves the emulator's process on the same cores, which then writes each
answer at once after a stall (its record: ``lag_max_ns`` up to 0.75 s, the
events' gaps summing to 25-130 us), while the client read them on time. No
client-side rule can tell that from a buffering proxy (the client's own lag,
``client_lagged``, was small); the origin's record can. :func:`burst_warnings` is the one rule for the run's
warning (summary.json, the terminal, report.html).

The flagged streams travel in memory, not through streams.jsonl: each load
generator (``hopbench.engine._runner.LoadRunner.flagged``) keeps its measured flagged
streams in a :class:`FlaggedLog` (at most :data:`FLAGGED_MAX`; only flagged
streams, so ``run.stream_log = false`` loses nothing); a worker ships its log to
the driver with its final message (``FlaggedLog.to_json``), as it ships its client
cancels; the driver joins them once against the emulator's whole record. A/B arms
are joined per arm, each against its own emulator's record. A flagged stream that
cannot be re-judged (past the bound, a worker that died before its final message,
an arm whose target is a URL) is named in a note (:func:`not_rejudged`), never
left silently suspected.

Invariants: pure (no clock, no trio, no file), but for :func:`read_flagged` (the
one reader of a file: a run's streams.jsonl, for a look after the run). Times
are integer ns; the origin's are durations on its own clock, the client's hold a
duration on the client's: only durations are compared, never stamps.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from .._format import plural

__all__ = ["PACED_GAP_MIN_NS", "BURST_COUNTERS", "SUSPECTED", "FLAGGED_MAX", "FlaggedBurst", "FlaggedLog",
           "burst_from_line", "judge_burst", "rejudge", "record_rejudged", "burst_warnings", "BURST_LINE_MARK",
           "read_flagged", "join_bursts", "not_rejudged", "truth_by_id"]

PACED_GAP_MIN_NS: Final = 1_000_000
"""The shortest gap between a paced origin's events the buffering flag assumes, ns:
1 ms, 1,000 events/s for one stream (faster than LLM decoding per stream). A burst
of n events held for less than (n - 1) x this was not a paced answer held back."""

SUSPECTED: Final = "proxy_buffering_suspected"
"""The client's flag (``hopbench.measure._rules.measure``)."""

BURST_COUNTERS: Final = ("origin_burst", "proxy_buffering_confirmed", "burst_unexplained", "burst_unmatched")
"""Counters :func:`record_rejudged` writes per scope (docs/results/counters.md, "Counters")."""

FLAGGED_MAX: Final = 100_000
"""The most flagged streams one load generator keeps for the re-judging: about
160 bytes each in memory (16 MB at the bound) and 35 in a worker's final message
(3.5 MB), measured with request ids like ``12-34567``. Those past it are counted
per scope (``FlaggedLog.dropped``) and named in a note (:func:`join_bursts`)."""

BURST_LINE_MARK: Final = b'"burst":"proxy_buffering_suspected"'
"""How a flagged stream's streams.jsonl line reads (compact JSON, ``driver._single``): a
reader looks for it before parsing a line."""


class _Incr(Protocol):
    def incr(self, scope: str, counter: str, n: int = 1) -> None: ...


class _Rec(_Incr, Protocol):
    @property
    def scopes(self) -> Sequence[str]: ...


@dataclass(frozen=True, slots=True)
class FlaggedBurst:
    """One stream the client flagged ``proxy_buffering_suspected``.

    Attributes:
        request_id: its ``x-hopbench-request-id``.
        scope: its scope (scenario or arm name).
        held_ns: how long the client saw the burst held (``_meter``: from the
            response head, or from the send when the head came with the burst, to
            its arrival in the client's socket), ns.
        output_events: its output events as the client counted them (>= 4).
    """

    request_id: str
    scope: str
    held_ns: int
    output_events: int

    def to_json(self) -> list[Any]:
        """``[request_id, scope, held_ns, output_events]`` (a worker's final message)."""
        return [self.request_id, self.scope, self.held_ns, self.output_events]

    @staticmethod
    def from_json(doc: Any) -> FlaggedBurst | None:
        """The inverse of :meth:`to_json`; None for anything else (never raises)."""
        if not (isinstance(doc, list) and len(doc) == 4):
            return None
        rid, scope, held, n = doc
        if not (isinstance(rid, str) and isinstance(scope, str) and isinstance(held, int) and isinstance(n, int)):
            return None
        return FlaggedBurst(rid, scope, held, n)


class FlaggedLog:
    """A load generator's measured flagged streams, bounded (mutable; not thread-safe:
    the runner's event loop adds, the caller reads after the run).

    Args:
        limit: the most bursts kept (:data:`FLAGGED_MAX`); later ones are only
            counted, per scope, in ``dropped``.

    Attributes:
        bursts: list of FlaggedBurst in the order the streams ended (at most ``limit``
            from one generator; a merge of several holds each one's).
        dropped: scope -> flagged streams not kept (past ``limit``).
    """

    __slots__ = ("limit", "bursts", "dropped")

    def __init__(self, limit: int = FLAGGED_MAX) -> None:
        self.limit = limit
        self.bursts: list[FlaggedBurst] = []
        self.dropped: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.bursts) + sum(self.dropped.values())

    def add(self, b: FlaggedBurst) -> None:
        """Keep ``b``, or count it in ``dropped`` when ``limit`` bursts are kept."""
        if len(self.bursts) < self.limit:
            self.bursts.append(b)
        else:
            self.dropped[b.scope] += 1

    def merge(self, other: FlaggedLog) -> None:
        """Add another generator's log (a worker's): its bursts and its drops, all kept."""
        self.bursts.extend(other.bursts)
        self.dropped.update(other.dropped)

    def only(self, scope: str) -> FlaggedLog:
        """A new log of this one's bursts (and drops) of ``scope`` (an A/B arm)."""
        out = FlaggedLog(self.limit)
        out.bursts = [b for b in self.bursts if b.scope == scope]
        if self.dropped.get(scope):
            out.dropped[scope] = self.dropped[scope]
        return out

    def to_json(self) -> dict[str, Any]:
        """``{"bursts": [FlaggedBurst.to_json(), ...], "dropped": {scope: n}}``."""
        return {"bursts": [b.to_json() for b in self.bursts], "dropped": dict(self.dropped)}

    @staticmethod
    def from_json(doc: Any) -> FlaggedLog:
        """The inverse of :meth:`to_json`; a malformed entry (or document) is left
        out, never raised on; the limit is not applied (the sender applied its own)."""
        out = FlaggedLog()
        if not isinstance(doc, dict):
            return out
        bursts = doc.get("bursts")
        for x in bursts if isinstance(bursts, list) else ():
            b = FlaggedBurst.from_json(x)
            if b is not None:
                out.bursts.append(b)
        dropped = doc.get("dropped")
        for scope, n in (dropped.items() if isinstance(dropped, dict) else ()):
            if isinstance(scope, str) and isinstance(n, int) and n > 0:
                out.dropped[scope] += n
        return out


def burst_from_line(line: Mapping[str, Any], warmup_ns: int = 0) -> FlaggedBurst | None:
    """A streams.jsonl line (docs/results.md) as a FlaggedBurst.

    Args:
        line: one parsed line.
        warmup_ns: streams that started before this offset (ns from the run's
            start) are warm-up streams: not counted, not re-judged.

    Returns:
        The burst, or None when the line is not a measured flagged stream (or
        lacks a field). Never raises.
    """
    if line.get("burst") != SUSPECTED:
        return None
    rid, scope, held, n = line.get("id"), line.get("scenario"), line.get("burst_held_ns"), line.get("output_events")
    start = line.get("start_ns")
    if isinstance(start, int) and start < warmup_ns:
        return None
    scope = line.get("arm", scope)  # an A/B arm's stream counts in its arm's scope
    if not (isinstance(rid, str) and isinstance(scope, str) and isinstance(held, int) and isinstance(n, int)):
        return None
    return FlaggedBurst(rid, scope, held, n)


def judge_burst(b: FlaggedBurst, truth: Mapping[str, Any] | None, *, proxy_possible: bool) -> str:
    """The re-judged counter of one flagged stream.

    Args:
        b: the client's flagged stream.
        truth: the origin's ground-truth line for it (``ttft_ns``, ``gaps_ns``,
            ``queue_ns``, ``lag_max_ns``; docs/emulator.md), None without one.
        proxy_possible: False when the client talked straight to the origin
            (the embedded emulator): nothing between them can buffer.

    Returns:
        One of :data:`BURST_COUNTERS` (see the module's docstring for the rule).
        Never raises on malformed lines (a field of the wrong type reads as absent).
    """
    if truth is None:
        return "burst_unmatched"
    gaps = truth.get("gaps_ns")
    gaps = [g for g in gaps if isinstance(g, int)] if isinstance(gaps, list) else []
    events = len(gaps) + 1 if isinstance(truth.get("ttft_ns"), int) else 0
    if events <= 1 or sum(gaps) < (events - 1) * PACED_GAP_MIN_NS:
        return "origin_burst"  # the origin wrote them as one burst itself
    late = sum(v for v in (truth.get("queue_ns"), truth.get("lag_max_ns")) if isinstance(v, int) and v > 0)
    if b.held_ns - late < (b.output_events - 1) * PACED_GAP_MIN_NS:
        return "origin_burst"  # the origin's own lateness covers the hold
    return "proxy_buffering_confirmed" if proxy_possible else "burst_unexplained"


def truth_by_id(truths: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """An upstream record's lines (ground_truth.jsonl: dicts) by request id: the
    ``request_id`` header's id, else the body marker's ``marker_id`` (a gateway that
    drops unknown headers); the last line of an id wins (a gateway that retried: it
    wrote the answer the client got). Lines with neither id are left out; never raises."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for t in truths:
        rid = t.get("request_id")
        if not isinstance(rid, str):
            rid = t.get("marker_id")
        if isinstance(rid, str):
            by_id[rid] = t
    return by_id


def rejudge(bursts: Iterable[FlaggedBurst], truths: Iterable[Mapping[str, Any]], *,
            proxy_possible: bool) -> dict[str, Counter[str]]:
    """Judge every flagged stream against the origin's record, by request id.

    Args:
        bursts: the client's flagged streams.
        truths: the record's lines (dicts); a line's id is its ``request_id``,
            else its ``marker_id`` (a gateway that drops unknown headers); when one
            id has several lines (a gateway that retried) the last one counts: it
            wrote the answer the client got.
        proxy_possible: see :func:`judge_burst`.

    Returns:
        scope -> Counter of :data:`BURST_COUNTERS` names (only those counted).
        Never raises on malformed lines: they do not match.
    """
    by_id = truth_by_id(truths)
    out: dict[str, Counter[str]] = {}
    for b in bursts:
        out.setdefault(b.scope, Counter())[judge_burst(b, by_id.get(b.request_id), proxy_possible=proxy_possible)] += 1
    return out


def record_rejudged(rec: _Incr, judged: Mapping[str, Mapping[str, int]], scopes: Iterable[str], *,
                    withdraw_origin: bool = False) -> None:
    """Add :func:`rejudge`'s counts to a recorder (``Recorder.incr``), per scope.

    Args:
        rec: the run's measured recorder (or one merged into its totals).
        judged: what :func:`rejudge` returned.
        scopes: the recorder's scopes: a count of another scope (a line of
            another run's scenario) is left out.
        withdraw_origin: no proxy can be in between (the embedded emulator):
            the ``origin_burst`` streams are also taken out of
            ``proxy_buffering_suspected`` (see the module's docstring).
    """
    known = set(scopes)
    for scope, counts in judged.items():
        if scope in known:
            for name, n in counts.items():
                rec.incr(scope, name, n)
                if withdraw_origin and name == "origin_burst" and n:
                    rec.incr(scope, SUSPECTED, -n)


def burst_warnings(counters: Mapping[str, int], *, embedded: bool) -> list[str]:
    """The run's burst warnings from its ``all`` counters (docs/results/counters.md, "Warnings").

    Args:
        counters: the run's counters (``completed``, ``proxy_buffering_suspected``
            and the :data:`BURST_COUNTERS`).
        embedded: the target was the embedded emulator: no proxy can be in
            between, so no warning names one (and its ``origin_burst`` streams
            are no longer counted in ``proxy_buffering_suspected``: they are
            added back here).

    Returns:
        At most one warning, when more than half of the completed streams share
        the verdict: "proxy buffering confirmed by the upstream's record: ...",
        "proxy buffering suspected: ..." (the flagged streams no record
        explained), or "origin_burst: ..." (the origin's own bursts; with the
        embedded target every flagged stream, whether or not its record was
        joined).
    """
    done = counters.get("completed", 0)
    suspected = counters.get(SUSPECTED, 0)
    origin = counters.get("origin_burst", 0)
    confirmed = counters.get("proxy_buffering_confirmed", 0)
    record = "the upstream's record"
    if embedded:
        # the origin_burst streams left proxy_buffering_suspected (record_rejudged's withdraw_origin)
        suspected += origin
    if not done or not suspected:
        return []
    if embedded:
        if suspected * 2 <= done:
            return []
        return [f"origin_burst: {suspected} of {done} streams arrived as one burst from the embedded emulator, "
                "which hopbench talks to directly (no proxy in between)"
                + (f": {origin} of them the emulator itself wrote at once or late (ground_truth.jsonl: gaps_ns, "
                   "queue_ns, lag_max_ns)" if origin else ": a busy origin, see its ground_truth.jsonl "
                   "(queue_ns, lag_max_ns)")]
    if confirmed * 2 > done:
        return [f"proxy buffering confirmed by {record}: {confirmed} of {done} streams arrived as one burst "
                "although the upstream wrote their events paced"]
    unexplained = suspected - origin - counters.get("burst_unexplained", 0)
    if unexplained * 2 > done:
        return [f"proxy buffering suspected: {unexplained} of {done} streams arrived as one burst "
                "(TTFT close to E2E)" + (f"; {confirmed} confirmed by {record}" if confirmed else "")]
    if origin * 2 > done:
        return [f"origin_burst: {origin} of {done} streams arrived as one burst because the origin itself wrote "
                f"them at once or late ({record}: gaps_ns, queue_ns, lag_max_ns): not a buffering proxy"]
    return []


def read_flagged(path: Path, warmup_ns: int = 0) -> list[FlaggedBurst]:
    """The measured flagged streams of a run's streams.jsonl (:func:`burst_from_line`).

    Only lines holding :data:`BURST_LINE_MARK` are parsed (a flagged stream is rare:
    the file's other lines cost a substring search). A missing file, or a line
    that is not JSON (cut by a killed process), reads as no bursts. Never raises.
    """
    out: list[FlaggedBurst] = []
    try:
        with path.open("rb") as f:
            for raw in f:
                if BURST_LINE_MARK not in raw:
                    continue
                try:
                    doc = json.loads(raw)
                except ValueError:
                    continue
                b = burst_from_line(doc, warmup_ns) if isinstance(doc, dict) else None
                if b is not None:
                    out.append(b)
    except OSError:
        return []
    return out


def not_rejudged(n: int, why: str) -> str:
    """The note for flagged streams that could not be re-judged (docs/results/counters.md, "Warnings").

    Args:
        n: how many (> 0).
        why: the reason, a clause ("its target is a URL: ...").

    Returns:
        "bursts: N streams flagged proxy_buffering_suspected were not re-judged: WHY;
        they stay suspected".
    """
    return (f"bursts: {n} streams flagged proxy_buffering_suspected were not re-judged: {why}; "
            "they stay suspected")


def join_bursts(rec: _Rec, flagged: FlaggedLog, truths: Callable[[], Iterable[Mapping[str, Any]]], *,
                proxy_possible: bool, record: str) -> list[str]:
    """Re-judge a run's flagged streams against the origin's record; count the verdicts in ``rec``.

    Args:
        rec: the run's measured recorder (``Recorder``: ``incr`` and ``scopes``), or
            one merged into the run's totals (``--workers``).
        flagged: the measured flagged streams (``LoadRunner.flagged``, or the
            workers' logs merged); warm-up streams are not in it.
        truths: reads the origin's record lines (only this run's); called only
            when a stream was flagged.
        proxy_possible: False for the embedded emulator (see :func:`judge_burst`):
            then the ``origin_burst`` streams leave ``proxy_buffering_suspected``
            (:func:`record_rejudged`'s ``withdraw_origin``).
        record: the record's name, for the notes.

    Returns:
        notes for summary.json's warnings: the flagged streams the record does not
        hold (``burst_unmatched``), those past the log's bound (:func:`not_rejudged`),
        possibly none. Never raises.
    """
    notes: list[str] = []
    if flagged.bursts:
        judged = rejudge(flagged.bursts, truths(), proxy_possible=proxy_possible)
        record_rejudged(rec, judged, rec.scopes, withdraw_origin=not proxy_possible)
        missing = sum(c["burst_unmatched"] for c in judged.values())
        if missing:
            notes.append(f"bursts: {missing} of {len(flagged.bursts)} {plural(len(flagged.bursts), 'stream')} flagged proxy_buffering_suspected have no "
                         f"line with their request id in {record}: they stay suspected (burst_unmatched)")
    dropped = sum(flagged.dropped.values())
    if dropped:
        notes.append(not_rejudged(dropped, f"a load generator keeps at most {flagged.limit:,} flagged streams for "
                                           f"the join with {record}, and these came after"))
    return notes
