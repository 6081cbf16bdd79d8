"""The budget grammar: ``[gate]`` tables parsed into :class:`Budget` records.

Role: pure parsing, shared by ``_profile`` (a profile's ``[gate]`` is checked
at validation, before any load), ``_gate`` (evaluation) and ``hopbench gate
--budget FILE``. It never reads results and never evaluates anything.
User documentation: docs/gate.md.

Invariants:

* A budget key is ``<metric>.<statistic>`` (metrics: :data:`hopbench.measure._metrics.METRICS`)
  or a rate (:data:`hopbench.measure._outcomes.RATES`); ``[gate.scenario.<name>]``
  tables scope budgets to one scenario.
* ``arms.<figure>.p50_diff`` holds an A/B arms run's paired difference: the median over
  the rounds of (arm - first arm) of a per-stream figure (:data:`ARMS_FIGURES`; docs/gate.md,
  "A/B arms: budgets on the paired difference"); its limit may be negative.
* Limits are converted once, here, into the metric's reporting unit (ms for
  times; ns, us, ms, s accepted); rates accept fractions or ``%``.
* Every error is a :class:`ProfileError` naming the file, line and key.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..measure._metrics import METRICS
from ..measure._outcomes import RATES
from ..measure._recorder import ALL
from .._errors import ProfileError
from .._toml import Table, TomlDoc, closest_key, load_toml

__all__ = [
    "ARMS_FIGURES",
    "ARMS_MIN_PAIRS",
    "ARMS_STAT",
    "ARMS_DIGEST_FIGURES",
    "Budget",
    "GateOptions",
    "default_min_count",
    "did_you_mean",
    "load_budget_file",
    "parse_budgets",
    "table_from_mapping",
]

_TIME_UNITS_MS: Final = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}
_LIMIT_RE = re.compile(r"^\s*(<=|>=|<|>)\s*(.+?)\s*$")
_QTY_RE = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(ns|us|µs|ms|s|%)?$")
_BASELINE_RE = re.compile(r"^baseline(?:\s*([*+-])\s*(.+))?$")
_PCT_RE = re.compile(r"^p(\d{1,3}(?:\.\d+)?)$")
_STATS_FIXED: Final = ("count", "min", "mean", "max")
_OPTION_KEYS: Final = ("allow_incomplete", "allow_saturated", "allow_load_not_held")
#: ``capacity.<field>`` budgets on summary.json's ``capacity`` block: field -> unit.
CAPACITY_FIELDS: Final = {"rate_rps": "requests/s", "concurrency": "users"}
ARMS_FIGURES: Final = ("ttft", "itl_p50", "itl_p99", "tpot", "e2e")
"""The per-stream figures an A/B arms run is judged on in pairs (one place: the paired
verdicts, hopbench.views._arm_differences, and ``arms.<figure>.p50_diff`` budgets)."""
ARMS_DIGEST_FIGURES: Final = ("itl_p50", "itl_p99")
"""The paired figures read from a stream's ITL digest (``hopbench.measure._lines.arm_fields``):
quantized to its buckets (``hopbench.measure._digest.bucket_width``), so a difference of one bucket
or less is within their resolution, in the paired verdict and against an ``arms.`` budget's limit."""
ARMS_STAT: Final = "p50_diff"
"""The statistic of a paired figure: the median of the rounds' differences (arm - first arm), ms."""
ARMS_MIN_PAIRS: Final = 10
"""Pairs a paired figure needs for a verdict (and an ``arms.`` budget's default ``min_count``)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """One parsed budget.

    Attributes:
        key: the key as written, e.g. ``"ttft.p99"`` or ``"error_rate"``.
        scope: ``"all"`` or a scenario name.
        metric: a :data:`~hopbench.measure._metrics.METRICS` name, or None for a rate.
        stat: ``count``/``min``/``mean``/``max``/``pNN.N`` (None for a rate).
        percentile: the percentile of a ``pNN.N`` statistic (0..100), else None.
        rate: a :data:`RATES` name, or None for a metric statistic.
        op: ``<=``, ``<``, ``>=`` or ``>``.
        limit_text: the limit as written, e.g. ``"<= 800ms"``.
        limit: the limit in the reporting unit, or None when relative to the baseline.
        baseline_op: ``"*"``, ``"+"``, ``"-"`` or ``"="`` (baseline as is) when relative, else None.
        baseline_operand: factor (``*``) or offset in the reporting unit (``+``, ``-``).
        unit: the reporting unit shown beside values (``ms``, ``tokens/s``, ``""``).
        min_count: samples (or rate denominator) needed for a conclusive verdict.
        inconclusive_passes: an inconclusive budget passes (default: it fails).
        file: the file (or source) the budget came from.
        line: its 1-based line, or None when unknown (a mapping from summary.json).
    """

    key: str
    scope: str
    metric: str | None
    stat: str | None
    percentile: float | None
    rate: str | None
    op: str
    limit_text: str
    limit: float | None
    baseline_op: str | None
    baseline_operand: float
    unit: str
    min_count: int
    inconclusive_passes: bool
    file: str
    line: int | None
    #: a ``capacity.<field>`` budget (:data:`CAPACITY_FIELDS`), else None (docs/slo.md)
    capacity: str | None = None
    #: the client delay the limit already includes, in the reporting unit (``client_included``,
    #: written by ``hopbench calibrate``): the gate's client allowance is what this run's exceeds it by;
    #: None: not given (the run's whole client delay is its allowance), 0 included
    client_included: float | None = None
    #: an ``arms.<figure>.p50_diff`` budget: the paired figure (:data:`ARMS_FIGURES`), else None
    arms_figure: str | None = None

    @property
    def where(self) -> str:
        """``file:line`` (or the file alone) for messages."""
        return self.file if self.line is None else f"{self.file}:{self.line}"


def default_min_count(stat: str | None) -> int:
    """Samples needed before a statistic means anything.

    ``count``: 0; ``pNN``: ``ceil(100 / (100 - NN))`` (p50: 2, p90: 10, p99:
    100, p99.9: 1000), so at least one sample lies above the percentile's
    rank; ``p100``, ``min``, ``mean``, ``max``, rates: 1.
    """
    if stat == "count":
        return 0
    m = _PCT_RE.match(stat or "")
    if m:
        p = float(m.group(1))
        if p >= 100:
            return 1
        return max(1, math.ceil(round(100.0 / (100.0 - p), 9)))
    return 1


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``: did you mean 'X'?`` for the closest known name, or "" (a typo's hint).

    The match is ``_toml.closest_key``'s, shared with profiles' "unknown key"
    messages (ratio >= 0.75, case-insensitive first: ``P99`` -> ``p99``).

    Args:
        word: the name as written.
        known: the names allowed there.

    Returns:
        The hint with its leading ``: ``, or "" when nothing is close. Never raises.
    """
    close = closest_key(word, known)
    if close is None and len(word) <= 4:  # a short name: one wrong character of three is ratio 0.67
        got = difflib.get_close_matches(word.lower(), list(known), n=1, cutoff=0.6)
        close = got[0] if got else None
    return f": did you mean {close!r}?" if close is not None else ""


