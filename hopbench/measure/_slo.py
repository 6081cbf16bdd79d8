"""Judging requests against their SLOs: good requests, goodput, what failed (docs/slo.md).

Role: pure and synchronous (STYLE.md §1). :func:`judge` takes one finished
stream's ``StreamRecord`` (hopbench.measure._meter) and its scope's ``Slo``
(defined here; parsed from the profile by hopbench.config._slo_spec) and says whether the request was good and which
objectives it missed; :func:`record_verdict` turns that into recorder counters
(so worker processes merge exactly); :func:`slo_summary` makes summary.json's
``slo`` block from a snapshot's counters and the measured window.

Definitions (DistServe, Zhong et al., OSDI 2024: goodput is the number of
requests completed per second that meet their SLOs):
- A request is **good** when it completed and each objective its scope sets
  holds: TTFT, content TTFT, its own ITL statistic, TPOT, E2E, all measured
  from the request's start (the intended start in an open loop: no
  coordinated omission, hopbench.measure._meter).
- An objective whose figure the stream never produced fails when the figure
  is owed: a completed stream with no first token fails ``ttft``; a stream
  with fewer than two output events has no gap, so ``itl`` and ``tpot`` hold
  vacuously. An interrupted stream fails ``completed`` and any objective
  whose measured figure is over its limit.
- goodput: good requests per second of the measured window, and their output
  tokens per second (usage's output tokens, else the output events).

Counters (per scenario scope, summed into "all" by the recorder):
``slo.judged``, ``slo.good``, ``slo.good_output_tokens``, ``slo.failed.<objective>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Protocol

from ._digest import digest_percentile
from ._metrics import METRICS
from ._recorder import ALL, Recorder, Snapshot
from ._outcomes import tokens_source
from .._units import NS_PER_MS

__all__ = ["OBJECTIVES", "Slo", "Verdict", "judge", "record_verdict", "slo_mapping", "slo_summary",
           "wilson_lower", "itl_stat_ns"]


#: Every objective a request is judged on, in report order: completion, then the registry's
#: metrics that an SLO may limit (``MetricSpec.slo``, in display order).
OBJECTIVES: tuple[str, ...] = ("completed", *(spec.slo for spec in METRICS.values() if spec.slo))


@dataclass(frozen=True, slots=True)
class Slo:
    """One scope's objectives (limits in integer ns; None: no objective on that figure).

    Attributes:
        ttft_ns: the request's own TTFT (from its intended start in an open loop).
        content_ttft_ns: its first non-reasoning output.
        itl_ns: its inter-token latency, as ``itl_stat`` of its own gaps.
        itl_stat: "mean", "max" or "pNN" (a percentile of the request's own
            gaps, nearest rank), e.g. "p90".
        tpot_ns: its time per output token (after the first).
        e2e_ns: its end-to-end latency.
        target: the good fraction a load must keep, in (0, 1].
        confidence: the one-sided confidence of the Wilson lower bound on the
            good fraction (capacity search), in (0.5, 1).
    """

    ttft_ns: int | None = None
    content_ttft_ns: int | None = None
    itl_ns: int | None = None
    itl_stat: str = "mean"
    tpot_ns: int | None = None
    e2e_ns: int | None = None
    target: float = 0.99
    confidence: float = 0.95

    @property
    def itl_percentile(self) -> float | None:
        """The percentile of ``itl_stat`` (100.0 for "max"), None for "mean"."""
        if self.itl_stat == "mean":
            return None
        if self.itl_stat == "max":
            return 100.0
        return float(self.itl_stat[1:])

    def limits_ms(self) -> dict[str, float]:
        """The set limits in ms, by objective (summary.json ``slo.<scope>.limits_ms``)."""
        out: dict[str, float] = {}
        for name in OBJECTIVES[1:]:
            v = getattr(self, f"{name}_ns")
            if v is not None:
                out[name] = v / NS_PER_MS
        return out


def slo_mapping(slo: Slo) -> dict[str, Any]:
    """The SLO as summary.json states it (limits in ms)."""
    return {"limits_ms": slo.limits_ms(), "itl_stat": slo.itl_stat, "target": slo.target,
            "confidence": slo.confidence}


class StreamRecord(Protocol):
    """What :func:`judge` reads of ``hopbench.measure._rules.StreamRecord`` (same names,
    same meaning; a Protocol so that this module sits below the meter)."""

    @property
    def outcome(self) -> str: ...
    @property
    def ttft_ns(self) -> int | None: ...
    @property
    def ttft_content_ns(self) -> int | None: ...
    @property
    def itl_count(self) -> int: ...
    @property
    def itl_sum_ns(self) -> int: ...
    @property
    def itl_max_ns(self) -> int: ...
    @property
    def itl_digest(self) -> Sequence[tuple[int, int]] | None: ...
    @property
    def tpot_ns(self) -> int | None: ...
    @property
    def e2e_ns(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def output_events(self) -> int: ...
    @property
    def content_events(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """One request judged.

    Attributes:
        good: it completed and met every objective.
        failed: the objectives it missed, in ``OBJECTIVES`` order (empty when good).
        output_tokens: its output tokens (usage, else output events), >= 0.
    """

    good: bool
    failed: tuple[str, ...]
    output_tokens: int


def itl_stat_ns(r: StreamRecord, percentile: float | None) -> int | None:
    """A request's own ITL statistic, from its record's bounded ITL figures.

    Args:
        r: the stream's record: ``itl_count``, ``itl_sum_ns``, ``itl_max_ns``
            and, for a percentile under 100, ``itl_digest``.
        percentile: None for the mean (rounded down, exact), 100 for the
            largest gap (exact), else a percentile in (0, 100) by nearest rank
            over the digest (``hopbench.measure._digest``: at most 0.8 % above the gap).

    Returns:
        The statistic in ns, None when there is no gap.

    Raises:
        ValueError: a percentile under 100 asked of a record without a digest
            (the runner keeps one for every scope whose SLO asks for it).
    """
    if r.itl_count <= 0:
        return None
    if percentile is None:
        return r.itl_sum_ns // r.itl_count
    if percentile >= 100:
        return r.itl_max_ns
    if r.itl_digest is None:
        raise ValueError("a per-request ITL percentile needs the stream's ITL digest "
                         "(StreamMeter(itl_digest=True))")
    return digest_percentile(r.itl_digest, percentile)


def judge(slo: Slo, r: StreamRecord) -> Verdict:
    """Judge one finished stream against its scope's objectives (pure).

    Args:
        slo: the scope's objectives.
        r: the stream's record (``_rules.measure``).

    Returns:
        The verdict. Never raises.
    """
    completed = r.outcome == "completed"
    failed: list[str] = []
    if not completed:
        failed.append("completed")

    def over(value: int | None, limit: int | None, owed: bool) -> bool:
        if limit is None:
            return False
        if value is None:
            return owed
        return value > limit

    if over(r.ttft_ns, slo.ttft_ns, completed):
        failed.append("ttft")
    if over(r.ttft_content_ns, slo.content_ttft_ns, completed and r.content_events > 0):
        failed.append("content_ttft")
    if slo.itl_ns is not None and over(itl_stat_ns(r, slo.itl_percentile), slo.itl_ns, False):
        failed.append("itl")
    if over(r.tpot_ns, slo.tpot_ns, False):
        failed.append("tpot")
    if over(r.e2e_ns, slo.e2e_ns, completed):
        failed.append("e2e")
    tokens = r.output_tokens if r.output_tokens is not None else r.output_events
    return Verdict(not failed, tuple(failed), max(0, int(tokens)))


def record_verdict(rec: Recorder, scope: str, v: Verdict) -> None:
    """Count a verdict in ``rec`` under ``scope`` (see the module's counters).

    Raises:
        UsageError: ``scope`` is not one of ``rec``'s scenario scopes.
    """
    rec.incr(scope, "slo.judged")
    if v.good:
        rec.incr(scope, "slo.good")
        if v.output_tokens:
            rec.incr(scope, "slo.good_output_tokens", v.output_tokens)
    for name in v.failed:
        rec.incr(scope, f"slo.failed.{name}")


def wilson_lower(good: int, n: int, confidence: float) -> float | None:
    """The Wilson score interval's lower bound of a fraction (one-sided).

    Args:
        good: successes, 0 <= good <= n.
        n: trials.
        confidence: one-sided confidence in (0, 1), e.g. 0.95 (z = 1.645).

    Returns:
        The lower bound in [0, 1], None when n == 0. (Wilson, 1927, JASA 22:209.)
    """
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(confidence)
    p = good / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - margin) / (1 + z2 / n))


def _scope_block(counters: Mapping[str, int], slo: Slo | None, measured_s: float) -> dict[str, Any]:
    judged = counters.get("slo.judged", 0)
    good = counters.get("slo.good", 0)
    window = measured_s if measured_s > 0 else 0.0
    confidence = slo.confidence if slo is not None else 0.95
    lower = wilson_lower(good, judged, confidence)
    out: dict[str, Any] = {
        "judged": judged,
        "good": good,
        "good_fraction": round(good / judged, 6) if judged else None,
        "good_fraction_lower": None if lower is None else round(lower, 6),
        "goodput_rps": round(good / window, 3) if window else None,
        # no token count (no usage, no output event) is no 0 tokens/s (docs/results/counters.md)
        "goodput_tokens_per_s": (round(counters.get("slo.good_output_tokens", 0) / window, 3)
                                 if window and (counters.get("slo.good_output_tokens", 0)
                                                or tokens_source(counters).counted) else None),
        # what those tokens were counted from: usage, the client's output events, both, or none
        "tokens_source": tokens_source(counters).source,
        "failed": {name: counters.get(f"slo.failed.{name}", 0) for name in OBJECTIVES
                   if counters.get(f"slo.failed.{name}", 0)},
    }
    if slo is not None:
        out.update(slo_mapping(slo))
        out["met"] = None if lower is None else lower >= slo.target
    return out


def slo_summary(slos: Mapping[str, Slo | None], total: Snapshot, measured_s: float) -> dict[str, Any] | None:
    """summary.json's ``slo`` block (docs/results/summary-json.md, "SLOs and goodput").

    Args:
        slos: scenario scope -> its objectives (None: the scenario has none).
        total: the measured run's snapshot (counters of ``record_verdict``).
        measured_s: the measured window, s (``load.measured_s``).

    Returns:
        ``{scope: {judged, good, good_fraction, good_fraction_lower, goodput_rps,
        goodput_tokens_per_s, tokens_source, failed: {objective: n}, limits_ms, itl_stat, target,
        confidence, met}}`` for each scenario with objectives, then "all" (its
        ``met``: every scenario's), or None when no scenario has objectives.
    """
    judged = {s: o for s, o in slos.items() if o is not None}
    if not judged:
        return None
    out: dict[str, Any] = {}
    for scope, slo in judged.items():
        snap = total.scopes.get(scope)
        out[scope] = _scope_block(snap.counters if snap else {}, slo, measured_s)
    all_snap = total.scopes.get(ALL)
    block = _scope_block(all_snap.counters if all_snap else {}, None, measured_s)
    mets = [b["met"] for b in out.values()]
    block["met"] = None if any(m is None for m in mets) else all(mets)
    out[ALL] = block
    return out
