"""Time series for report.html in bounded memory, whatever the run's length.

Role: read intervals.hlog and timeline.jsonl line by line and fold them into at
most ``max_points`` time buckets (issue 16 item 2). A bucket is a span of
``bucket_ns`` from the run start; every interval whose start falls in it is
folded in:

* intervals.hlog: the interval histograms of one tag are *added* (hdrh's exact
  ``add``), and the bucket's percentiles are taken from that sum when the next
  bucket begins; then the histogram is dropped. So a plotted percentile is the
  exact percentile of the values recorded in its bucket (not a mean of
  per-interval percentiles), and memory holds a few histograms per tag, not one
  per interval (a decoded 1 ns .. 1 h histogram is 270 KB: one hour of 1 s
  intervals held 3.8 GB before).
* timeline.jsonl: counts (``started``, ``completed``, ``output_tokens``) are
  summed, time-weighted means (``in_flight_mean``, ``<phase>_mean``, ``cpu``)
  are weighted by each interval's real length, point-in-time figures
  (``*_now``, ``started_total``) keep the bucket's last value, and ``cpu_max``
  the largest ``cpu`` in it. A folded record has the shape of a timeline line,
  so rates (count / (end - start)) read as before.

A run of up to ``max_points`` intervals keeps one point per interval (the bucket
is then shorter than an interval). The summary's percentiles never come from
here: they come from summary.json's exact whole-run histograms.

Invariants: one pass over each file to find the run's span, one to fold;
memory O(tags + max_points), independent of the file's length. A malformed line
raises ``ResultsError`` naming file:line, except a last line cut short by a
crash mid-write, which is ignored (as ``read_hlog`` does).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ResultsError
from ..measure._hdr import Histogram
from ..measure._metrics import METRICS
from ..measure._recorder import ALL, Snapshot
from .._textfile import decode_line, iter_lines
from .._units import NS_PER_S

__all__ = ["MAX_POINTS", "SERIES_PERCENTILES", "RunData", "SeriesPoint", "bucket_ns_for", "fold_hlog", "fold_timeline",
           "span_ns"]

MAX_POINTS = 720
"""Points per plotted series: one per interval up to 12 minutes of 1 s intervals,
5 s buckets for an hour, 2 min buckets for a day."""

SERIES_PERCENTILES = (50.0, 99.0, 99.9)
"""The percentiles of each :class:`SeriesPoint`, in this order."""

_SUMMED = ("started", "completed", "output_tokens")
_OPEN_BUCKETS = 2  # buckets kept open per tag, for lines a little out of order


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One bucket of one intervals.hlog tag.

    Attributes:
        start_ns, end_ns: the first folded interval's start and the last one's
            end, ns from the run start.
        count: values recorded in the bucket.
        values: the percentiles ``SERIES_PERCENTILES`` of the bucket's summed
            histogram, in the metric's reporting unit (ms, tokens/s); empty
            when ``count`` is 0.
    """

    start_ns: int
    end_ns: int
    count: int
    values: tuple[float, ...]


