"""``hopbench compare``: two results folders side by side, with statistics.

Role: for every scope both runs have, and every metric, put count, p50, p90,
p99, p99.9 and max of the base and the candidate side by side with the
absolute and relative change, and a verdict (better, worse, same) from tests
computed on the two HDR histograms (:mod:`hopbench.views._stats`); the same for the
outcome rates (proportion tests) and the run's token throughput. Works from
summary.json (and timeline.jsonl for throughput) only: milliseconds per
comparison. The records it fills and their text, Markdown and JSON are
:mod:`hopbench.views._compare_render`'s; the load-shape rule a pair is refused
by is :mod:`hopbench.views._load_shape`'s. User documentation: docs/compare.md.

Invariants:

* A side with nothing measured (no sample of a metric, no stream behind a rate)
  makes the verdict "not_comparable": never "same", never a reason made up for it.
* A verdict is "worse" or "better" only when a test is significant at
  ``alpha`` *and* the change is at least ``min_effect`` (relative), so a huge
  run cannot call a 0.5 % shift a change, and a 1 % change inside the noise
  reads "same".
* Lower is better for every time metric; higher for ``output_tokens_per_s``,
  ``completion_rate`` and throughput.
* Runs whose load shape differs are refused (``UsageError``, exit 2) unless
  ``force``: comparing 8 streams with 64 says nothing about the gateway.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from .._errors import ResultsError, UsageError
from .._format import fmt_confidence
from ..measure._hdr import Histogram
from ..measure._metrics import METRICS, metrics_where
from ..measure._outcomes import DETAIL_PREFIXES, RATES, measured_duration_s, rate_value, tokens_source, tokens_unlike
from ._compare_render import NOT_COMPARABLE, SHOWN_STATS, Comparison, MetricComparison, RateComparison, rel_change
from ._load_shape import shape_differences
from ._noise_record import HIGHER_IS_BETTER as HIGHER_IS_BETTER
from ._noise_record import PER_EVENT as PER_EVENT
from ._noise_record import interval_rates as _interval_rates
from ._noise_record import metric_hist as _hist
from ._noise_record import streams_of as _streams
from ._stats import buckets, mann_whitney, quantile_ci, poisson_rates, two_proportions

__all__ = [
    "ALPHA",
    "DEFAULT_METRICS",
    "MIN_ABS_MS",
    "MIN_EFFECT",
    "compare_command",
    "compare_metric",
    "compare_summaries",
]

ALPHA: Final = 0.01
"""Significance level of every test (two-sided); tail CIs are at 1 - ALPHA."""
MIN_EFFECT: Final = 0.05
"""Smallest relative change (of the median, or of a tail percentile) that can be a verdict."""
MIN_ABS_MS: Final = 1.0
"""Times: smallest absolute change (ms) that can be a verdict (loopback noise is below it)."""
DEFAULT_METRICS: Final = metrics_where(compared=True)
"""Gateway-facing metrics compared by default (the registry's ``compared``; client-side
ones need --metric); a metric neither run recorded is left out."""
_TAILS: Final = (("p90", 0.90), ("p99", 0.99))
_BASE_RATES: Final = ("completion_rate", "error_rate", "interruption_rate", "truncated_rate",
                      "timeout_rate", "http_error_rate", "keepalive_violation_rate")
_CODE_PREFIXES: Final = DETAIL_PREFIXES


def _direction(name: str, candidate_larger: bool) -> str:
    better_if_larger = name in HIGHER_IS_BETTER
    return "better" if candidate_larger == better_if_larger else "worse"


# -- metrics ---------------------------------------------------------------------


_EVERY_ANSWER = frozenset({"ttft"})
"""Metrics every answer feeds (any output channel starts TTFT): a candidate without
samples of one the base has is worse, not "no significant change" (docs/compare.md)."""


def _completed(scope: Mapping[str, Any]) -> int:
    """A scope's completed streams (its ``completed`` counter; 0 when absent)."""
    counters = scope.get("counters")
    v = counters.get("completed", 0) if isinstance(counters, Mapping) else 0
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def compare_metric(scope: str, metric: str, a: Histogram, b: Histogram, *, alpha: float = ALPHA,
                   min_effect: float = MIN_EFFECT, min_abs_ms: float = MIN_ABS_MS,
                   streams: tuple[int, int] | None = None,
                   completed: tuple[int, int] | None = None) -> MetricComparison:
    """Compare one metric's histograms (base ``a``, candidate ``b``).

    Verdict rules (docs/compare.md): a *shift* when Mann-Whitney U is
    significant at ``alpha``, the median moved the same way, by at least
    ``min_effect`` relative; a *tail* change when the ``1 - alpha``
    order-statistic confidence intervals of p90 or p99 are disjoint and the
    percentile moved by at least ``min_effect``. For times both must also
    move by at least ``min_abs_ms`` (sub-millisecond loopback noise is no
    verdict). Any worse -> "worse"; else any better -> "better"; else "same".
    A side without samples: "not_comparable", except ``ttft`` of a candidate
    whose streams completed (``completed``, else ``streams``) and carried no
    output while the base's did: "worse".

    ``streams``: (base, candidate) streams behind a metric of ``PER_EVENT``:
    each side's samples per stream is its design effect (the events of a stream
    counted as one independent sample, the conservative bound), which widens
    the percentiles' intervals and Mann-Whitney's variance; None (or a metric
    of one sample per stream): independent samples.
    """
    spec = METRICS[metric]
    sa, sb = a.stats(), b.stats()
    base = {k: sa[k] for k in SHOWN_STATS}
    cand = {k: sb[k] for k in SHOWN_STATS}
    ba, bb = buckets(a), buckets(b)
    deff_a = deff_b = 1.0
    if streams is not None and metric in PER_EVENT:
        deff_a = a.count / streams[0] if streams[0] > 0 and a.count > streams[0] else 1.0
        deff_b = b.count / streams[1] if streams[1] > 0 and b.count > streams[1] else 1.0
    test = mann_whitney(ba, bb, max(deff_a, deff_b))
    verdicts: list[str] = []
    reasons: list[str] = []
    floor = min_abs_ms if spec.unit == "ms" else 0.0

    def big(key: str, rel: float | None) -> bool:
        return rel is not None and abs(rel) >= min_effect and abs((sb[key] or 0) - (sa[key] or 0)) >= floor

    rel50 = rel_change(sa["p50"], sb["p50"])
    if test.p_value < alpha and rel50 is not None and big("p50", rel50):
        larger = test.superiority > 0.5
        if larger == (rel50 > 0):
            v = _direction(metric, larger)
            verdicts.append(v)
            reasons.append(f"median {rel50:+.1%} (Mann-Whitney p = {test.p_value:.2g})")
    elif test.p_value < alpha and rel50 is not None:
        why = (f"below {min_effect:.0%}" if abs(rel50) < min_effect
               else f"under {floor:g} ms absolute")
        reasons.append(f"significant but small: median {rel50:+.1%} ({why}; p = {test.p_value:.2g})")
    tails: dict[str, dict[str, Any]] = {}
    for key, q in _TAILS:
        ca, cb = quantile_ci(ba, q, 1 - alpha, deff_a), quantile_ci(bb, q, 1 - alpha, deff_b)
        # (a side too small for the quantile's interval: no test ran, so no "same")
        tv = "same" if ca is not None and cb is not None else NOT_COMPARABLE
        rel = rel_change(sa[key], sb[key])
        if ca is not None and cb is not None and big(key, rel):
            if cb[0] > ca[1] or cb[1] < ca[0]:
                tv = _direction(metric, cb[0] > ca[1])
                verdicts.append(tv)
                reasons.append(f"{key} {rel:+.1%} ({fmt_confidence(alpha)} CIs disjoint)")
        d = spec.divisor
        tails[key] = {"base_ci": None if ca is None else [ca[0] / d, ca[1] / d],
                      "candidate_ci": None if cb is None else [cb[0] / d, cb[1] / d],
                      "verdict": tv}
    if not a.count or not b.count:
        side = 0 if not a.count else 1
        name = ("base", "candidate")[side]
        ended = completed if completed is not None else streams
        had = None if ended is None else ended[side]
        reasons.append(f"no samples in {name}" + (" (no stream was measured)" if (
            (streams is not None and streams[side] == 0) or (streams is None and had == 0)) else ""))
        if metric in _EVERY_ANSWER and a.count and not b.count and (had is None or had > 0):
            # every answer has a first token: the candidate's streams ended and none carried
            # output, where the base measured some (never said of a run with no stream at all)
            verdicts = ["worse"]
            reasons.append(f"the base has {a.count:,}: the candidate's {had:,} completed streams carried no output"
                           if completed is not None else
                           f"the base has {a.count:,}: the candidate's streams carried no output")
        else:
            verdicts = [NOT_COMPARABLE]
    verdict = ("worse" if "worse" in verdicts else NOT_COMPARABLE if NOT_COMPARABLE in verdicts
               else "better" if "better" in verdicts else "same")
    return MetricComparison(scope, metric, spec.unit, base, cand, test, tails, verdict, tuple(reasons))


