"""Know the floor before gating: this machine's noise per figure, from repeats of one unchanged run.

Role: from N results folders of the same profile against the same unchanged
target (an A/A calibration: ``hopbench calibrate PROFILE --repeats N``, or
folders already run), report each figure's noise on this runner and propose a
``[gate]`` budget for it, with the budget's measured false-alarm rate and the
smallest change it catches. User documentation: docs/gate.md, "Calibrate first".

How:

* **Noise per figure**: the figure's spread *between* the repeats (their sample
  standard deviation: what the runner does from run to run, which no single run
  can see), beside the median of each run's own noise (its standard error from
  the spread over time, and its client allowance: :mod:`hopbench.views._noise_record`).
* **Proposed budget**: the one-sided upper (lower, for a figure where higher is
  better) ``1 - alpha`` prediction bound of the next run's figure:
  ``mean + t(1 - alpha, N - 1) * sd * sqrt(1 + 1/N)`` (Hahn and Meeker,
  *Statistical Intervals*, 1991, §4.6), at least two HDR resolutions (0.2 %) from
  the mean, rounded outward to 3 significant figures; a run of the unchanged
  target breaches it with probability alpha. ``sd`` is the between-run standard
  deviation, but never less than the repeats' median in-run standard error (issue
  37, design point B): one run's figure varies by at least its own standard error,
  so a spread between a few repeats that fell close together by chance would propose
  a budget the next run breaches far more often than alpha. Fewer than
  :data:`FEW_REPEATS` repeats: a warning says so (the spread of so few is itself uncertain).
* **Default figures**: the gateway's own overhead first (:data:`OVERHEAD_FIGURES`:
  what the gateway adds against the upstream behind it, measured in runs with an
  ``[upstream]``; docs/gateway-overhead.md) when the repeats have it: the figures a
  gateway team gates on (the study of issue 37: ``added_ttft.p50`` and
  ``event_delay.p50`` had no false alarm in 90 pairs), then :data:`DEFAULT_FIGURES`.
* **Measured false-alarm rate**: leave-one-out: each repeat judged (by the gate's
  own rule, :func:`hopbench.views._noise.judge_limits`) against the budget
  proposed from the others; the count of fails over N.
* **The client's delay is in the limit.** The repeats' figures include their
  clients' delay, so the limit does too: the budget records the repeats' median
  client allowance (``client_included``), and the gate excuses only what a run's
  client delay exceeds it by.
* **Smallest change caught**: the budget's distance from the mean plus the
  gate's noise floor of one run (a t-test on its standard error; its client
  allowance beyond the calibration's is 0 on a like runner): a regression of at
  least this fails the gate.

Invariants: reads folders only; needs at least 3 repeats (a spread of two is no
measurement: :class:`hopbench._errors.UsageError` otherwise).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._format import fmt_confidence, plural
from .._errors import UsageError
from ..config._gate_spec import did_you_mean
from ..measure._hdr import Histogram
from ..measure._metrics import METRICS
from ._noise import FAIL, Limit, Noise, judge_limits, t_isf
from ._noise_record import RunNoise, metric_hist, read_run_noise, runner_line, stat_value

__all__ = ["DEFAULT_FIGURES", "FEW_REPEATS", "OVERHEAD_FIGURES", "Calibration", "FigureFloor", "calibrate",
           "calibrate_command", "default_figures"]

DEFAULT_FIGURES: Final = ("ttft.p50", "ttft.p90", "e2e.p50", "tpot.p50", "itl.p50", "output_tokens_per_s.p50",
                          "ttfb.p50")
"""Figures calibrated by default (scope ``all``): the medians and one tail a short run can measure
(a p99 needs 100 samples per batch: several hundred per run)."""
OVERHEAD_FIGURES: Final = ("added_ttft.p50", "event_delay.p50", "first_event_delay.p50", "request_delay.p50",
                           "added_e2e.p50")
"""The gateway overhead's figures, proposed first for repeats run with an ``[upstream]``
(docs/gateway-overhead.md): what the gateway adds, which the client's own noise moves least."""
FEW_REPEATS: Final = 5
"""Fewer repeats than this: the calibration warns (its between-run spread is itself uncertain)."""