def bucket_ns_for(span: int, max_points: int = MAX_POINTS) -> int:
    """The bucket length that fits a run of ``span`` ns in ``max_points`` points.

    Raises:
        ValueError: ``max_points`` < 1.
    """
    if max_points < 1:
        raise ValueError(f"max_points: expected a positive integer, got {max_points}")
    return max(-(-span // max_points), 1)  # ceil, in integers


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text without the line end, whether it is the file's last line).

    Raises:
        ResultsError: the file cannot be read, or a line other than a cut last
        one (no newline: a crash mid-write) is not UTF-8 (file:line).
    """
    try:
        for n, raw, last in iter_lines(path):
            if last and not raw.endswith(b"\n"):
                # a crash may cut a character: the caller skips a malformed last line
                yield n, raw.decode("utf-8", "replace"), True
            else:
                yield n, decode_line(raw, path, n).rstrip("\n"), last
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _hlog_bounds(line: str) -> tuple[str, int, int, str]:
    tag, start_s, length_s, _max, b64 = line[4:].split(",", 4)
    start_ns = round(float(start_s) * NS_PER_S)
    return tag, start_ns, start_ns + round(float(length_s) * NS_PER_S), b64


def span_ns(hlog: Path | None, timeline: Path | None) -> int:
    """The run's span: the latest interval end in either file (0 when none).

    Unreadable or malformed lines are skipped here (the folding pass names them).
    """
    end = 0
    if hlog is not None and hlog.is_file():
        for _n, line, _last in _lines(hlog):
            if line.startswith("Tag="):
                try:
                    end = max(end, _hlog_bounds(line)[2])
                except (ValueError, IndexError):
                    continue
    if timeline is not None and timeline.is_file():
        for _n, line, _last in _lines(timeline):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("end_ns"), int):
                end = max(end, rec["end_ns"])
    return end


def _point(start: int, end: int, h: Histogram) -> SeriesPoint:
    if not h.count:
        return SeriesPoint(start, end, 0, ())
    d = h.spec.divisor
    return SeriesPoint(start, end, h.count, tuple(h.percentile(p) / d for p in SERIES_PERCENTILES))


def fold_hlog(path: Path, tags: Iterable[str], bucket_ns: int) -> dict[str, list[SeriesPoint]]:
    """Fold an intervals.hlog's lines of ``tags`` into buckets of ``bucket_ns``.

    Args:
        path: the log (hopbench's format: docs/results/files.md, "intervals.hlog").
        tags: ``<scope>.<metric>`` tags to keep; other lines are skipped
            without decoding.
        bucket_ns: bucket length (:func:`bucket_ns_for`), > 0.

    Returns:
        tag -> points in time order (only tags that had lines).

    Raises:
        ResultsError: the file cannot be read, or a line (not the last) is
            malformed: ``<file>:<line>: malformed interval line: ...``.
    """
    want = set(tags)
    # tag -> bucket index -> [start_ns, end_ns, histogram]
    open_: dict[str, dict[int, list[Any]]] = {}
    out: dict[str, list[SeriesPoint]] = {}

    def close(tag: str, k: int) -> None:
        start, end, h = open_[tag].pop(k)
        out.setdefault(tag, []).append(_point(start, end, h))

    for n, line, last in _lines(path):
        if not line.startswith("Tag="):
            continue
        try:
            tag, start_ns, end_ns, b64 = _hlog_bounds(line)
            if tag not in want:
                continue
            metric = tag.rsplit(".", 1)[1]
            if metric not in METRICS:
                raise ResultsError(f"unknown metric {metric!r}")
            h = Histogram.decode(metric, b64)
        except (ValueError, IndexError, ResultsError) as exc:
            if last:
                break  # cut short by a crash mid-write
            raise ResultsError(f"{path}:{n}: malformed interval line: {exc}") from exc
        k = start_ns // bucket_ns
        buckets = open_.setdefault(tag, {})
        b = buckets.get(k)
        if b is None:
            for old in sorted(buckets):
                if len(buckets) < _OPEN_BUCKETS:
                    break
                close(tag, old)
            buckets[k] = [start_ns, end_ns, h]
        else:
            b[0], b[1] = min(b[0], start_ns), max(b[1], end_ns)
            b[2].add(h)
    for tag in list(open_):
        for k in sorted(open_[tag]):
            close(tag, k)
    for points in out.values():
        points.sort(key=lambda p: p.start_ns)
    return out


def fold_timeline(path: Path, bucket_ns: int) -> list[dict[str, Any]]:
    """Fold timeline.jsonl's records into buckets of ``bucket_ns``.

    Returns:
        Records in time order, each shaped like a timeline line (``start_ns``,
        ``end_ns``, the summed counts, the time-weighted means, the last
        point-in-time figures, ``cpu_max``); [] when the file is missing or empty.

    Raises:
        ResultsError: the file cannot be read, or a line (not the last) is not
            a JSON object with an integer ``end_ns``: ``<file>:<line>: ...``.
    """
    if not path.is_file():
        return []
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    cur_k = -1
    weighted: dict[str, float] = {}
    dur_sum = 0

    def flush() -> None:
        if cur is None:
            return
        for key, area in weighted.items():
            cur[key] = area / dur_sum if dur_sum > 0 else None
        out.append(cur)

    for n, line, last in _lines(path):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict) or not isinstance(rec.get("end_ns"), int):
                raise ValueError("expected an object with an integer end_ns")
        except ValueError as exc:
            if last:
                break  # cut short by a crash mid-write
            raise ResultsError(f"{path}:{n}: malformed timeline line: {exc}") from exc
        start = rec.get("start_ns", 0)
        start = start if isinstance(start, int) else 0
        end = rec["end_ns"]
        dur = max(end - start, 0)
        k = start // bucket_ns
        if cur is None or k != cur_k:
            flush()
            cur, cur_k, weighted, dur_sum = {"start_ns": start, "cpu_max": None}, k, {}, 0
        cur["end_ns"] = end
        dur_sum += dur
        for key, v in rec.items():
            if key in ("start_ns", "end_ns") or isinstance(v, bool):
                continue
            if key in _SUMMED and isinstance(v, (int, float)):
                cur[key] = cur.get(key, 0) + v
            elif (key.endswith("_mean") or key == "cpu") and isinstance(v, (int, float)):
                weighted[key] = weighted.get(key, 0.0) + v * dur
                if key == "cpu" and (cur["cpu_max"] is None or v > cur["cpu_max"]):
                    cur["cpu_max"] = v
            else:
                cur[key] = v  # point-in-time figures: the bucket's last value
    flush()
    return out


@dataclass(frozen=True, slots=True)
class RunData:
    """Everything the report reads from one results folder.

    Attributes:
        path: the results folder.
        summary: summary.json as a dict (:func:`read_summary`).
        snapshot: the measured histograms and counters per scope.
        timeline: timeline.jsonl records folded into time buckets, in order
            (``hopbench.report._series.fold_timeline``; possibly empty).
        intervals: tag (``<scope>.<metric>``) -> percentile points in time
            order (``hopbench.report._series.fold_hlog``), for the tags the report
            plots (possibly empty).
        notes: what was missing or unreadable but not fatal (shown in the page).
    """

    path: Path
    summary: dict[str, Any]
    snapshot: Snapshot
    timeline: list[dict[str, Any]]
    intervals: dict[str, list[SeriesPoint]]
    notes: list[str]

    @property
    def label(self) -> str:
        """The run's name and folder, for legends and titles."""
        return f"{self.summary.get('name') or '?'} ({self.path.name})"

    def scopes(self) -> list[str]:
        """Scenario scopes in summary order, then "all"."""
        names = [s for s in self.snapshot.scopes if s != ALL]
        return names + [ALL]