# -- rates -----------------------------------------------------------------------


def _rate_tuple(counters: Mapping[str, Any], metrics: Mapping[str, Any], name: str) -> tuple[int, int, float | None]:
    if name in _BASE_RATES:
        v, num, den = rate_value(name, counters, metrics, None)
        return num, den, v
    started = (counters.get("started", 0) - counters.get("cancelled", 0)
               - counters.get("client_cancelled", 0))
    k = counters.get(name, 0)
    return k, started, (k / started if started > 0 else None)


def _compare_rates(scope: str, a: Mapping[str, Any], b: Mapping[str, Any], alpha: float) -> list[RateComparison]:
    ca, cb = a.get("counters", {}), b.get("counters", {})
    ma, mb = a.get("metrics", {}), b.get("metrics", {})
    names = list(_BASE_RATES)
    codes = sorted({k for k in list(ca) + list(cb) if k.startswith(_CODE_PREFIXES)})
    out = []
    for name in names + codes:
        ka, na, va = _rate_tuple(ca, ma, name)
        kb, nb, vb = _rate_tuple(cb, mb, name)
        if not na and not nb:
            continue
        test = two_proportions(ka, na, kb, nb)
        verdict = "same"
        if not na or not nb:  # one run counted no stream: nothing to compare (never "same")
            verdict = NOT_COMPARABLE
        elif test.p_value < alpha and va is not None and vb is not None and va != vb:
            verdict = _direction(name, vb > va)
        out.append(RateComparison(scope, name, (ka, na, va), (kb, nb, vb), test.method, test.p_value, verdict))
    return out