def _parse_quantity(text: str, budget: str, unit_kind: str, t: Table, key: str) -> float:
    """Parse ``800ms`` / ``0.5%`` / ``500`` into the reporting unit."""
    m = _QTY_RE.match(text.strip())
    if not m:
        raise t.error(key, f"expected a number{' with a unit (ns, us, ms, s)' if unit_kind == 'time' else ''}, got {text!r}")
    number, unit = float(m.group(1)), m.group(2)
    if unit_kind == "time":
        if unit is None or unit == "%":
            raise t.error(key, f"expected a time with a unit (ns, us, ms, s), e.g. '800ms', got {text!r}")
        return number * _TIME_UNITS_MS[unit]
    if unit == "%":
        if unit_kind != "fraction":
            raise t.error(key, f"'%' only applies to rates, got {text!r}")
        return number / 100.0
    if unit is not None:
        raise t.error(key, f"expected a plain number (no unit), got {text!r}")
    return number


def _where(t: Table, key: str) -> tuple[str, int | None]:
    line = t.doc.line_of(t.path + (key,)) if t.doc else None
    file = str(t.doc.path) if t.doc and t.doc.path else "<gate>"
    return file, line


def _parse_one(t: Table, key: str, scope: str) -> Budget:
    value = t.raw(key)
    min_count: int | None = None
    inconclusive = "fail"
    client_included: float | None = None
    if isinstance(value, Mapping):
        sub = Table(value, t.doc, t.path + (key,))
        limit_text = sub.str("limit")
        min_count = sub.int("min_count", None, min=0)
        inconclusive = sub.str("inconclusive", "fail", choices=("fail", "pass"))
        included = sub.number("client_included", None, min=0.0)
        client_included = None if included is None else float(included)  # 0: a calibration with no client delay
        sub.done()
    elif isinstance(value, str):
        limit_text = value
    elif isinstance(value, bool) and "." not in key:  # an option's value under a misspelt name
        raise t.error(key, f"unknown option {key!r}{did_you_mean(key, _OPTION_KEYS) or ''}"
                           f" (options: {', '.join(_OPTION_KEYS)}; a budget is a comparison string "
                           "such as \"<= 800ms\")")
    else:
        raise t.error(key, f"expected a comparison string such as \"<= 800ms\" or a table "
                           f"{{ limit = \"<= 800ms\", min_count = 50 }}, got {value!r}")
    metric: str | None
    stat: str | None
    rate: str | None = None
    percentile: float | None = None
    capacity: str | None = None
    arms_figure: str | None = None
    if key.startswith("arms."):
        parts = key.split(".")
        if len(parts) != 3 or parts[1] not in ARMS_FIGURES or parts[2] != ARMS_STAT:
            fig = parts[1] if len(parts) > 1 else ""
            hint = did_you_mean(fig, ARMS_FIGURES) if fig not in ARMS_FIGURES else ""
            raise t.error(key, f"unknown A/B arms budget{hint or ':'} expected \"arms.<figure>.{ARMS_STAT}\" "
                               f"with a figure among {', '.join(ARMS_FIGURES)}")
        if scope != ALL:
            raise t.error(key, "an A/B arms budget holds every arm against the first: put it in [gate], "
                               "not a scenario's table")
        arms_figure, metric, stat = parts[1], None, None
        unit_kind, unit = "time", "ms"
    elif key.startswith("capacity."):
        capacity = key.partition(".")[2]
        if capacity not in CAPACITY_FIELDS:
            raise t.error(key, f"unknown capacity figure {capacity!r}: expected one of "
                               f"{', '.join('capacity.' + f for f in CAPACITY_FIELDS)}")
        if scope != ALL:
            raise t.error(key, "a capacity budget is for the whole run: put it in [gate], not a scenario's table")
        metric = stat = None
        unit_kind, unit = "number", CAPACITY_FIELDS[capacity]
    elif key in RATES:
        metric = stat = None
        rate = key
        spec_r = RATES[key]
        unit_kind = "fraction" if spec_r.fraction else "number"
        unit = spec_r.unit
    else:
        metric, stat, percentile, unit_kind, unit = _metric_budget(t, key)
    m = _LIMIT_RE.match(limit_text)
    if not m:
        raise t.error(key, f"expected a comparison (<=, <, >=, >) and a limit, e.g. \"<= 800ms\", got {limit_text!r}")
    op, rhs = m.group(1), m.group(2)
    limit: float | None = None
    b_op: str | None = None
    b_operand = 0.0
    bm = _BASELINE_RE.match(rhs)
    if bm and arms_figure is not None:
        raise t.error(key, "an A/B arms budget is already a difference against the first arm: "
                           f"expected a limit such as \"<= 5ms\", got {limit_text!r}")
    if arms_figure is not None:  # a difference: a candidate may be asked to be faster (a negative limit)
        limit = _parse_quantity(rhs, key, unit_kind, t, key)
    elif bm:
        b_op = bm.group(1) or "="
        if b_op == "*":
            b_operand = _parse_quantity(bm.group(2), key, "number", t, key)
            if b_operand <= 0:
                raise t.error(key, f"expected a positive factor after 'baseline *', got {bm.group(2)!r}")
        elif b_op in "+-":
            b_operand = _parse_quantity(bm.group(2), key, unit_kind, t, key)
    else:
        limit = _parse_quantity(rhs, key, unit_kind, t, key)
        if limit < 0:
            raise t.error(key, f"expected a limit >= 0 (no {unit_kind or 'value'} here is negative), "
                               f"got {limit_text.strip()!r}")
        if unit_kind == "fraction" and limit > 1:
            raise t.error(key, f"expected a rate from 0 to 1 (or 0 % to 100 %), got {limit_text.strip()!r}")
    return Budget(
        key=key, scope=scope, metric=metric, stat=stat, percentile=percentile, rate=rate,
        op=op, limit_text=limit_text.strip(), limit=limit, baseline_op=b_op,
        baseline_operand=b_operand, unit=unit,
        min_count=(0 if capacity else ARMS_MIN_PAIRS if arms_figure else default_min_count(stat))
        if min_count is None else min_count,
        inconclusive_passes=inconclusive == "pass", file=_where(t, key)[0], line=_where(t, key)[1],
        capacity=capacity, client_included=client_included, arms_figure=arms_figure,
    )


