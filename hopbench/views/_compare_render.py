"""What ``hopbench compare`` returns, and how it reads: the comparison records and their rendering.

Role: the frozen records of a comparison (:class:`MetricComparison`,
:class:`RateComparison`, :class:`Comparison`) and their three renderings:
text for the terminal, Markdown for a pull request, JSON (docs/compare.md).
The statistics that fill them are :mod:`hopbench.views._compare`'s. Pure
presentation: nothing here tests or reads a folder.

Invariants:

* Figures are in each metric's reporting unit (ms, tokens/s); a cell is
  :func:`hopbench._format.fmt_cell`'s digits, so a same-read gap reads
  ``<0.001``, never ``1e-06``.
* The JSON form carries no NaN or infinity (``allow_nan=False``; an infinite
  z is null).
* A verdict is one of ``better``, ``worse``, ``same`` and
  :data:`NOT_COMPARABLE`; the closing line names every worse figure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .._errors import UsageError
from .._exit import EXIT_BREACH, EXIT_INCONCLUSIVE, EXIT_OK
from .._format import fmt_cell, fmt_confidence
from ._stats import MannWhitney

_STATS: Final = ("p50", "p90", "p99")  # the statistics a metric's judged figures carry (_verdicts.JUDGED_STATS)

__all__ = ["Comparison", "MetricComparison", "RateComparison", "NOT_COMPARABLE", "SHOWN_STATS", "rel_change"]

NOT_COMPARABLE: Final = "not_comparable"
"""The verdict of a metric or rate one run has nothing of (no sample, no stream, no
measured duration): there is nothing to test, so it is neither "same" nor a change."""
SHOWN_STATS: Final = ("count", "p50", "p90", "p99", "p999", "max")
"""The statistics of a metric a comparison shows, in column order."""


def rel_change(a: float | None, b: float | None) -> float | None:
    """The relative change from ``a`` to ``b`` ((b - a) / |a|); None when either is None or ``a`` is 0."""
    if a is None or b is None or a == 0:
        return None
    return (b - a) / abs(a)



@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric in one scope, base vs candidate.

    Attributes:
        scope: scope name.
        metric: a METRICS name.
        unit: reporting unit (ms, tokens/s).
        base: ``{count, p50, p90, p99, p999, max}`` of the base (reporting unit; None when empty).
        candidate: the same for the candidate.
        test: Mann-Whitney U on the two histograms.
        tails: ``{"p90"|"p99": {"base_ci": [lo, hi] | None, "candidate_ci": ..., "verdict"}}``.
        verdict: ``"better"``, ``"worse"``, ``"same"`` or ``"not_comparable"`` (one
            side has no sample: :data:`NOT_COMPARABLE`).
        reasons: why, one phrase each (empty for "same" with nothing notable).
    """

    scope: str
    metric: str
    unit: str
    base: dict[str, float | int | None]
    candidate: dict[str, float | int | None]
    test: MannWhitney
    tails: dict[str, dict[str, Any]]
    verdict: str
    reasons: tuple[str, ...]

    def change(self, stat: str) -> tuple[float | None, float | None]:
        """(absolute, relative) change of ``stat`` from base to candidate."""
        a, b = self.base.get(stat), self.candidate.get(stat)
        if a is None or b is None:
            return None, None
        return b - a, rel_change(a, b)