def _compare_throughput(base: Mapping[str, Any], cand: Mapping[str, Any], base_dir: Path | None,
                        cand_dir: Path | None, alpha: float, min_effect: float) -> list[RateComparison]:
    sa, sb = base["scopes"].get("all", {}), cand["scopes"].get("all", {})
    ma, _ = measured_duration_s(base, base_dir)
    mb, _ = measured_duration_s(cand, cand_dir)
    ia, ib = _interval_rates(base_dir, base), _interval_rates(cand_dir, cand)
    out = []
    for name, unit in ((r.name, r.unit) for r in RATES.values() if not r.fraction):
        va, num_a, den_a = rate_value(name, sa.get("counters", {}), sa.get("metrics", {}), ma)
        vb, num_b, den_b = rate_value(name, sb.get("counters", {}), sb.get("metrics", {}), mb)
        method, p, verdict = "none", 1.0, "same"
        unlike = _tokens_unlike(sa, sb) if name == "output_tokens_per_s" else ""
        if not den_a or not den_b or not ma or not mb:
            # one run counted no stream (interrupted before any), or has no measured duration:
            # its 0 is not a measured rate, and "no significant change (p = 1)" would be made up
            verdict = NOT_COMPARABLE
        elif unlike:  # no count on a side, or counts of different kinds: never -100 %, never WORSE
            verdict = NOT_COMPARABLE
        elif name == "output_tokens_per_s" and ia and ib:
            t = mann_whitney(ia, ib)
            method, p = "mann-whitney over intervals", t.p_value
            rel = rel_change(va, vb)
            if p < alpha and rel is not None and abs(rel) >= min_effect and (rel > 0) == (t.superiority > 0.5):
                verdict = _direction("throughput." + name, rel > 0)
        elif name == "completed_per_s" and ma and mb:
            # counts over durations: a dead candidate (0 completed) is a change, not noise
            pt = poisson_rates(num_a, ma, num_b, mb)
            method, p = pt.method, pt.p_value
            rel = rel_change(va, vb)
            if p < alpha and va is not None and vb is not None and va != vb \
                    and (rel is None or abs(rel) >= min_effect):
                verdict = _direction("throughput." + name, vb > va)
        out.append(RateComparison("all", "throughput." + name, (num_a, ma or 0.0, va), (num_b, mb or 0.0, vb),
                                  method, p, verdict, unit, unlike))
    return out