def _metric_budget(t: Table, key: str) -> tuple[str, str, float | None, str, str]:
    """``<metric>.<statistic>`` of a budget key: (metric, statistic (``p999`` read as
    ``p99.9``), its percentile or None, the limit's unit kind, its unit).

    Raises:
        ProfileError: an unknown metric or statistic, a percentile over 100 (naming the key).
    """
    metric, dot, stat = key.partition(".")
    if not dot or not stat:
        hint = did_you_mean(key, [*RATES, *_OPTION_KEYS])
        raise t.error(key, f"unknown budget{hint or ':'} expected \"<metric>.<statistic>\" (metrics: "
                           f"{', '.join(METRICS)}) or a rate ({', '.join(RATES)})")
    if metric not in METRICS:
        hint = did_you_mean(metric, METRICS)
        raise t.error(key, f"unknown metric {metric!r}{hint or ':'} expected one of {', '.join(METRICS)}")
    if stat == "p999":
        stat = "p99.9"
    percentile: float | None = None
    pm = _PCT_RE.match(stat)
    if pm:
        percentile = float(pm.group(1))
        if percentile > 100:
            raise t.error(key, f"percentile {stat!r} is above 100")
    elif stat not in _STATS_FIXED:
        hint = did_you_mean(stat, (*_STATS_FIXED, "p50", "p90", "p99", "p99.9"))
        raise t.error(key, f"unknown statistic {stat!r}{hint or ':'} expected count, min, mean, max or pNN.N "
                           "(p50, p90, p99, p99.9, ...)")
    spec = METRICS[metric]
    if stat == "count":
        return metric, stat, percentile, "number", ""
    if spec.unit == "ms":
        return metric, stat, percentile, "time", "ms"
    return metric, stat, percentile, "number", spec.unit