@dataclass(frozen=True, slots=True)
class RateComparison:
    """One outcome rate (or throughput figure) in one scope.

    Attributes:
        scope: scope name.
        name: e.g. ``"error_rate"``, ``"failed.rate_limit_error"`` or ``"throughput.output_tokens_per_s"``.
        base: (numerator, denominator, value or None).
        candidate: the same.
        method: the test used (``"two-proportion z"``, ``"fisher exact"``,
            ``"mann-whitney over intervals"``, ``"none"``).
        p_value: its two-sided p-value (1.0 when untestable).
        verdict: better, worse, same, or not_comparable (one side counted no stream
            or has no measured duration).
        unit: ``""`` for proportions, ``"tokens/s"`` or ``"/s"``.
        reason: why the figure is not comparable when a fact other than a side
            without streams says so (token counts of different kinds, or none:
            ``measure._outcomes.tokens_unlike``), else "".
    """

    scope: str
    name: str
    base: tuple[float, float, float | None]
    candidate: tuple[float, float, float | None]
    method: str
    p_value: float
    verdict: str
    unit: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything ``hopbench compare`` reports.

    Attributes:
        base_dir / candidate_dir: the folders (as given).
        metrics: one per (scope, metric) both runs have.
        rates: one per (scope, rate).
        warnings: e.g. an incomplete or saturated run, a forced shape mismatch.
        only_in_base / only_in_candidate: scopes the other run lacks.
        alpha / min_effect: the test settings used.
        verdicts: every figure judged against the two runs' measured noise
            (:class:`hopbench.views._verdicts.Verdicts`): the comparison's verdicts;
            None only for a comparison built by hand (then the samples' verdicts).
    """

    base_dir: str
    candidate_dir: str
    metrics: tuple[MetricComparison, ...]
    rates: tuple[RateComparison, ...]
    alpha: float
    min_effect: float
    warnings: tuple[str, ...] = ()
    only_in_base: tuple[str, ...] = ()
    only_in_candidate: tuple[str, ...] = ()
    shape_differences: tuple[str, ...] = field(default=())
    #: staged runs: hopbench.views._capacity_table.compare_capacity's result, else None
    capacity: Mapping[str, Any] | None = None
    verdicts: Any = None
    #: ``--min-effect`` / ``--min-abs-ms`` as the user gave them ("" when not: the verdicts
    #: judge against the runs' noise alone)
    asked_floors: str = ""

    @property
    def any_worse(self) -> bool:
        """True when any figure is worse beyond noise, or the capacity is worse."""
        if (self.capacity or {}).get("verdict") == "worse":
            return True
        if self.verdicts is not None:
            return bool(self.verdicts.verdict == "worse")
        return any(m.verdict == "worse" for m in self.metrics) or any(r.verdict == "worse" for r in self.rates)

    @property
    def verdict(self) -> str:
        """The pair's verdict: ``worse``, ``inconclusive``, ``better``, ``same`` or ``not judged``
        (no figure in both runs) (docs/compare.md)."""
        if self.any_worse:
            return "worse"
        return str(self.verdicts.verdict) if self.verdicts is not None else "same"

    def exit_code(self, fail_on_worse: bool) -> int:
        """With ``--fail-on-worse``: 1 worse, 5 inconclusive (retry on a quieter runner) or not
        judged (no figure in both runs: a gate that checked nothing), else 0."""
        if not fail_on_worse:
            return EXIT_OK
        return {"worse": EXIT_BREACH, "inconclusive": EXIT_INCONCLUSIVE,
                "not judged": EXIT_INCONCLUSIVE}.get(self.verdict, EXIT_OK)

    def figure_verdicts(self, scope: str, name: str) -> list[Any]:
        """The judged figures of a metric (``ttft``: its p50, p90, p99) or rate in ``scope``."""
        if self.verdicts is None:
            return []
        return [f for f in self.verdicts.figures if f.scope == scope
                and (f.name == name or f.name.rsplit(".", 1)[0] == name and f.name.rsplit(".", 1)[1] in _STATS)]

    def metric_verdict(self, scope: str, name: str, fallback: str) -> str:
        """A metric's or rate's verdict over its judged figures: worse, else inconclusive, else better,
        else same, else not judged; ``fallback`` (the samples' verdict) without verdicts."""
        got = {f.verdict for f in self.figure_verdicts(scope, name)}
        if not got:
            return fallback
        v = next((v for v in ("worse", "inconclusive", "better", "same") if v in got), "not judged")
        # one side has nothing: compare's own word for it says more than "not judged"
        return fallback if v == "not judged" and fallback == NOT_COMPARABLE else v

    def scopes(self) -> list[str]:
        """Scopes in report order (scenarios, then "all")."""
        seen: list[str] = []
        for s in [m.scope for m in self.metrics] + [r.scope for r in self.rates]:
            if s not in seen:
                seen.append(s)
        return [s for s in seen if s != "all"] + (["all"] if "all" in seen else [])

    def render(self, fmt: str) -> str:
        """Render as ``"text"``, ``"markdown"`` or ``"json"``.

        Raises:
            UsageError: an unknown format.
        """
        match fmt:
            case "text":
                return _render_text(self)
            case "markdown":
                return _render_markdown(self)
            case "json":
                return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"
        raise UsageError(f"unknown format {fmt!r}: expected text, markdown or json")

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``scopes.<scope>.metrics.<metric>.verdict`` etc. (docs/compare.md)."""
        scopes: dict[str, Any] = {}
        for s in self.scopes():
            scopes[s] = {"metrics": {}, "rates": {}}
        for m in self.metrics:
            scopes[m.scope]["metrics"][m.metric] = {
                "unit": m.unit,
                "base": m.base,
                "candidate": m.candidate,
                "change": {k: dict(zip(("abs", "rel"), m.change(k))) for k in SHOWN_STATS},
                "test": {"method": "mann-whitney u (tie-corrected, normal approximation)",
                         "u": m.test.u_a, "z": _finite(m.test.z), "p_value": m.test.p_value,
                         "superiority": m.test.superiority, "alpha": self.alpha},
                "tails": m.tails,
                "verdict": self.metric_verdict(m.scope, m.metric, m.verdict),
                "samples_verdict": m.verdict,
                "reasons": list(m.reasons),
                "figures": {f.name.rsplit(".", 1)[1]: f.to_json() for f in self.figure_verdicts(m.scope, m.metric)},
            }
        for r in self.rates:
            scopes[r.scope]["rates"][r.name] = {
                "base": {"numerator": r.base[0], "denominator": r.base[1], "value": r.base[2]},
                "candidate": {"numerator": r.candidate[0], "denominator": r.candidate[1], "value": r.candidate[2]},
                "change": {"abs": None if r.base[2] is None or r.candidate[2] is None or r.reason
                           else r.candidate[2] - r.base[2],
                           "rel": None if _unchanged(r) else rel_change(r.base[2], r.candidate[2])},
                "unit": r.unit,
                "test": {"method": r.method, "p_value": r.p_value, "alpha": self.alpha},
                "verdict": self.metric_verdict(r.scope, r.name, r.verdict),
                "samples_verdict": r.verdict,
                "reason": r.reason or None,
            }
        return {
            "base": self.base_dir,
            "candidate": self.candidate_dir,
            "alpha": self.alpha,
            "min_effect": self.min_effect,
            "worse": self.any_worse,
            "verdict": self.verdict,
            "verdicts": None if self.verdicts is None else self.verdicts.to_json(),
            "warnings": list(self.warnings),
            "shape_differences": list(self.shape_differences),
            "only_in_base": list(self.only_in_base),
            "only_in_candidate": list(self.only_in_candidate),
            "scopes": scopes,
            "capacity": None if self.capacity is None else dict(self.capacity),
        }


def _unchanged(r: RateComparison) -> bool:
    """No change to show: a side has no value, or the values are of different kinds (``reason``)."""
    return r.base[2] is None or r.candidate[2] is None or bool(r.reason)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None



# -- rendering -------------------------------------------------------------------


def _pct(r: float | None) -> str:
    return "" if r is None else f"{r:+.1%}"


def _rate_cell(t: tuple[float, float, float | None], unit: str) -> str:
    if unit:
        return fmt_cell(t[2]) if t[2] is not None else "-"
    return f"{int(t[0])}/{int(t[1])} = {t[2]:.3%}" if t[2] is not None else f"{int(t[0])}/{int(t[1])}"


_VERDICT_TEXT = {"better": "better", "worse": "WORSE", "same": "no significant change",
                 NOT_COMPARABLE: "not comparable", "inconclusive": "inconclusive", "not judged": "not judged"}


def _method_line(c: Comparison) -> str:
    return (f"method: Mann-Whitney U (tie-corrected) on HDR buckets and {fmt_confidence(c.alpha)} quantile CIs "
            f"of p90/p99, alpha {c.alpha:g}; rates: two-proportion z / Fisher"
            + (f"; smallest change asked for: {c.asked_floors}" if c.asked_floors else ""))


def _render_text(c: Comparison) -> str:
    out = [f"base:      {c.base_dir}", f"candidate: {c.candidate_dir}", _method_line(c)]
    out += [f"warning: {w}" for w in c.warnings]
    if c.verdicts is not None:  # what changed beyond noise leads, then the inconclusive figures
        lines = c.verdicts.lines()
        rest = next(i for i, line in enumerate(lines) if line.startswith("same ("))
        out += lines[:rest] + [lines[rest].removesuffix(":") + ": in the tables below"]
    if c.only_in_base or c.only_in_candidate:
        out.append(f"scopes only in base: {', '.join(c.only_in_base) or '-'}; "
                   f"only in candidate: {', '.join(c.only_in_candidate) or '-'}")
    for scope in c.scopes():
        out.append("")
        out.append(f"== {scope} ==")
        for m in (m for m in c.metrics if m.scope == scope):
            out.append(f"  {f'{m.metric} ({m.unit})':<32}{'base':>12} {'candidate':>12} {'change':>12}")
            for k in SHOWN_STATS:
                d, r = m.change(k)
                label = "p99.9" if k == "p999" else k
                out.append(f"    {label:<30}{fmt_cell(m.base[k]):>12} "
                           f"{fmt_cell(m.candidate[k]):>12} {fmt_cell(d) if d is not None else '':>12} {_pct(r):>8}")
            figs = c.figure_verdicts(m.scope, m.metric)
            if figs:  # one sentence per judged figure
                out += [f"    {f.name.rsplit('.', 1)[1]}: {f.judged.reason}" for f in figs]
            else:
                why = f"  ({'; '.join(m.reasons)})" if m.reasons else ""
                out.append(f"    verdict: {_VERDICT_TEXT[m.verdict]}{why}")
        rates = [r for r in c.rates if r.scope == scope]
        if rates:
            out.append("  rates")
            for rc in rates:
                rel = None if _unchanged(rc) else rel_change(rc.base[2], rc.candidate[2])
                v = c.metric_verdict(rc.scope, rc.name, rc.verdict)
                how = rc.reason or f"{rc.method}, p = {rc.p_value:.2g}"
                out.append(f"    {rc.name:<34} {_rate_cell(rc.base, rc.unit):>22} -> {_rate_cell(rc.candidate, rc.unit):<22}"
                           f" {_pct(rel):>8}  {'same' if v == 'same' and c.verdicts is not None else _VERDICT_TEXT.get(v, v)} ({how})")
    from ._capacity_table import capacity_compare_lines

    out += capacity_compare_lines(c.capacity)
    worse = c.any_worse
    out.append("")
    if c.verdicts is not None:
        head = c.verdicts.headline()
        if (c.capacity or {}).get("verdict") == "worse" and not head.startswith("compare: WORSE"):
            rest = head.removeprefix("compare: ")
            head = "compare: WORSE: capacity" + ("" if rest.startswith("nothing to judge") else f"; {rest}")
        out.append(head + _untrusted(c))
        return "\n".join(out) + "\n"
    out.append("compare: " + ("WORSE: " + ", ".join(
        [f"{m.scope} {m.metric}" for m in c.metrics if m.verdict == "worse"]
        + [f"{r.scope} {r.name}" for r in c.rates if r.verdict == "worse"]
        + (["capacity"] if (c.capacity or {}).get("verdict") == "worse" else [])) if worse else "nothing worse")
        + _untrusted(c))
    return "\n".join(out) + "\n"


def _untrusted(c: Comparison) -> str:
    """The closing line's caveat when a side's latencies include client-side delay."""
    saturated = [w.split(": the load generator was saturated")[0] for w in c.warnings
                 if w.endswith(": the load generator was saturated (latencies not trustworthy)")]
    if not saturated:
        return ""
    return (f" (latencies not trustworthy: the load generator was saturated in {' and '.join(saturated)}; "
            "a latency verdict may be the client's or the machine's, not the target's)")


def _md_cell(m: MetricComparison, k: str) -> str:
    d, r = m.change(k)
    if k == "count":
        return f"{fmt_cell(m.base[k])} / {fmt_cell(m.candidate[k])}"
    return f"{fmt_cell(m.base[k])} → {fmt_cell(m.candidate[k])}" + (f" ({_pct(r)})" if r is not None else "")


_MD_VERDICT = {"better": "✅ better", "worse": "❌ worse", "same": "no significant change",
               NOT_COMPARABLE: "⚪ not comparable", "inconclusive": "⚠️ inconclusive", "not judged": "⚪ not judged"}


def _md_verdict(c: Comparison, scope: str, name: str, fallback: str) -> str:
    """A table row's verdict: the noise-aware one's word (``same``, naming the figures not judged)
    where compare judged the figures, else the samples' verdict (``fallback``)."""
    v = c.metric_verdict(scope, name, fallback)
    if v != "same" or c.verdicts is None:
        return _MD_VERDICT[v]
    skipped = [f.name.rsplit(".", 1)[1] for f in c.figure_verdicts(scope, name)
               if f.verdict == "not judged" and f.name != name]
    return "same" + (f" ({', '.join(skipped)} not judged)" if skipped else "")


def _render_markdown(c: Comparison) -> str:
    out = [f"### hopbench compare: `{c.base_dir}` → `{c.candidate_dir}`", "", _method_line(c), ""]
    out += [f"> ⚠️ {w}" for w in c.warnings]
    if c.verdicts is not None:  # what changed beyond noise leads, then the inconclusive figures
        from ._noise import BETTER, INCONCLUSIVE, WORSE

        out += ["", f"**{c.verdicts.headline()}**", ""]
        # the runners and what p and n are, as the text report says them
        lines = c.verdicts.lines()
        for line in lines:
            if line.startswith(("runner: ", "note: ", "p: ")):
                out += [line, ""]  # a paragraph each
        for title, figs in (("Changed beyond noise", c.verdicts.of(WORSE, BETTER)),
                            ("Inconclusive", c.verdicts.of(INCONCLUSIVE))):
            out += [f"{title} ({len(figs)}):", ""] + ([f"- {f.line()}" for f in figs] or ["- none"]) + [""]
        rest = next(line for line in lines if line.startswith("same ("))
        out += [rest.removesuffix(":") + ": in the tables below", ""]
    for scope in c.scopes():
        out += ["", f"#### {scope}", "",
                "| metric | verdict | count | p50 | p90 | p99 | p99.9 | max |",
                "|---|---|---|---|---|---|---|---|"]
        for m in (m for m in c.metrics if m.scope == scope):
            cells = " | ".join(_md_cell(m, k) for k in SHOWN_STATS)
            out.append(f"| {m.metric} ({m.unit}) | {_md_verdict(c, m.scope, m.metric, m.verdict)} | {cells} |")
        rates = [r for r in c.rates if r.scope == scope]
        if rates:
            out += ["", "| rate | verdict | base | candidate | change | test |", "|---|---|---|---|---|---|"]
            for r in rates:
                out.append(f"| {r.name} | {_md_verdict(c, r.scope, r.name, r.verdict)} | "
                           f"{_rate_cell(r.base, r.unit)} | "
                           f"{_rate_cell(r.candidate, r.unit)} | "
                           f"{'' if _unchanged(r) else _pct(rel_change(r.base[2], r.candidate[2]))} | "
                           f"{r.reason or f'{r.method}, p = {r.p_value:.2g}'} |")
    from ._capacity_table import capacity_compare_lines

    out += [line.replace("== capacity ==", "#### capacity").strip() for line in capacity_compare_lines(c.capacity)]
    return "\n".join(out) + "\n"