def _tokens_unlike(a: Mapping[str, Any], b: Mapping[str, Any], *, kinds_only: bool = False) -> str:
    """Why two scopes' token figures cannot be compared (``measure._outcomes.tokens_unlike``), or "".

    ``kinds_only``: only counts of different kinds (per-stream figures: a side with samples
    had a count, even where a summary.json written before ``output_tokens_from`` cannot say which).
    """
    ca, cb = a.get("counters"), b.get("counters")
    sa = tokens_source(ca if isinstance(ca, Mapping) else {})
    sb = tokens_source(cb if isinstance(cb, Mapping) else {})
    if kinds_only and not (sa.counted and sb.counted):
        return ""
    return tokens_unlike(sa, sb)


#: metrics made of token counts: not judged between runs that counted tokens differently
_TOKEN_METRICS: Final = frozenset({"output_tokens_per_s", "tpot"})


#: run warnings (hopbench.driver._warnings) that say streams arrived as bursts: compare repeats them
_BURST_WARNINGS: Final = ("proxy buffering suspected", "client_lagged")


def _partial_why(summary: Mapping[str, Any]) -> str:
    """Why a run is partial, for messages: its ``interrupted_by``, or a checkpoint's fate."""
    by = summary.get("interrupted_by")
    if by:
        return f"complete: false, interrupted_by: {by}"
    if "ended_at" in summary and summary.get("ended_at") is None:
        return ("complete: false; summary.json is a checkpoint written during the load: the run was killed "
                "before its final write")
    return "complete: false, partial results"


def _same_read_notes(metrics: Sequence[MetricComparison]) -> list[str]:
    """A warning per ITL comparison whose median is a same-read gap on one side only.

    A gap of 0 means two events arrived in one read (docs/results.md): when half
    or more of a run's gaps are 0 its streams came in bursts (a buffering gateway,
    or a client that read late), and a lower ITL there is not a faster stream.
    """
    notes = []
    for m in metrics:
        if m.metric != "itl":
            continue
        zero = [side for side, v in (("base", m.base.get("p50")), ("candidate", m.candidate.get("p50")))
                if isinstance(v, (int, float)) and v < 0.001]
        if len(zero) == 1:
            notes.append(f"{m.scope} itl: half or more of the {zero[0]}'s gaps are 0 (events that arrived in "
                         "one read: bursts from a buffering gateway or a client that read late); a lower "
                         "ITL there is not a faster stream")
    return notes


def _run_key(label: str, folder: Path | None) -> str:
    """One key per results folder: ``DIR`` and ``DIR/summary.json`` name the same run."""
    if folder is None:
        return label
    p = Path(folder)
    if p.name == "summary.json":
        p = p.parent
    try:
        return str(p.resolve())
    except OSError:
        return str(p)


