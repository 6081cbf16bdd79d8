"""Bursts re-judged after the run against what the origin itself did.

Role: the client flags a completed stream ``proxy_buffering_suspected`` when it
arrived as one burst that its own lag does not explain (``hopbench._meter.measure``,
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
the client's own flag. :func:`burst_warnings` is the one rule for the run's
warning (summary.json, the terminal, report.html).

Invariants: pure (no clock, no trio), but for :func:`read_flagged` (the one reader
of a file: the run's streams.jsonl) and :func:`join_bursts` on top of it. Times
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

__all__ = ["PACED_GAP_MIN_NS", "BURST_COUNTERS", "SUSPECTED", "FlaggedBurst", "burst_from_line",
           "judge_burst", "rejudge", "record_rejudged", "burst_warnings", "BURST_LINE_MARK", "read_flagged",
           "join_bursts", "truth_by_id"]

PACED_GAP_MIN_NS: Final = 1_000_000
"""The shortest gap between a paced origin's events the buffering flag assumes, ns:
1 ms, 1,000 events/s for one stream (faster than LLM decoding per stream). A burst
of n events held for less than (n - 1) x this was not a paced answer held back."""

SUSPECTED: Final = "proxy_buffering_suspected"
"""The client's flag (``hopbench._meter.measure``)."""

BURST_COUNTERS: Final = ("origin_burst", "proxy_buffering_confirmed", "burst_unexplained", "burst_unmatched")
"""Counters :func:`record_rejudged` writes per scope (docs/results.md, counters)."""

BURST_LINE_MARK: Final = b'"burst":"proxy_buffering_suspected"'
"""How a flagged stream's streams.jsonl line reads (compact JSON, ``_run``): a
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


def record_rejudged(rec: _Incr, judged: Mapping[str, Mapping[str, int]], scopes: Iterable[str]) -> None:
    """Add :func:`rejudge`'s counts to a recorder (``Recorder.incr``), per scope.

    Args:
        rec: the run's measured recorder (or one merged into its totals).
        judged: what :func:`rejudge` returned.
        scopes: the recorder's scopes: a count of another scope (a line of
            another run's scenario) is left out.
    """
    known = set(scopes)
    for scope, counts in judged.items():
        if scope in known:
            for name, n in counts.items():
                rec.incr(scope, name, n)


def burst_warnings(counters: Mapping[str, int], *, embedded: bool) -> list[str]:
    """The run's burst warnings from its ``all`` counters (docs/results.md, "Warnings").

    Args:
        counters: the run's counters (``completed``, ``proxy_buffering_suspected``
            and the :data:`BURST_COUNTERS`).
        embedded: the target was the embedded emulator: no proxy can be in
            between, so no warning names one.

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


def join_bursts(rec: _Rec, streams_path: Path, truths: Callable[[], Iterable[Mapping[str, Any]]], warmup_ns: int, *,
                proxy_possible: bool, record: str) -> list[str]:
    """Re-judge a run's flagged streams against the origin's record; count the verdicts in ``rec``.

    Args:
        rec: the run's measured recorder (``Recorder``: ``incr`` and ``scopes``).
        streams_path: the run's streams.jsonl (the flagged lines carry ``burst`` and
            ``burst_held_ns``).
        truths: reads the origin's record lines (only this run's); called only
            when a stream was flagged.
        warmup_ns: the run's warm-up, ns (warm-up streams are not re-judged).
        proxy_possible: False for the embedded emulator (see :func:`judge_burst`).
        record: the record's name, for the warning.

    Returns:
        warnings for summary.json: the flagged streams the record does not hold,
        possibly none. Never raises.
    """
    bursts = read_flagged(streams_path, warmup_ns)
    if not bursts:
        return []
    judged = rejudge(bursts, truths(), proxy_possible=proxy_possible)
    record_rejudged(rec, judged, rec.scopes)
    missing = sum(c["burst_unmatched"] for c in judged.values())
    if not missing:
        return []
    return [f"bursts: {missing} of {len(bursts)} streams flagged proxy_buffering_suspected have no line with their "
            f"request id in {record}: they stay suspected (burst_unmatched)"]