@dataclass(frozen=True, slots=True)
class GateOptions:
    """Run-check switches from the gate table (``allow_incomplete``, ``allow_saturated``,
    ``allow_load_not_held``; docs/gate.md)."""

    allow_incomplete: bool = False
    allow_saturated: bool = False
    allow_load_not_held: bool = False


def parse_budgets(t: Table) -> tuple[list[Budget], GateOptions]:
    """Parse a ``[gate]`` table: budgets for "all", ``[gate.scenario.<name>]`` tables, options.

    Raises:
        ProfileError: an unknown metric, statistic or rate, a malformed limit,
            a missing unit, naming the file, line and key.
    """
    budgets: list[Budget] = []
    allow_incomplete = t.bool("allow_incomplete", False)
    allow_saturated = t.bool("allow_saturated", False)
    allow_load_not_held = t.bool("allow_load_not_held", False)
    for key in t.keys():
        if key in _OPTION_KEYS:
            continue
        if key == "scenario":
            scen = t.table("scenario")
            for name in scen.keys():
                sub = scen.table(name)
                for skey in sub.keys():
                    budgets.append(_parse_one(sub, skey, name))
            continue
        budgets.append(_parse_one(t, key, ALL))
    return budgets, GateOptions(allow_incomplete, allow_saturated, allow_load_not_held)


def table_from_mapping(data: Mapping[str, Any], source: str) -> Table:
    doc = TomlDoc(dict(data), Path(source))
    return Table(data, doc, ())


def load_budget_file(path: Path) -> Table:
    """Read a budget TOML file: its ``[gate]`` table when it has one (a profile
    works as a budget file), else the whole file.

    Raises:
        ProfileError: missing, unreadable or invalid file; a profile without a ``[gate]`` table.
    """
    root = load_toml(path).root()
    if "gate" in root.data and isinstance(root.data["gate"], Mapping):
        return root.table("gate")
    # (a budget file's [scenario.NAME] tables are budgets; a profile's [[scenario]] is a list)
    profile_tables = [k for k in ("run", "load", "target") if k in root.data]
    if isinstance(root.data.get("scenario"), list):
        profile_tables.append("[scenario]")
    if profile_tables:  # a profile without budgets: say so, not "run.limit: required key is missing"
        raise ProfileError(f"no [gate] table: this is a profile (it has [{profile_tables[0]}]) without budgets; a "
                           "budget file is a profile's [gate] table or budgets at the top level "
                           "(\"ttft.p99\" = \"<= 800ms\"; docs/gate.md)", path=path)
    import difflib

    for k, v in root.data.items():  # a misspelt [gate] ([gates], [Gate]): said, not "gates.limit: required"
        if isinstance(v, Mapping) and k != "gate" and difflib.get_close_matches(k.lower(), ["gate"], 1, 0.75):
            raise ProfileError(f"unknown table [{k}]: did you mean [gate]? (a budget file is a [gate] table or "
                               "budgets at the top level; docs/gate.md)", path=path)
    return root