def _check_metric_names(names: Sequence[str]) -> None:
    """Raises UsageError for a name that is no metric, with a did-you-mean."""
    for m in names:
        if m not in METRICS:
            import difflib

            near = difflib.get_close_matches(m.partition(".")[0], list(METRICS), 1)
            hint = (" (compare judges each metric's p50, p90 and p99: name the metric alone)" if "." in m
                    and m.partition(".")[0] in METRICS else f": did you mean {near[0]!r}?" if near else "")
            raise UsageError(f"--metric: unknown metric {m!r}{hint}; expected one of {', '.join(METRICS)}")


def _pair_warnings(base: Mapping[str, Any], candidate: Mapping[str, Any], base_dir: Path | None,
                   candidate_dir: Path | None, label_a: str, label_b: str, diffs: Sequence[str],
                   force: bool) -> list[str]:
    """What the pair of runs must be read with (load shapes, partial runs, one run twice,
    saturation, bursts), or the UsageError that refuses it without ``force``."""
    warnings = []
    if diffs:
        if not force:
            raise UsageError(f"{label_a} and {label_b}: the runs' load shapes differ ("
                             + "; ".join(diffs) + "): pass --force to compare anyway")
        warnings.append("load shapes differ (compared with --force): " + "; ".join(diffs))
    # one run named twice (the same folder as base and candidate) is one run: warn once
    runs = {_run_key(label, d): (label, s) for label, d, s in
            ((label_a, base_dir, base), (label_b, candidate_dir, candidate))}
    partial = [label for label, s in runs.values() if s.get("complete") is not True]
    if partial and not force:
        why = _partial_why(next(s for label, s in runs.values() if label == partial[0]))
        raise UsageError(f"{partial[0]}: the run did not complete ({why}): its "
                         "figures cover only part of the planned load; pass --force to compare anyway")
    if partial:
        warnings.append(f"{', '.join(partial)}: the run did not complete (partial results; compared with "
                        "--force)")
    # a copy of one folder is one run too: the same start to the microsecond and the same end
    copy = (len(runs) == 2 and base.get("started_at_unix_s") is not None
            and base.get("started_at_unix_s") == candidate.get("started_at_unix_s")
            and base.get("ended_at") == candidate.get("ended_at"))
    if len(runs) == 1 or copy:  # most likely a typo in a path or an artifact mix-up: A/A is two runs
        what = (f"{label_a} is both the base and the candidate" if len(runs) == 1 else
                f"{label_a} and {label_b} are copies of one run (the same started_at_unix_s and ended_at)")
        if not force:  # under --fail-on-worse it would pass a release on nothing (exit 0)
            raise UsageError(f"{what}: one run compared with itself reads same on every figure; pass --force "
                             "to compare anyway")
        warnings.append(f"{what}: one run compared with itself "
                        "(every figure reads same; an A/A comparison needs two runs)")
    for label, s in runs.values():
        if s.get("saturated") is True:
            warnings.append(f"{label}: the load generator was saturated (latencies not trustworthy)")
        for w in s.get("warnings") or ():  # streams that arrived as bursts: their ITL is not a stream's pace
            if isinstance(w, str) and w.startswith(_BURST_WARNINGS):
                warnings.append(f"{label}: {w}")
    return warnings