def default_figures(summaries: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The figures calibrated when none is asked for: :data:`OVERHEAD_FIGURES` (those every
    repeat measured in scope ``all``) then :data:`DEFAULT_FIGURES`.

    Args:
        summaries: the repeats' summary.json dicts.
    """
    def has(summary: Mapping[str, Any], metric: str) -> bool:
        scopes = summary.get("scopes")
        scope = scopes.get("all") if isinstance(scopes, Mapping) else None
        metrics = scope.get("metrics") if isinstance(scope, Mapping) else None
        m = metrics.get(metric) if isinstance(metrics, Mapping) else None
        return isinstance(m, Mapping) and bool(m.get("count"))

    overhead = tuple(f for f in OVERHEAD_FIGURES if summaries and all(has(s, f.partition(".")[0]) for s in summaries))
    return overhead + DEFAULT_FIGURES


@dataclass(frozen=True, slots=True)
class FigureFloor:
    """One figure's calibration.

    Attributes:
        figure: ``<metric>.<stat>`` (scope ``all`` unless ``scope`` says otherwise).
        scope: the scope.
        unit: reporting unit.
        values: the figure in each repeat, in order.
        between_sd: sample standard deviation between repeats.
        within_se: median of the repeats' own standard errors (None when unknown).
        client: median of the repeats' client allowances.
        op: ``<=`` (lower is better) or ``>=``.
        limit: the proposed budget's limit.
        false_alarms: leave-one-out repeats the gate's rule failed against the others' budget.
        catches: the smallest change (reporting unit, signed the bad way) that fails the gate.
        spread_from: what set the budget's spread: ``"run-to-run sd"``, or ``"in-run se"`` when
            the repeats' own standard error was larger (design point B of issue 37).
    """

    figure: str
    scope: str
    unit: str
    values: tuple[float, ...]
    between_sd: float
    within_se: float | None
    client: float
    op: str
    limit: float
    false_alarms: int
    catches: float
    spread_from: str = "run-to-run sd"

    @property
    def mean(self) -> float:
        """Mean over the repeats."""
        return statistics.fmean(self.values)

    def budget_line(self) -> str:
        """The TOML line of the proposed budget (its limit, and the client delay the limit already
        includes: ``client_included``), with its figures in a comment."""
        unit = self.unit if self.unit == "ms" else ""
        limit = f'"{self.op} {_round(self.limit, self.op)}{unit}"'
        value = f"{{ limit = {limit}, client_included = {self.client:.3g} }}" if self.client else limit
        return (f'"{self.figure}" = {value}'
                f"   # mean {self.mean:.4g}, between-run sd {self.between_sd:.3g}; false alarms "
                f"{self.false_alarms}/{len(self.values)} leave-one-out; catches {self.catches:+.3g} {self.unit} "
                f"({self.catches / self.mean:+.1%})"
                + (f"; floored by the in-run se {self.within_se:.3g}" if self.spread_from == "in-run se"
                   and self.within_se is not None else ""))


def _round(v: float, op: str) -> str:
    """3 significant figures, rounded outward (up for an upper limit, down for a lower one)."""
    if v == 0:
        return "0"
    mag = 10 ** (math.floor(math.log10(abs(v))) - 2)
    r = (math.ceil(v / mag) if op == "<=" else math.floor(v / mag)) * mag
    return f"{r:.{max(0, -int(math.floor(math.log10(mag))))}f}"


@dataclass(frozen=True, slots=True)
class Calibration:
    """A calibration's figures and how it was made.

    Attributes:
        folders: the repeats.
        figures: one :class:`FigureFloor` each.
        alpha: the budgets' false-alarm rate by design.
        runners: each repeat's runner line.
    """

    folders: tuple[str, ...]
    figures: tuple[FigureFloor, ...]
    alpha: float
    runners: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    def render(self) -> str:
        """Text: the warnings, the table of floors, then a ``[gate]`` table to paste."""
        out = [f"warning: {w}" for w in self.warnings]
        out += [f"calibration: {len(self.folders)} {plural(len(self.folders), 'repeat')} of one unchanged run; budgets at the "
                f"{fmt_confidence(self.alpha)} prediction bound (false-alarm rate {self.alpha:g} by design)"]
        out += [f"  runner {i + 1}: {r or 'unknown'}" for i, r in enumerate(self.runners)]
        out.append(f"  {'figure':<28}{'mean':>10}{'run-to-run sd':>15}{'in-run se':>11}{'client':>9}"
                   f"{'budget':>14}{'false alarms':>14}  {'catches':>16}")
        for f in self.figures:
            se = "-" if f.within_se is None else f"{f.within_se:.3g}"
            out.append(f"  {f.scope + ' ' + f.figure:<28}{f.mean:>10.4g}{f.between_sd:>15.3g}{se:>11}"
                       f"{f.client:>9.3g}{f.op + ' ' + _round(f.limit, f.op):>14}"
                       f"{f'{f.false_alarms}/{len(f.values)}':>14}  {f'{f.catches:+.3g} ({f.catches / f.mean:+.1%})':>16}")
        out += ["", "# proposed budgets (hopbench calibrate): paste into the profile", "[gate]"]
        out += [f.budget_line() for f in self.figures if f.scope == "all"]
        for scope in sorted({f.scope for f in self.figures} - {"all"}):
            out += ["", f"[gate.scenario.{scope}]"] + [f.budget_line() for f in self.figures if f.scope == scope]
        return "\n".join(out) + "\n"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (docs/gate.md, "Calibrate first")."""
        return {"folders": list(self.folders), "alpha": self.alpha, "runners": list(self.runners),
                "warnings": list(self.warnings),
                "figures": [{"scope": f.scope, "figure": f.figure, "unit": f.unit, "values": list(f.values),
                             "mean": f.mean, "between_sd": f.between_sd, "within_se": f.within_se,
                             "client": f.client, "op": f.op, "limit": f.limit,
                             "false_alarms": f.false_alarms, "repeats": len(f.values), "catches": f.catches,
                             "spread_from": f.spread_from}
                            for f in self.figures]}


def _value(summary: Mapping[str, Any], scope: str, metric: str, stat: str) -> float | None:
    scopes = summary.get("scopes")
    s = scopes.get(scope) if isinstance(scopes, Mapping) else None
    h: Histogram = metric_hist(s if isinstance(s, Mapping) else {}, metric, f"scopes.{scope}")
    return stat_value(h, stat)


def _bound(values: Sequence[float], alpha: float, upper: bool, floor_sd: float = 0.0) -> float:
    n = len(values)
    # a run's figure varies by at least its own standard error: a smaller spread between a few
    # repeats is chance, and a budget from it false-alarms (issue 37, design point B)
    sd = max(statistics.stdev(values), floor_sd)
    # never tighter than the histograms' resolution (3 significant figures: 0.1 %), which a
    # spread of 0 between a few runs only means they fell in one bucket
    margin = max(t_isf(alpha, n - 1) * sd * math.sqrt(1 + 1 / n), 0.002 * abs(statistics.fmean(values)))
    return statistics.fmean(values) + (margin if upper else -margin)


def calibrate(folders: Sequence[Path], summaries: Sequence[Mapping[str, Any]], *,
              figures: Sequence[str] | None = None, scopes: Sequence[str] = ("all",),
              alpha: float = 0.01) -> Calibration:
    """Calibrate this runner's noise from repeats of one unchanged run.

    Args:
        folders: the repeats' results folders (same profile, same target).
        summaries: their summary.json dicts, in the same order.
        figures: ``<metric>.<stat>`` figures to calibrate; None: :func:`default_figures`.
        scopes: the scopes to calibrate them in.
        alpha: the proposed budgets' designed false-alarm rate (and the gate's level).

    Returns:
        Calibration; a figure some repeat lacks is left out, with a warning naming the repeats.

    Raises:
        UsageError: fewer than 3 repeats, an unknown figure, or no figure with a value in every
            repeat (there would be nothing to propose: an empty ``[gate]``).
    """
    if len(folders) < 3:
        raise UsageError(f"{len(folders)} {plural(len(folders), 'repeat')}: at least 3 are needed (a spread of two runs is "
                         "no measurement; 5 or more make budgets that catch smaller changes)")
    parsed = []
    for fig in default_figures(summaries) if figures is None else figures:
        metric, _, stat = fig.partition(".")
        if metric in METRICS and not stat:  # a metric alone: which statistic?
            raise UsageError(f"unknown figure {fig!r}: name a statistic too: did you mean '{metric}.p50'? "
                             "(expected <metric>.<stat>: mean, min, max or pNN.N)")
        if metric not in METRICS or not stat:
            raise UsageError(f"unknown figure {fig!r}: unknown metric {metric!r}{did_you_mean(metric, METRICS) or ':'} "
                             f"expected <metric>.<stat>, e.g. ttft.p50 (metrics: {', '.join(METRICS)})")
        if stat not in _STATS and not _PCT.fullmatch(stat):  # (a typo read no value: an empty [gate] to paste)
            raise UsageError(f"unknown figure {fig!r}: unknown statistic {stat!r}"
                             f"{did_you_mean(stat, (*_STATS, 'p90', 'p99')) or ':'} expected mean, min, max or "
                             "pNN.N (p50, p90, p99, p99.9)")
        parsed.append((fig, metric, stat))
    tags = [f"{s}.{m}" for s in scopes for _, m, _ in parsed]
    noises: list[RunNoise] = [read_run_noise(f, s, tags) for f, s in zip(folders, summaries)]
    out = []
    lacking: dict[str, list[str]] = {}  # figure -> the repeats without a value for it
    for scope in scopes:
        for fig, metric, stat in parsed:
            values = [_value(s, scope, metric, stat) for s in summaries]
            if any(v is None for v in values):
                lacking[fig if scope == "all" else f"{scope}.{fig}"] = [
                    str(f) for f, v in zip(folders, values) if v is None]
                continue
            vs = [float(v) for v in values if v is not None]
            upper = not METRICS[metric].higher_is_better
            op = "<=" if upper else ">="
            runs = [rn.noise(scope, metric, stat) for rn in noises]
            ses = [n.se for n in runs if n.se is not None]
            client = statistics.median(n.client for n in runs)
            within = statistics.median(ses) if ses else 0.0
            limit = _bound(vs, alpha, upper, within)
            alarms = 0
            for i in range(len(vs)):
                others = vs[:i] + vs[i + 1:]
                lim = _bound(others, alpha, upper, within) if len(others) >= 2 else limit
                (j,) = judge_limits([Limit(vs[i], lim, op, METRICS[metric].unit, runs[i], 10**9, 0, upper)], alpha)
                alarms += j.verdict == FAIL
            typical = Noise(statistics.median(ses) if ses else None, int(statistics.median(n.batches for n in runs)),
                            client)
            floor = 0.0  # a like runner's client delay is in the limit already (client_included)
            if typical.se is not None:
                floor += t_isf(alpha, max(typical.batches - 1, 1)) * typical.se
            mean = statistics.fmean(vs)
            catches = (limit - mean + floor) if upper else -(mean - limit + floor)
            out.append(FigureFloor(fig, scope, METRICS[metric].unit, tuple(vs), statistics.stdev(vs),
                                   statistics.median(ses) if ses else None, client, op, limit, alarms, catches,
                                   "in-run se" if within > statistics.stdev(vs) else "run-to-run sd"))
    warnings: tuple[str, ...] = () if len(folders) >= FEW_REPEATS else (
        f"{len(folders)} {plural(len(folders), 'repeat')}: fewer than {FEW_REPEATS}; the spread between so few runs is itself uncertain, "
        "so each budget's spread is at least the repeats' own in-run standard error; run "
        f"{FEW_REPEATS - len(folders)} more for budgets to trust",)
    if lacking:
        def where_not(where: list[str]) -> str:
            if len(where) == len(folders):  # no repeat has it: the run does not measure it
                return "in no repeat: the profile does not measure it (the gateway overhead needs an [upstream])"
            return f"not in {', '.join(where[:3])}{', ...' if len(where) > 3 else ''}"

        said = "; ".join(f"{fig} ({where_not(where)})" for fig, where in list(lacking.items())[:4]) + (
            "; ..." if len(lacking) > 4 else "")
        if not out:
            nothing = any(all(_value(s, sc, m, st) is None for sc in scopes for _, m, st in parsed)
                          for s in summaries)
            raise UsageError(f"no figure has a value in every repeat, so there is no budget to propose: {said}"
                             + ("; a repeat that measured nothing (interrupted, or no stream completed) is no "
                                "repeat" if nothing else ""))
        warnings += (f"left out: {len(lacking)} {plural(len(lacking), 'figure')} some repeat did not measure: {said}",)
    idle = _idle_runner(summaries)
    if idle is not None:
        warnings += (f"every repeat ran on an idle runner (neighbours at most {idle:.2f} cores): a run beside "
                     "neighbours also waits for a core in the processes hopbench does not measure as its own "
                     "(the gateway, the emulator), and those waits read as their time, which these budgets do "
                     "not hold; where the runner is shared, add repeats beside its usual neighbours "
                     "(docs/gate.md, \"Calibrate first\")",)
    return Calibration(tuple(str(f) for f in folders), tuple(out), alpha,
                       tuple(runner_line(s) for s in summaries), warnings)


_STATS: Final = ("p50", "mean", "min", "max", "p999")
_PCT: Final = re.compile(r"p(100|\d{1,2}(\.\d+)?)")

IDLE_NEIGHBOURS: Final = 0.25
"""Neighbours' CPU (cores) under which a repeat's runner counts as idle: half of
:func:`hopbench.views._noise_record.busier`'s half a core."""


def _idle_runner(summaries: Sequence[Mapping[str, Any]]) -> float | None:
    """The busiest repeat's neighbours' CPU (cores) when every repeat's runner was idle (all known,
    all under :data:`IDLE_NEIGHBOURS`), else None."""
    got = []
    for s in summaries:
        g = s.get("generator")
        nb = g.get("neighbours_cpu_cores") if isinstance(g, Mapping) else None
        if not isinstance(nb, (int, float)) or isinstance(nb, bool):
            return None
        got.append(float(nb))
    return max(got) if got and max(got) < IDLE_NEIGHBOURS else None


def _workload_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """How two runs' emulators and scenarios differ (profile tables ``emulator``, ``upstream``
    but its addresses, ``scenario``): ``"<key>: <a> vs <b>"``. A run whose emulator streams
    slower is no repeat, though its load shape is the same. The target's URL and the upstream's
    address may differ (a CI job's ports). Never raises on a malformed summary."""
    def flat(prefix: str, v: Any, out: dict[str, Any]) -> None:
        if isinstance(v, Mapping):
            for k, x in v.items():
                flat(f"{prefix}.{k}", x, out)
        else:
            out[prefix] = v

    sides = []
    for s in (a, b):
        p = s.get("profile")
        p = p if isinstance(p, Mapping) else {}
        out: dict[str, Any] = {}
        for table in ("emulator", "upstream"):
            t = p.get(table)
            if isinstance(t, Mapping):
                flat(table, {k: v for k, v in t.items() if k not in ("listen", "record")}, out)
        sc = p.get("scenario")
        if isinstance(sc, list):
            for i, x in enumerate(sc):
                flat(f"scenario[{i}]", x, out)
        sides.append(out)
    fa, fb = sides
    return [f"{k}: {json.dumps(fa.get(k))} vs {json.dumps(fb.get(k))}"
            for k in list(fa) + [k for k in fb if k not in fa] if fa.get(k) != fb.get(k)]


def calibrate_command(folders: Sequence[Path], *, figures: Sequence[str] | None = None,
                      scopes: Sequence[str] = ("all",), alpha: float = 0.01,
                      force: bool = False) -> Calibration:
    """``hopbench calibrate``: read the repeats' folders and calibrate (:func:`calibrate`;
    ``figures`` None: :func:`default_figures`).

    Args:
        force: take repeats that did not complete (``complete: false``: interrupted, or a
            checkpoint), with a warning; compare's rule (docs/compare.md).

    Raises:
        UsageError: fewer than 3 folders, a folder given twice or copied (one run: the same
            ``started_at_unix_s`` and ``ended_at``), a repeat that did not complete (without
            ``force``), folders that are not repeats of one run (another load shape:
            ``views._load_shape``, compare's rule; another emulator or scenario), an unknown
            figure, no figure measured by every repeat, ``alpha`` outside (0, 0.5).
        ResultsError: a folder that cannot be read.
    """
    from ..driver._results import read_summary
    from ._compare import _partial_why
    from ._load_shape import shape_differences

    if not 0 < alpha < 0.5:
        raise UsageError(f"--alpha: expected a number between 0 and 0.5, got {alpha}")
    if len(folders) < 3:
        raise UsageError(f"{len(folders)} {plural(len(folders), 'repeat')}: at least 3 are needed (a spread of two runs is "
                         "no measurement; 5 or more make budgets that catch smaller changes)")
    seen: dict[Path, Path] = {}
    for f in folders:  # a folder given twice is no repeat: its spread would read 0
        key = f.resolve()
        if key in seen:
            raise UsageError(f"{f}: given twice ({seen[key]}): repeats are separate runs of one profile")
        seen[key] = f
    summaries = [read_summary(f) for f in folders]
    started: dict[tuple[Any, Any], Path] = {}
    partial: list[str] = []
    for f, s in zip(folders, summaries):
        if s.get("started_at_unix_s") is not None:  # a copied folder: one run twice, its spread 0
            run = (s.get("started_at_unix_s"), s.get("ended_at"))
            if run in started:
                raise UsageError(f"{f} and {started[run]} are copies of one run (the same started_at_unix_s "
                                 "and ended_at): repeats are separate runs of one profile")
            started[run] = f
        if s.get("complete") is not True:  # cut short: its figures cover part of the load (compare's rule)
            if not force:
                raise UsageError(f"{f}: the run did not complete ({_partial_why(s)}): its figures cover only "
                                 "part of the planned load, so its spread is not the runner's; run it again, "
                                 "or pass --force to calibrate with it anyway")
            partial.append(str(f))
    for f, s in zip(folders[1:], summaries[1:]):  # repeats of one unchanged run, as compare pairs them
        diffs = shape_differences(summaries[0], s) + _workload_differences(summaries[0], s)
        if diffs:
            raise UsageError(f"{f}: not a repeat of {folders[0]} (the same profile, load and target): "
                             + "; ".join(diffs[:4]) + ("; ..." if len(diffs) > 4 else ""))
    cal = calibrate([f if f.is_dir() else f.parent for f in folders], summaries, figures=figures,
                    scopes=scopes, alpha=alpha)
    if partial:
        cal = dataclasses.replace(cal, warnings=(
            f"{', '.join(partial)}: the run did not complete (calibrated with --force): its figures cover "
            "only part of the planned load",) + cal.warnings)
    return cal
