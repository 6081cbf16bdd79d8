"""The A/B arms' differences: ``hopbench compare``'s statistics between the scopes of one run.

Role: after a run with ``[[arm]]`` tables (hopbench.config._arm_spec), compare every arm
with the first (the baseline) metric by metric and rate by rate, with exactly
the tests and verdict rules of ``hopbench compare`` (:func:`hopbench.views._compare.compare_summaries`:
Mann-Whitney U on the HDR histograms, order-statistic confidence intervals of
p90/p99, proportion tests for the rates; "same" when not significant or too
small), and write the result into summary.json as ``arm_differences``
(docs/results/summary-json.md, "A/B arms"). The terminal summary and report.html show it.

Invariants: reads and writes summary.json only (no run, no clock); each arm's
scope is handed to ``compare_summaries`` as a one-scope summary, so no
statistics are re-implemented here.

A buffered stream is worse, never better, on every smoothness figure
(:data:`SMOOTHNESS_METRICS`): a buffer delivers a stream in one read, so its
inter-token gaps and silences shrink to nothing and the tests would call a
buffering gateway "better" on itl, tpot and max_silence (issue 38). When one arm
is buffered (half or more of its completed streams flagged
``proxy_buffering_suspected``) and the other is not, those figures' verdicts are
the buffered arm's loss, whatever the tests say, with ``buffered`` naming why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ._compare import ALPHA, DEFAULT_METRICS, MIN_EFFECT, compare_summaries
from .._format import fmt_num as num
from ..driver._results import replace_text
from ..measure._metrics import UNIT_LABELS

__all__ = ["ARM_METRICS", "arm_differences", "add_arm_differences", "render_arm_differences"]

ARM_METRICS: Final = (*DEFAULT_METRICS, "cancel_delay")
"""The metrics compared between arms: compare's defaults and the cancel-propagation delay."""
SMOOTHNESS_METRICS: Final = ("itl", "tpot", "max_silence")
"""The figures a buffer makes look better: gaps between tokens and silences inside a stream."""


def _buffered(scope: Any) -> bool:
    """Whether half or more of an arm's completed streams were flagged ``proxy_buffering_suspected``."""
    counters = scope.get("counters") if isinstance(scope, Mapping) else None
    if not isinstance(counters, Mapping):
        return False
    done, flagged = counters.get("completed", 0), counters.get("proxy_buffering_suspected", 0)
    return isinstance(done, int) and isinstance(flagged, int) and done > 0 and 2 * flagged >= done
_SCOPE: Final = "arm"


def _arm_names(summary: Mapping[str, Any]) -> list[str]:
    arms = summary.get("arms")
    if not isinstance(arms, list):
        return []
    return [a["name"] for a in arms if isinstance(a, Mapping) and isinstance(a.get("name"), str)]


def arm_differences(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """Compare each arm of a run with its first arm.

    Args:
        summary: a summary.json dict with ``arms`` (the list of arms) and
            ``scopes`` (one per arm).

    Returns:
        None without two arms; else ``{"baseline", "alpha", "min_effect",
        "method", "pairs": [{"base", "candidate", "worse", "metrics", "rates"}]}``
        where ``metrics`` and ``rates`` are ``hopbench compare --format json``'s
        per-scope objects (docs/compare.md): per metric the base's and the
        candidate's count/p50/p90/p99/p999/max (ms), the change, the test, the
        tail confidence intervals and the verdict ("better", "worse", "same").

    Raises:
        ResultsError: a malformed histogram in the summary.
    """
    names = _arm_names(summary)
    scopes = summary.get("scopes")
    if len(names) < 2 or not isinstance(scopes, Mapping):
        return None
    base = names[0]
    pairs: list[dict[str, Any]] = []
    for other in names[1:]:
        # one-scope summaries: compare's shape check sees no difference (same run)
        c = compare_summaries({"complete": True, "scopes": {_SCOPE: scopes.get(base, {})}},
                              {"complete": True, "scopes": {_SCOPE: scopes.get(other, {})}},
                              metrics=ARM_METRICS, base_dir=Path(base), candidate_dir=Path(other))
        scope = c.to_json()["scopes"].get(_SCOPE, {"metrics": {}, "rates": {}})
        worse = c.any_worse
        buffered_base, buffered_other = _buffered(scopes.get(base)), _buffered(scopes.get(other))
        if buffered_base != buffered_other:  # the buffered arm loses on smoothness, whatever the tests say
            verdict = "worse" if buffered_other else "better"
            for name in SMOOTHNESS_METRICS:
                row = scope["metrics"].get(name)
                if isinstance(row, dict):
                    row["verdict"] = verdict
                    row["buffered"] = other if buffered_other else base
            worse = any(isinstance(r, Mapping) and r.get("verdict") == "worse"
                        for r in [*scope["metrics"].values(), *scope["rates"].values()])
        pairs.append({"base": base, "candidate": other, "worse": worse,
                      "metrics": scope["metrics"], "rates": scope["rates"]})
    return {"baseline": base, "alpha": ALPHA, "min_effect": MIN_EFFECT,
            "method": "hopbench compare's tests between the arms' scopes (docs/compare.md)",
            "pairs": pairs}


def add_arm_differences(results_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Add ``arm_differences`` to a run's summary.json (atomically) and return the new summary.

    A summary without two arms is returned unchanged and nothing is written.

    Raises:
        ResultsError: summary.json could not be written, or a malformed histogram.
    """
    block = arm_differences(summary)
    if block is None:
        return summary
    out = dict(summary, arm_differences=block)
    replace_text(results_dir / "summary.json", json.dumps(out, indent=2, allow_nan=False) + "\n")
    return out


def render_arm_differences(block: Mapping[str, Any]) -> str:
    """The differences as plain text: per pair one line per metric (p50 and
    p99 of both arms, the p50 change, the verdict) and the rates that differ; units
    as the summary table labels them (``tok/s``: ``hopbench.measure._metrics.UNIT_LABELS``).

    Args:
        block: ``summary["arm_differences"]``.
    """
    lines: list[str] = []
    for pair in block.get("pairs", []):
        b, c = pair["base"], pair["candidate"]
        lines.append(f"A/B arms: {c} against {b} (alpha {block.get('alpha')}, min effect "
                     f"{block.get('min_effect', 0):.0%}): " + ("WORSE on at least one figure" if pair["worse"]
                                                              else "not worse"))
        lines.append(f"  {'metric':<20} {'unit':<7} {b + ' p50':>12} {c + ' p50':>12} {'change':>8} "
                     f"{b + ' p99':>12} {c + ' p99':>12}  verdict")
        for name, m in pair["metrics"].items():
            rel = m["change"]["p50"]["rel"]
            lines.append(f"  {name:<20} {UNIT_LABELS.get(m['unit'], m['unit']):<7} {num(m['base']['p50']):>12} {num(m['candidate']['p50']):>12} "
                         f"{'-' if rel is None else f'{rel:+.1%}':>8} {num(m['base']['p99']):>12} "
                         f"{num(m['candidate']['p99']):>12}  {m['verdict']}"
                         + (f" ({m['buffered']} buffered)" if m.get("buffered") else ""))
        for name, r in pair["rates"].items():
            if r["verdict"] != "same" or r["base"]["value"] != r["candidate"]["value"]:
                lines.append(f"  {name:<20} rate    {num(r['base']['value']):>12} {num(r['candidate']['value']):>12} "
                             f"{'':>8} {'':>12} {'':>12}  {r['verdict']}")
    return "\n".join(lines)