def compare_summaries(base: dict[str, Any], candidate: dict[str, Any], *,
                      metrics: Sequence[str] | None = None, alpha: float = ALPHA,
                      min_effect: float = MIN_EFFECT, force: bool = False,
                      min_abs_ms: float = MIN_ABS_MS,
                      base_dir: Path | None = None, candidate_dir: Path | None = None,
                      asked: bool = False, asked_min_effect: float | None = None,
                      asked_min_abs_ms: float | None = None, one_run: str = "") -> Comparison:
    """Compare two runs' summaries.

    Args:
        base: the base run's summary.json dict.
        candidate: the candidate's.
        metrics: metric names to compare (default :data:`DEFAULT_METRICS`).
        alpha: significance level, e.g. 0.01.
        min_effect: smallest relative change that can make a verdict, e.g. 0.02.
        min_abs_ms: times only: smallest absolute change (ms) that can make a verdict.
        force: compare even when the load shapes differ or a run did not complete
            (each such fact then becomes one warning).
        base_dir / candidate_dir: the folders (for throughput per interval and messages).
        asked: ``metrics`` are the user's (``--metric``): one neither run measured is
            warned about, and none measured is an error.
        asked_min_effect / asked_min_abs_ms: ``--min-effect`` / ``--min-abs-ms`` when the user
            gave them: the verdicts then call a smaller change ``same`` (None: the verdicts
            judge against the runs' measured noise alone; ``min_effect`` and ``min_abs_ms``
            decide only the samples' own verdict, ``samples_verdict``).
        one_run: the two sides are scopes of one run (A/B arms, interleaved round by round):
            no between-run noise floor applies, and this says why in each verdict's sentence
            (``""``: two runs, each with its measured noise).

    Returns:
        Comparison.

    Raises:
        UsageError: the load shapes differ or a run did not complete (``complete`` not
            true; the message names its folder), and not ``force``; an unknown metric; or
            ``asked`` and none of ``metrics`` measured by either run.
        ResultsError: a malformed summary.
    """
    names = list(metrics) if metrics else list(DEFAULT_METRICS)
    _check_metric_names(names)
    label_a = str(base_dir) if base_dir is not None else "base"
    label_b = str(candidate_dir) if candidate_dir is not None else "candidate"
    diffs = shape_differences(base, candidate)
    warnings = _pair_warnings(base, candidate, base_dir, candidate_dir, label_a, label_b, diffs, force)
    scopes_a, scopes_b = base.get("scopes"), candidate.get("scopes")
    if not isinstance(scopes_a, Mapping) or not isinstance(scopes_b, Mapping):
        raise ResultsError("summary: expected a \"scopes\" object in both runs")
    common = [s for s in scopes_a if s in scopes_b]
    out_m: list[MetricComparison] = []
    out_r: list[RateComparison] = []
    for scope in common:
        a, b = scopes_a[scope], scopes_b[scope]
        for metric in names:
            ha = _hist(a, metric, f"{label_a}: scopes.{scope}")
            hb = _hist(b, metric, f"{label_b}: scopes.{scope}")
            if not ha.count and not hb.count:
                continue
            mc = compare_metric(scope, metric, ha, hb, alpha=alpha, min_effect=min_effect,
                                min_abs_ms=min_abs_ms, streams=(_streams(a), _streams(b)),
                                completed=(_completed(a), _completed(b)))
            unlike = (_tokens_unlike(a, b, kinds_only=True) if metric in _TOKEN_METRICS and ha.count and hb.count
                      else "")
            if unlike:  # per-stream tokens of different kinds (docs/compare.md, "Token throughput")
                mc = dataclasses.replace(mc, verdict=NOT_COMPARABLE, reasons=(unlike,))
            out_m.append(mc)
        out_r.extend(_compare_rates(scope, a, b, alpha))
    if asked and metrics:  # metrics asked for by name: one neither run measured is said, never passed over
        measured = {m.metric for m in out_m}
        missing = [m for m in names if m not in measured]
        if missing and not measured:
            raise UsageError(f"--metric {', '.join(missing)}: no samples in either run, in any scope: nothing "
                             "to compare (a gate on it would check nothing)")
        warnings += [f"--metric {m}: no samples in either run: not compared" for m in missing]
    warnings += _same_read_notes(out_m)
    if "all" in common:
        out_r.extend(_compare_throughput(base, candidate, base_dir, candidate_dir, alpha, min_effect))
    from ._capacity_table import compare_capacity  # staged runs (docs/slo.md)

    capacity = compare_capacity(base, candidate)
    if capacity is not None and base.get("stage_of_record") != candidate.get("stage_of_record"):
        warnings.append(f"latencies are compared at each run's capacity point ({base.get('stage_of_record')} "
                        f"vs {candidate.get('stage_of_record')}): different loads")
    comparison = Comparison(
        base_dir=label_a, candidate_dir=label_b, metrics=tuple(out_m), rates=tuple(out_r),
        warnings=tuple(warnings),
        only_in_base=tuple(s for s in scopes_a if s not in scopes_b),
        only_in_candidate=tuple(s for s in scopes_b if s not in scopes_a),
        alpha=alpha, min_effect=min_effect, shape_differences=tuple(diffs), capacity=capacity,
    )
    from ._verdicts import judge_comparison  # every figure against the two runs' noise (docs/compare.md)

    shared = None
    if one_run:  # one runner under both sides: each figure taken as measured (standard error 0)
        from ._noise_record import RunNoise

        shared = (RunNoise(label_a, {}, base, one_run), RunNoise(label_b, {}, candidate, one_run))
    verdicts = judge_comparison(comparison, base, candidate, base_dir=base_dir, cand_dir=candidate_dir,
                                min_effect=asked_min_effect, min_abs_ms=asked_min_abs_ms,
                                base_noise=shared[0] if shared else None, cand_noise=shared[1] if shared else None)
    asked_floors = ", ".join(x for x in (
        f"--min-effect {asked_min_effect:g}" if asked_min_effect is not None else "",
        f"--min-abs-ms {asked_min_abs_ms:g}" if asked_min_abs_ms is not None else "") if x)
    return dataclasses.replace(comparison, verdicts=verdicts, asked_floors=asked_floors)


