"""A run's noise record, read from its results folder: what each figure could be off by.

Role: turn what a run already writes into the :class:`hopbench.views._noise.Noise`
of each figure, and into one line on the runner (docs/compare.md, "Noise"):

* **spread over time**: intervals.hlog's per-interval histograms of the figure's
  scope and metric, after the warm-up, batched (:func:`hopbench.views._noise.batches`)
  until each batch holds the statistic's ``min_count`` samples; the batches'
  statistic gives the figure's standard error (batch means);
* **the client's allowance**: ``error_bound_ms`` of the metric in summary.json
  when the run recorded it (``{"p50": .., "p90": .., "p99": .., "p999": ..}``,
  optional), else the run's event-loop lag (``scopes.all.metrics.loop_lag``): its
  mean for a median or a mean, its same percentile for a tail (``_LAG_ABOVE``): a
  stamp taken late by the client is late by about what the loop was late. The
  per-stream ``output_tokens_per_s`` (tokens over e2e) takes the same lag as a
  share of the scope's e2e p50: a late stamp lengthens e2e, so lowers the rate; Client-side metrics (the lag itself, queue and connect waits)
  and rates get none;
* **the runner**: ``generator`` in summary.json (``neighbours_cpu_cores``,
  ``cpus``, ``steal_share``, ``loop_lag_p99_ms``), quoted in reasons.

It also holds what compare and the verdicts both read from a run (one place
each): the metrics' directions (:data:`HIGHER_IS_BETTER`), the per-event metrics
(:data:`PER_EVENT`), a scope's histogram (:func:`metric_hist`) and streams
(:func:`streams_of`), and the per-interval token rates (:func:`interval_rates`).

Reading is bounded by the log's size (one pass, only the wanted tags decoded).
A folder without intervals.hlog (a summary.json alone) has no spread to measure:
its figures are taken as measured (standard error 0; ``hlog_note`` says so and
the reports repeat it). A log with too few intervals for 3 batches of a
statistic has no spread over time: the figure's sampling error stands in with
two degrees of freedom (only a gross change is then called one, and the sentence
says so); none at all (an empty log) is an unknown spread (None), and a verdict
that needs it is inconclusive, never made up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .._format import plural
from .._errors import ResultsError
from .._textfile import iter_lines
from ..config._gate_spec import default_min_count
from ..measure._hdr import Histogram
from ..measure._metrics import METRICS, metrics_where
from ._noise import Noise, batches, effective_n, spread_se
from ._stats import buckets, quantile_ci

__all__ = ["CLIENT_SIDE", "HIGHER_IS_BETTER", "PER_EVENT", "RunNoise", "arms_paired", "interval_rates", "metric_hist",
           "read_run_noise", "runner_line", "sampling_se", "stat_value", "streams_of"]

_NS_PER_S: Final = 1_000_000_000
_ONE_SE: Final = 0.6826894921370859  # P(|Z| < 1): an interval of one standard error each side
_NO_LOG_BATCHES: Final = 1_000_000  # a standard error of 0 "from" many batches: the normal's quantiles
CLIENT_SIDE: Final = frozenset({"loop_lag", "schedule_lag", "queue_delay", "connect_wait"})
"""Metrics of the client itself: its own delay is what they measure, so no allowance."""
_LAG_ABOVE: Final = {"p50": "mean", "p90": "p90", "p99": "p99", "p99.9": "p999", "p999": "p999", "mean": "mean",
                      "max": "max", "min": "p50"}
"""The loop lag's statistic that bounds how far the client's delay moves a figure's statistic.
A delay D added to each sample moves the mean by D's mean exactly; a percentile of X + D moves
by about D's same percentile when X is narrow and by about D's mean when X is wide, so a median
takes the lag's mean (above its median: a lag is skewed right) and a tail the lag's same tail."""
_STAT_FIELD: Final = {"p50": "p50", "p90": "p90", "p99": "p99", "p99.9": "p999", "p999": "p999",
                      "mean": "mean", "max": "max", "min": "min"}


def stat_value(h: Histogram, stat: str) -> float | None:
    """A histogram's statistic in the reporting unit (``p50``, ``p99.9``/``p999``, ``mean``, ``min``,
    ``max``, any ``pNN.N``); None when empty or unknown."""
    if not h.count:
        return None
    d = h.spec.divisor
    if stat == "mean":
        return h.mean / d
    if stat == "min":
        return h.min / d
    if stat == "max":
        return h.max / d
    if stat.startswith("p"):
        try:
            p = float("99.9" if stat == "p999" else stat[1:])
        except ValueError:
            return None
        return h.percentile(p) / d
    return None


@dataclass(slots=True)
class RunNoise:
    """One run's noise record: per-interval histograms of the tags asked for, its
    client allowances and its runner.

    Attributes:
        label: the run's folder, for messages.
        intervals: ``<scope>.<metric>`` -> the measured intervals' histograms, in time order.
        summary: the run's summary.json dict.
        hlog_note: why intervals are missing ("" when read).
    """

    label: str
    intervals: dict[str, list[Histogram]]
    summary: Mapping[str, Any]
    hlog_note: str = ""
    _cache: dict[tuple[str, str, str], Noise] = field(default_factory=dict)

    def noise(self, scope: str, metric: str, stat: str) -> Noise:
        """The :class:`Noise` of ``metric``'s ``stat`` in ``scope`` (reporting unit). Never raises."""
        key = (scope, metric, stat)
        if key not in self._cache:
            self._cache[key] = self._noise(scope, metric, stat)
        return self._cache[key]

    def _noise(self, scope: str, metric: str, stat: str) -> Noise:
        client, source = self.client(scope, metric, stat)
        if self.hlog_note:
            # no intervals.hlog (a summary.json alone): nothing to measure the spread by; the
            # figure is taken as measured (standard error 0), as before noise was measured
            return Noise(0.0, _NO_LOG_BATCHES, client, source)
        hists = self.intervals.get(f"{scope}.{metric}", [])
        if not hists and metric in POST_RUN:
            return self._post_run_noise(scope, metric, stat, client, source)
        groups = batches([h.count for h in hists], default_min_count("p99.9" if stat == "p999" else stat))
        figures: list[float] = []
        for g in groups:
            merged = Histogram(metric)
            for i in g:
                merged.add(hists[i])
            v = stat_value(merged, stat)
            if v is not None:
                figures.append(v)
        if len(figures) >= 3:
            return Noise(spread_se(figures), len(figures), client, source)
        # too few batches for a spread over time: the figure's sampling error stands in, with two
        # degrees of freedom (Student's t then asks for a breach of ~7 of it at alpha 0.01, a
        # change of ~10: only a gross change is called one) and said so
        merged = Histogram(metric)
        for h in hists:
            merged.add(h)
        se = sampling_se(merged, stat)
        if se is None:
            return Noise(None, len(figures), client, source)
        return Noise(se, 3, client, source, f"spread over time unmeasured ({len(figures)} {plural(len(figures), 'batch', 'batches')}): "
                                            "sampling error, 2 degrees of freedom")

    def _post_run_noise(self, scope: str, metric: str, stat: str, client: float, source: str) -> Noise:
        """A figure computed after the run (gateway overhead: each stream joined with the
        upstream's record) has no intervals: its sampling error over the scope's streams,
        widened by the design effect of a per-event metric (``sqrt(events / streams)``), with
        ``streams - 1`` degrees of freedom."""
        scopes = self.summary.get("scopes")
        sc = scopes.get(scope) if isinstance(scopes, Mapping) else None
        if not isinstance(sc, Mapping):
            return Noise(None, 0, client, source)
        try:
            h = metric_hist(sc, metric, f"scopes.{scope}")
        except ResultsError:  # (noise() never raises: a malformed histogram has an unknown spread)
            return Noise(None, 0, client, source)
        se = sampling_se(h, stat)
        streams = streams_of(sc)
        n = effective_n(h.count, streams, metric in PER_EVENT)
        if se is None or n < 3:
            return Noise(None, 0, client, source)
        deff = h.count / n if n else 1.0
        return Noise(se * math.sqrt(max(deff, 1.0)), n, client, source,
                     f"a figure measured after the run: its spread over time is not recorded; the sampling "
                     f"error over its {n} streams")

    def client(self, scope: str, metric: str, stat: str) -> tuple[float, str]:
        """(allowance in the figure's unit, its source) of ``stat``; (0, "") for figures the
        client's delay does not move (client-side metrics, counts)."""
        spec = METRICS.get(metric)
        if metric == "output_tokens_per_s":
            # tokens / e2e: a stamp late by d makes e2e longer by d, the rate lower by rate * d / e2e
            lag_ms, source = self.client(scope, "e2e", stat)
            m, e2e = _metric(self.summary, scope, metric), _metric(self.summary, scope, "e2e")
            v = m.get(_STAT_FIELD.get(stat, stat)) if m is not None else None
            t = e2e.get("p50") if e2e is not None else None
            if isinstance(v, (int, float)) and isinstance(t, (int, float)) and t > 0 and lag_ms > 0:
                return float(v) * lag_ms / float(t), f"{source} over e2e p50"
            return 0.0, ""
        if spec is None or spec.unit != "ms" or metric in CLIENT_SIDE:
            return 0.0, ""
        field_name = _STAT_FIELD.get(stat, stat)
        m = _metric(self.summary, scope, metric)
        bound = m.get("error_bound_ms") if m is not None else None
        if isinstance(bound, Mapping):
            v = bound.get(field_name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
                return float(v), f"the client's error bound at {stat}"
        lag = _metric(self.summary, "all", "loop_lag")
        above = _LAG_ABOVE.get(stat) or _above(stat)
        v = lag.get(_STAT_FIELD.get(above, above)) if lag is not None else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
            return float(v), f"its loop lag {above}"
        return 0.0, ""


def sampling_se(h: Histogram, stat: str) -> float | None:
    """The sampling standard error of a histogram's statistic (reporting unit), None when unknown.

    A percentile's from its order-statistic interval at one standard error each side
    (:func:`hopbench.views._stats.quantile_ci`, Conover §3.2); a mean's ``sd / sqrt(n)``.
    """
    n = h.count
    if n < 2:
        return None
    d = h.spec.divisor
    if stat == "mean":
        bk = h.buckets()
        mean = sum(v * c for v, c in bk) / n
        var = sum(c * (v - mean) ** 2 for v, c in bk) / (n - 1)
        return math.sqrt(var / n) / d
    try:
        q = float("99.9" if stat == "p999" else stat[1:]) / 100.0
    except ValueError:
        return None
    if not 0.0 < q < 1.0:
        return None
    ci = quantile_ci(buckets(h), q, _ONE_SE)
    return None if ci is None else (ci[1] - ci[0]) / 2 / d


def _above(stat: str) -> str:
    """The first of the lag's mean, p90, p99, p99.9 at or beyond percentile ``stat`` (``max`` when unknown)."""
    try:
        p = float(stat[1:])
    except ValueError:
        return "max"
    return next((s for s, q in (("mean", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9)) if q >= p), "max")


def _metric(summary: Mapping[str, Any], scope: str, metric: str) -> Mapping[str, Any] | None:
    scopes = summary.get("scopes")
    s = scopes.get(scope) if isinstance(scopes, Mapping) else None
    ms = s.get("metrics") if isinstance(s, Mapping) else None
    m = ms.get(metric) if isinstance(ms, Mapping) else None
    return m if isinstance(m, Mapping) else None


def _warmup_ns(summary: Mapping[str, Any]) -> int:
    profile = summary.get("profile")
    run = profile.get("run") if isinstance(profile, Mapping) else None
    w = run.get("warmup_s", 0) if isinstance(run, Mapping) else 0
    return int(float(w) * _NS_PER_S) if isinstance(w, (int, float)) and not isinstance(w, bool) else 0


def read_intervals(path: Path, tags: Iterable[str], from_ns: int = 0) -> dict[str, list[Histogram]]:
    """The per-interval histograms of ``tags`` in an intervals.hlog, in time order.

    Args:
        path: the log (docs/results.md, "intervals.hlog").
        tags: ``<scope>.<metric>`` tags to keep (others are not decoded).
        from_ns: intervals starting before this (the warm-up) are left out.

    Returns:
        tag -> histograms (only tags that had lines).

    Raises:
        ResultsError: the file cannot be read, or a line other than a cut last one is malformed.
    """
    want = set(tags)
    out: dict[str, list[Histogram]] = {}
    try:
        for n, raw, last in iter_lines(path):
            if not raw.startswith(b"Tag="):
                continue
            try:
                tag, start_s, _length, _max, b64 = raw.decode("utf-8").strip()[4:].split(",", 4)
                if tag not in want or round(float(start_s) * _NS_PER_S) < from_ns:
                    continue
                out.setdefault(tag, []).append(Histogram.decode(tag.rsplit(".", 1)[1], b64))
            except (ValueError, IndexError, UnicodeDecodeError, ResultsError) as exc:
                if last:  # a crash mid-write cuts the last line: skipped, as hdrh's reader does
                    continue
                raise ResultsError(f"{path}:{n}: malformed interval line: {exc}") from exc
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return out


def read_run_noise(folder: Path | None, summary: Mapping[str, Any], tags: Iterable[str],
                   label: str | None = None) -> RunNoise:
    """A run's :class:`RunNoise` for the ``<scope>.<metric>`` tags a compare or gate judges.

    Args:
        folder: the results folder (None: a summary alone, no intervals).
        summary: its summary.json dict.
        tags: the tags to read from intervals.hlog.
        label: the run's name in messages (default: the folder).

    Returns:
        RunNoise; without intervals.hlog its ``hlog_note`` says so and every
        spread is unknown.

    Raises:
        ResultsError: intervals.hlog exists but is unreadable or malformed (file:line).
    """
    name = label if label is not None else str(folder) if folder is not None else "run"
    if folder is None or not (Path(folder) / "intervals.hlog").is_file():
        return RunNoise(name, {}, summary, "no intervals.hlog: its figures are taken as measured (no spread over time to weigh them by)")
    return RunNoise(name, read_intervals(Path(folder) / "intervals.hlog", tags, _warmup_ns(summary)), summary)


def runner_line(summary: Mapping[str, Any]) -> str:
    """The runner's state in a few words: loop lag p99, neighbours' CPU, steal ("" when unknown)."""
    g = summary.get("generator")
    if not isinstance(g, Mapping):
        return ""
    parts = []
    lag = g.get("loop_lag_p99_ms")
    if isinstance(lag, (int, float)):
        # (0: no probe sample, a run too short for one: a real lag is never exactly 0)
        parts.append(f"loop lag p99 {lag:.3g} ms" if lag > 0 else "loop lag not measured")
    nb, cpus = g.get("neighbours_cpu_cores"), g.get("cpus")
    if isinstance(nb, (int, float)):
        parts.append(f"neighbours {nb:.2f} cores" + (f" of {cpus}" if isinstance(cpus, int) else ""))
    steal = g.get("steal_share")
    if isinstance(steal, (int, float)):
        parts.append(f"steal {steal:.1%}")
    return ", ".join(parts)


def busier(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether run ``b``'s machine was clearly busier than ``a``'s (neighbours' CPU up by half a
    core or more, or steal up by 2 points: hopbench.engine._saturation's steal threshold)."""
    ga, gb = a.get("generator"), b.get("generator")
    if not isinstance(ga, Mapping) or not isinstance(gb, Mapping):
        return False

    def num(g: Mapping[str, Any], k: str) -> float:
        v = g.get(k)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

    return (num(gb, "neighbours_cpu_cores") - num(ga, "neighbours_cpu_cores") >= 0.5
            or num(gb, "steal_share") - num(ga, "steal_share") >= 0.02)


def tags_for(scopes: Sequence[str], metrics: Sequence[str]) -> list[str]:
    """Every ``<scope>.<metric>`` tag of the product."""
    return [f"{s}.{m}" for s in scopes for m in metrics]


HIGHER_IS_BETTER: Final = frozenset({*metrics_where(higher_is_better=True), "completion_rate",
                                     "throughput.output_tokens_per_s", "throughput.completed_per_s"})
"""Metrics (the registry's ``higher_is_better``), rates and throughput figures for which more is better."""
POST_RUN: Final = frozenset({"request_delay", "first_event_delay", "added_ttft", "event_delay", "added_e2e"})
"""Gateway-overhead figures (docs/gateway-overhead.md): computed after the run, when each stream is
joined with the upstream's record, so intervals.hlog has none of them."""
PER_EVENT = frozenset(metrics_where(per_event=True))
"""Metrics with many samples per stream (the registry's ``per_event``): their samples are not independent (a
stream's gaps share its path, its upstream, the machine's state while it ran), so
their tests count streams, not events (``compare_metric``'s ``streams``)."""


def metric_hist(scope: Mapping[str, Any], metric: str, where: str) -> Histogram:
    """A scope's histogram of ``metric`` from summary.json (empty when the scope has none).

    Raises:
        ResultsError: a malformed ``hdr`` (``<where>.metrics.<metric>.hdr: ...``).
    """
    metrics = scope.get("metrics", {})
    m = metrics.get(metric) if isinstance(metrics, Mapping) else None
    if not isinstance(m, Mapping):
        return Histogram(metric)
    text = m.get("hdr")
    if not isinstance(text, str):
        raise ResultsError(f"{where}.metrics.{metric}.hdr: expected a string")
    try:
        return Histogram.decode(metric, text)
    except ResultsError as exc:
        raise ResultsError(f"{where}.metrics.{metric}.hdr: {exc}") from exc


def arms_paired(summary: Mapping[str, Any], figure: str, op: str) -> tuple[str, Mapping[str, Any]] | None:
    """The paired figure an ``arms.<figure>.p50_diff`` budget holds (docs/gate.md).

    Args:
        summary: the run's summary.json dict (its ``arm_differences``: docs/ab-arms.md).
        figure: a paired figure's name (``ttft``, ``itl_p50``, ...).
        op: the budget's comparison: with several arms, the arm furthest the breaching
            way is held (the largest difference for ``<=`` / ``<``, the smallest for ``>=`` / ``>``).

    Returns:
        (arm name, its paired figure object: ``p50_diff`` ms, ``n`` pairs, ``se`` ms,
        ``batches``), or None when the run has no paired verdicts (not an arms run, no
        streams.jsonl) or none of its arms has the figure measured. Never raises.
    """
    block = summary.get("arm_differences")
    pairs = block.get("pairs") if isinstance(block, Mapping) else None
    found: list[tuple[float, str, Mapping[str, Any]]] = []
    for pair in pairs if isinstance(pairs, list) else []:
        paired = pair.get("paired") if isinstance(pair, Mapping) else None
        figs = paired.get("figures") if isinstance(paired, Mapping) else None
        for f in figs if isinstance(figs, list) else []:
            d = f.get("p50_diff") if isinstance(f, Mapping) else None
            if isinstance(f, Mapping) and f.get("figure") == figure and isinstance(d, (int, float)):
                found.append((float(d), str(pair.get("candidate")), f))
    if not found:
        return None
    _, arm, fig = max(found, key=lambda x: x[0]) if op in ("<=", "<") else min(found, key=lambda x: x[0])
    return arm, fig


def streams_of(scope: Mapping[str, Any]) -> int:
    """The streams a scope's per-event samples came from: those started, less those
    that never had a body (connection errors, HTTP errors), so the count is not
    inflated by streams that gave no event (a smaller count is the conservative side)."""
    counters = scope.get("counters")
    if not isinstance(counters, Mapping):
        return 0
    n = sum(v if isinstance(v, int) else 0 for v in
            (counters.get("started", 0), -counters.get("connect_error", 0), -counters.get("http_error", 0)))
    return max(n, 0)


def interval_rates(results_dir: Path | None, summary: Mapping[str, Any]) -> list[tuple[int, int]] | None:
    """Per-interval output tokens/s of the measured, full-length intervals, as buckets."""
    if results_dir is None:
        return None
    try:
        lines = (Path(results_dir) / "timeline.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [json.loads(x) for x in lines if x.strip()]
    except (OSError, ValueError):
        return None
    profile = summary.get("profile")
    run = profile.get("run", {}) if isinstance(profile, Mapping) else {}
    warm_ns = int(float(run.get("warmup_s", 0) or 0) * 1e9) if isinstance(run, Mapping) else 0
    rows = [r for r in rows if isinstance(r, dict) and isinstance(r.get("start_ns"), int)
            and isinstance(r.get("end_ns"), int) and r["start_ns"] >= warm_ns]
    if len(rows) < 3:
        return None
    interval_s = run.get("interval_s", 1) if isinstance(run, Mapping) else 1
    length = int(float(interval_s if isinstance(interval_s, (int, float)) and interval_s > 0 else 1) * 1e9)
    # drop short intervals and the last one (the drain after the load stopped); the one
    # the stop ended is full-length too, a little longer (the stop is seen late), so
    # each rate is over its own interval's length (the longest is not "the" length: that
    # kept the stop's interval alone, one value, and the test could never be significant)
    values = sorted(int(r.get("output_tokens", 0) * 1e9 / (r["end_ns"] - r["start_ns"])) for r in rows[:-1]
                    if r["end_ns"] - r["start_ns"] >= length - length // 100)
    out: dict[int, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return sorted(out.items())