# -- rendering -------------------------------------------------------------------


# -- command ---------------------------------------------------------------------


def compare_command(base_dir: Path, candidate_dir: Path, *, metrics: Sequence[str] = (),
                    alpha: float = ALPHA, min_effect: float | None = None, min_abs_ms: float | None = None,
                    force: bool = False) -> Comparison:
    """``hopbench compare``: check the settings, read both folders, compare them.

    The arguments are parsed by :mod:`hopbench.cli`, which prints the
    comparison and picks the exit code (``--fail-on-worse``).

    Args:
        base_dir / candidate_dir: results folders (or summary.json files).
        metrics: metric names (default :data:`DEFAULT_METRICS`).
        alpha: significance level, in (0, 1).
        min_effect: smallest relative change that can be a verdict (0.02 = 2 %); None: the
            verdicts need none beyond the runs' noise (the samples' verdict takes MIN_EFFECT).
        min_abs_ms: times: smallest absolute change (ms) that can be a verdict; None as above
            (MIN_ABS_MS).
        force: compare runs whose load shapes differ, or that did not complete.

    Returns:
        Comparison.

    Raises:
        UsageError: a setting out of range, an unknown metric, load shapes differ,
            a partial run (``complete: false``) without ``force``.
        ResultsError: a folder that cannot be read.
    """
    from ..driver._results import read_summary

    if not 0 < alpha < 1:
        raise UsageError(f"--alpha: expected a number between 0 and 1, got {alpha}")
    if min_effect is not None and not 0 <= min_effect < 10:
        raise UsageError(f"--min-effect: expected a fraction >= 0 (0.02 = 2 %), got {min_effect}")
    if min_abs_ms is not None and not min_abs_ms >= 0:
        raise UsageError(f"--min-abs-ms: expected a number of ms >= 0, got {min_abs_ms}")
    base = read_summary(base_dir)
    cand = read_summary(candidate_dir)
    return compare_summaries(
        base, cand, metrics=list(metrics) or None, alpha=alpha,
        min_effect=MIN_EFFECT if min_effect is None else min_effect,
        min_abs_ms=MIN_ABS_MS if min_abs_ms is None else min_abs_ms, force=force, base_dir=base_dir,
        candidate_dir=candidate_dir, asked=bool(metrics), asked_min_effect=min_effect, asked_min_abs_ms=min_abs_ms)
