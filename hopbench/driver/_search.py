"""The capacity search's decisions: which load to probe next, and what was found (docs/slo.md).

Role: pure (no clock, no I/O). :func:`stage_probe` judges one stage from its
summary.json (good fraction's lower bound against the target, load held,
hopbench not saturated); :class:`CapacitySearch` decides the next load from
the probes so far; :func:`search` drives it with any function from a load to
a ``Probe`` (the real runner in ``_stages``, a fake in tests).

Strategy: start at ``start``; while stages pass, multiply the load by
``growth`` (capped at ``max``); after the first failure, bisect between the
highest passing and the lowest failing load until they are within
``resolution`` of the passing one (a concurrency search also stops when they
are 1 user apart). Every probe is kept.

Outcomes (``SearchResult.status``):
- "found": capacity is the highest passing load, the next failing one within resolution;
- "at_max": ``max`` passed (capacity >= max);
- "below_min": ``min`` failed (capacity < min);
- "client_saturated": hopbench itself was the bottleneck at a load it had to
  judge: the gateway's capacity was not found; capacity is the highest load that
  passed before it, a lower bound only ("capacity at least 16 requests/s; the
  upper bound was not judged: hopbench saturated at 32 requests/s"), or None
  when none passed ("no capacity reported"); the message gives the probe's primary
  saturation cause and its advice (``--workers`` only when hopbench's own CPU
  was the limit on a machine with idle CPUs: hopbench.engine._saturation), never a
  fix of its own beside it;
- "too_few_requests": a probe failed only because its good fraction's lower
  bound missed the target while the fraction itself met it (a concurrency
  search: and, maybe, because its load was not held, which is the client's):
  too few requests to tell, which is no evidence of the gateway's limit. The search stops there
  (capacity: the highest passing load below it, a lower bound; the fix: a
  longer ``duration_s``) instead of reading it as a failing load;
- "max_probes": the probe budget ran out before the resolution was reached
  (capacity is the highest passing load so far);
- "interrupted": a probe was stopped by a signal, a crash or a lost target.

A probe that measured nothing (no stream started after its warm-up: a short
Poisson probe with no arrival due, a probe interrupted at its start) is
neither passing nor failing: it is no evidence either way, so it is never a
capacity point nor ``lowest_failing``; a search ends there as
"too_few_requests" (0 requests are too few to tell).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._advice import ADVICE
from .._format import load_phrase
from ..config._search_spec import SearchSpec

__all__ = ["Probe", "CapacitySearch", "SearchResult", "search", "stage_probe", "saturation_cause",
           "saturated_message", "SATURATION_FIX", "TOO_FEW", "NOT_MEASURED", "probe_line", "message_head",
           "CAUSE_SEP"]

#: A probe's reason when its good fraction met the target but not its lower bound.
TOO_FEW = "slo: too few requests"

#: A probe's reason when it measured nothing (headline ``started`` 0: no stream started
#: after its warm-up); such a probe neither passes nor fails (docs/slo.md).
NOT_MEASURED = "not measured"

#: What a search limited by hopbench's own saturation tells the user to do when the
#: probe's summary names no cause (an older summary.json): the cause's own advice otherwise.
SATURATION_FIX = ADVICE["no_cause_named"].text


#: A probe's reason when a signal, a crash or a lost target cut it (its summary.json
#: ``complete`` false with ``interrupted_by``): its figures cover part of it, so it
#: neither passes nor fails (docs/slo.md); the search ends "interrupted".
INTERRUPTED = "interrupted"

#: what separates a saturated search's answer from its cause and advice in its message
CAUSE_SEP = "; cause: "


@dataclass(frozen=True, slots=True)
class Probe:
    """One stage judged.

    Attributes:
        load: the offered load (users or requests/s).
        passed: good-fraction lower bound >= target, load held, hopbench not saturated.
        reasons: why it failed (empty when it passed), e.g. ("slo", "load not held");
            ("not measured", ...) when it measured nothing.
        client_saturated: hopbench was saturated (its latencies are not the gateway's).
        figures: what the reports show (see ``stage_probe``), JSON-able.
        measured: False when no stream started after the probe's warm-up: the probe
            is then neither a passing nor a failing load (``passed`` is False).
        interrupted: what cut the probe short (summary.json ``interrupted_by``: "SIGINT",
            "target lost: ..."), else None; such a probe is not judged either.
    """

    load: float
    passed: bool
    reasons: tuple[str, ...] = ()
    client_saturated: bool = False
    figures: Mapping[str, Any] = field(default_factory=dict)
    measured: bool = True
    interrupted: str | None = None


def _ms(scope: Mapping[str, Any], metric: str, stat: str) -> float | None:
    m = (scope.get("metrics") or {}).get(metric)
    if not isinstance(m, Mapping) or not m.get("count"):
        return None
    v = m.get(stat)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _target(slo: Mapping[str, Any]) -> float | None:
    """The strictest target among the scenarios' objectives, None without any."""
    targets = [b.get("target") for k, b in slo.items() if k != "all" and isinstance(b, Mapping)]
    return max((float(t) for t in targets if isinstance(t, (int, float))), default=None)


#: load-block figures a stage keeps besides achieved_rate_rps and mean_busy
#: (``hopbench._format.load_phrase`` reads them; docs/results/summary-json.md, "Capacity")
_LOAD_KEYS = ("requested_rate_rps", "due", "sent", "max_in_flight_hits", "max_in_flight",
              "requested_concurrency")


def stage_probe(load: float, summary: Mapping[str, Any]) -> Probe:
    """Judge one stage from its summary.json (pure).

    Args:
        load: the load the stage offered.
        summary: the stage's summary (``slo``, ``load``, ``saturated``, ``scopes``).

    Returns:
        The probe; its reasons only "interrupted" when a signal, a crash or a lost
        target cut it (``complete`` false with ``interrupted_by``: not judged, its
        ``interrupted`` the cause, its figures' ``interrupted_by`` too); else among "not measured" (headline ``started`` is 0: no
        stream started after the warm-up; the probe is then ``measured`` False and
        its other reasons are only "client saturated" and "run incomplete"),
        "slo" (never without objectives: summary.json ``slo`` null), "slo: too few requests" (the good
        fraction met the target, its lower bound did not: lengthen the stage),
        "load not held", "client saturated", "run incomplete"; its ``figures``: measured,
        good_fraction, good_fraction_lower, target,
        goodput_rps, goodput_tokens_per_s, judged, held (``load.held`` as the stage's
        summary has it: null when not judged), saturated,
        achieved_rate_rps / mean_busy (with an open loop's requested_rate_rps, due,
        sent, max_in_flight_hits, max_in_flight, or a closed loop's
        requested_concurrency, when its load block has them), ttft_p50_ms,
        ttft_p99_ms, itl_p99_ms,
        completed_per_s, folder (when the summary names one).
    """
    slo = summary.get("slo") or {}
    all_slo = slo.get("all") or {}
    load_block = summary.get("load") or {}
    scope = (summary.get("scopes") or {}).get("all") or {}
    saturated = summary.get("saturated") is True
    held = load_block.get("held") is not False
    met = all_slo.get("met") is True
    # the plain run's own rule for "no stream was measured" (hopbench run exits 4 on it)
    started = (summary.get("headline") or {}).get("started")
    measured = not (isinstance(started, int) and not isinstance(started, bool) and started == 0)
    reasons: list[str] = []
    if not measured:
        reasons.append(NOT_MEASURED)
    elif slo and not met:  # (no objectives, summary.json "slo" null: nothing to meet)
        gf, tgt = all_slo.get("good_fraction"), _target(slo)
        few = isinstance(gf, (int, float)) and tgt is not None and gf >= tgt
        reasons.append(TOO_FEW if few else "slo")
    if not held and measured:
        reasons.append("load not held")
    if saturated:
        reasons.append("client saturated")
    if summary.get("complete") is False:
        reasons.append("run incomplete")
    cut = summary.get("interrupted_by") if summary.get("complete") is False else None
    cut = str(cut) if cut else None
    if cut is not None:  # part of a probe is no verdict on its load (docs/slo.md)
        reasons = [INTERRUPTED]
    figures: dict[str, Any] = {
        "load": load,
        "measured": measured,
        "judged": all_slo.get("judged"),
        "good_fraction": all_slo.get("good_fraction"),
        "good_fraction_lower": all_slo.get("good_fraction_lower"),
        "target": _target(slo),
        "goodput_rps": all_slo.get("goodput_rps"),
        "goodput_tokens_per_s": all_slo.get("goodput_tokens_per_s"),
        # null stays null: a stage that measured nothing (or a run.requests budget) was not judged
        "held": load_block.get("held") if isinstance(load_block.get("held"), bool) else None,
        "saturated": saturated,
        "achieved_rate_rps": load_block.get("achieved_rate_rps"),
        "mean_busy": load_block.get("mean_busy"),
        # the rest of its load block's figures, for the gate's words on a stage not held
        **{k: load_block[k] for k in _LOAD_KEYS if k in load_block},
        "ttft_p50_ms": _ms(scope, "ttft", "p50"), "ttft_p99_ms": _ms(scope, "ttft", "p99"),
        "itl_p99_ms": _ms(scope, "itl", "p99"),
        "completed_per_s": (summary.get("headline") or {}).get("completed_per_s"),
        # the run's own words on why it was saturated (its cause: the client's CPU, or neighbours)
        "saturation": next((w for w in summary.get("warnings") or []
                            if isinstance(w, str) and w.startswith("load generator saturated")), None),
        "saturation_cause": saturation_cause(summary) if saturated else None,
        "interrupted_by": cut,
    }
    return Probe(load, not reasons, tuple(reasons), saturated and cut is None, figures, measured, cut)


def _pct(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def probe_line(p: Probe) -> str:
    """A probe's (or stage's) progress line after it ran: its verdict and figures.

    Returns:
        ``  -> pass: good fraction 100.0% (lower bound 92.4%), goodput 8.25 req/s``;
        ``  -> FAIL (slo): ...``; a probe that measured nothing: ``  -> not measured:
        no stream started after the warm-up (0 of 0 due arrivals sent); not a capacity
        point``; a probe cut short: ``  -> interrupted (SIGINT): not judged, neither a
        pass nor a fail; not a capacity point``. A missing figure is ``-``, never ``None``.
        Never raises.
    """
    f = p.figures
    if p.interrupted is not None:
        return f"  -> interrupted ({p.interrupted}): not judged, neither a pass nor a fail; not a capacity point"
    if not p.measured:
        phrase = load_phrase(f)
        extra = [r for r in p.reasons if r != NOT_MEASURED]
        return ("  -> not measured: no stream started after the warm-up"
                + (f" ({phrase})" if phrase else "") + "; not a capacity point"
                + (f" ({', '.join(extra)})" if extra else ""))
    verdict = "pass" if p.passed else "FAIL (" + ", ".join(p.reasons) + ")"
    if f.get("target") is None and f.get("good_fraction") is None:  # no [slo]: nothing to quote
        return f"  -> {verdict}: no objectives set (slo): judged on the load alone"
    goodput = f.get("goodput_rps")
    rate = f"{goodput:g}" if isinstance(goodput, (int, float)) and not isinstance(goodput, bool) else "-"
    return (f"  -> {verdict}: good fraction {_pct(f.get('good_fraction'))} (lower bound "
            f"{_pct(f.get('good_fraction_lower'))}), goodput {rate} req/s")


def saturation_cause(summary: Mapping[str, Any]) -> dict[str, str] | None:
    """A run's primary saturation cause, from summary.json ``generator.saturation``.

    Args:
        summary: a run's (a stage's) summary.json.

    Returns:
        {"kind", "figure", "advice"} of the cause whose ``role`` is "primary" (the
        first cause of an older summary without roles); None when the summary
        has no cause with advice. Never raises.
    """
    gen = summary.get("generator")
    sat = gen.get("saturation") if isinstance(gen, Mapping) else None
    causes = [c for c in (sat.get("causes") or ()) if isinstance(c, Mapping)] if isinstance(sat, Mapping) else []
    primary = next((c for c in causes if c.get("role") == "primary"), causes[0] if causes else None)
    if primary is None or not isinstance(primary.get("advice"), str) or not primary.get("advice"):
        return None
    return {"kind": str(primary.get("kind")), "figure": str(primary.get("figure")), "advice": primary["advice"]}


def saturated_message(probe: Probe, unit: str, lower: float | None = None) -> str:
    """The capacity message of a search or stages stopped by hopbench's own saturation.

    One piece of advice, the probe's primary cause's (hopbench.engine._saturation: more
    workers only where they would find CPU), so that the message never says
    "--workers" beside a cause that says more workers would not help.

    Args:
        probe: the saturated probe (``figures``: ``saturation_cause``, ``saturation``).
        unit: "requests/s" or "users".
        lower: the highest load that passed before the saturated probe (a search's
            lower bound), None when none did.

    Returns:
        ``no capacity reported: at LOAD UNIT hopbench itself was saturated before the
        gateway's limit; cause: FIGURE: ADVICE``; with ``lower``, ``capacity at least
        LOWER UNIT; the upper bound was not judged: at LOAD UNIT hopbench itself was
        saturated ...`` (the bound that was measured, first); without a cause, the probe's
        saturation warning in parentheses (it carries its own advice), else
        :data:`SATURATION_FIX`. Never raises.
    """
    head = (f"no capacity reported: at {probe.load:g} {unit}" if lower is None else
            f"capacity at least {lower:g} {unit}; the upper bound was not judged: at {probe.load:g} {unit}")
    cause = probe.figures.get("saturation_cause")
    if isinstance(cause, Mapping) and cause.get("advice"):
        return (f"{head} hopbench itself was saturated before the gateway's limit{CAUSE_SEP}{cause.get('figure')}: "
                f"{cause.get('advice')}")
    why = probe.figures.get("saturation")
    if why:
        return f"{head} hopbench itself was saturated before the gateway's limit ({why})"
    return f"{head} {SATURATION_FIX}"


def message_head(message: str) -> str:
    """A capacity message without its saturation cause and advice: what the gate, the
    warnings and the exit line repeat, so that a search's output gives the cause once
    (the ``capacity:`` line; issue 39 item 7). Never raises."""
    return message.split(CAUSE_SEP, 1)[0]


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What a search found.

    Attributes:
        status: "found", "at_max", "below_min", "client_saturated", "too_few_requests",
            "max_probes" or "interrupted".
        capacity: the highest passing load (None: none passed); a lower bound only when
            the status is "client_saturated", "too_few_requests", "max_probes" or "interrupted".
        lowest_failing: the lowest load that failed (None: none failed).
        probes: every probe in the order run.
        message: one sentence for the terminal and summary.json.
    """

    status: str
    capacity: float | None
    lowest_failing: float | None
    probes: tuple[Probe, ...]
    message: str


class CapacitySearch:
    """The search's state: feed it probes, ask it for the next load.

    Args:
        spec: the ``[search]`` table.
    """

    def __init__(self, spec: SearchSpec) -> None:
        self.spec = spec
        self.probes: list[Probe] = []
        self.passing: float | None = None
        self.failing: float | None = None
        self.status: str | None = None
        self._integer = spec.mode == "concurrency"

    def _round(self, load: float) -> float:
        return float(math.floor(load)) if self._integer else load

    def next_load(self) -> float | None:
        """The next load to probe, or None when the search is over (see ``status``)."""
        if self.status is not None:
            return None
        s = self.spec
        if not self.probes:
            return self._round(s.start)
        if len(self.probes) >= s.max_probes:
            self.status = "max_probes"
            return None
        lo, hi = self.passing, self.failing
        if hi is None:  # still growing
            assert lo is not None
            if lo >= s.max:
                self.status = "at_max"
                return None
            nxt = self._round(min(lo * s.growth, s.max))
            return nxt if nxt > lo else min(lo + 1, s.max)
        if lo is None:  # nothing passed yet: try the bottom of the range
            if hi <= s.min:
                self.status = "below_min"
                return None
            return self._round(s.min)
        if hi - lo <= s.resolution * lo or (self._integer and hi - lo <= 1):
            self.status = "found"
            return None
        mid = self._round((lo + hi) / 2)
        if mid <= lo or mid >= hi:
            self.status = "found"
            return None
        return mid

    def record(self, probe: Probe) -> None:
        """Take one probe's verdict (a client-saturated probe, or one with too few
        requests to judge, ends the search)."""
        self.probes.append(probe)
        if probe.interrupted is not None:  # cut short: no evidence either way, and the end
            self.status = "interrupted"
            return
        if probe.client_saturated:
            self.status = "client_saturated"
            return
        if not probe.measured:  # no evidence either way: neither passing nor failing
            self.status = "too_few_requests"
            return
        if probe.reasons and set(probe.reasons) == {TOO_FEW}:
            self.status = "too_few_requests"
            return
        if self._integer and TOO_FEW in probe.reasons and set(probe.reasons) <= {TOO_FEW, "load not held"}:
            # Concurrency: a load not held is the client's (its users waited to start, on
            # its side), and the objectives' point estimate was met: still no evidence of the
            # gateway's limit (seen on a busy machine: a 2-user min probe called "below_min")
            self.status = "too_few_requests"
            return
        if probe.passed:
            if self.passing is None or probe.load > self.passing:
                self.passing = probe.load
        elif self.failing is None or probe.load < self.failing:
            self.failing = probe.load

    def result(self) -> SearchResult:
        """The outcome so far (call once ``next_load`` returned None)."""
        status = self.status or "max_probes"
        unit = "users" if self._integer else "requests/s"
        cap = None if status == "below_min" else self.passing
        if status == "client_saturated":
            msg = saturated_message(self.probes[-1], unit, cap)
        elif status == "too_few_requests" and not self.probes[-1].measured:
            msg = (f"inconclusive at {self.probes[-1].load:g} {unit}: nothing was measured (no stream "
                   "started after the probe's warm-up); lengthen [search] duration_s"
                   + (f"; capacity at least {cap:g} {unit}" if cap is not None else ""))
        elif status == "too_few_requests":
            last = self.probes[-1]
            f = last.figures
            msg = (f"inconclusive at {last.load:g} {unit}: good fraction {f.get('good_fraction')} met the "
                   f"target {f.get('target')} but {f.get('judged')} requests are too few to be sure (lower "
                   f"bound {f.get('good_fraction_lower')})"
                   + ("; the load was not held either (the client's)" if "load not held" in last.reasons else "")
                   + "; lengthen [search] duration_s"
                   + (f"; capacity at least {cap:g} {unit}" if cap is not None else ""))
        elif status == "below_min":
            msg = f"capacity below the search's min: {self.spec.min:g} {unit} already failed"
        elif status == "at_max":
            msg = f"capacity at least {self.passing:g} {unit}: the search's max passed"
        elif status == "interrupted":
            n = len(self.probes)
            msg = (f"search interrupted after {n} probe{'s' if n != 1 else ''}"
                   + (f"; highest passing load so far {cap:g} {unit}" if cap is not None else ""))
        elif cap is None:
            n = len(self.probes)
            msg = f"no load passed in {n} probe{'s' if n != 1 else ''}"
        elif status == "found":
            msg = f"capacity {cap:g} {unit} ({self.failing:g} failed; resolution {self.spec.resolution:g})"
        else:
            msg = (f"capacity at least {cap:g} {unit}; the probe budget ({self.spec.max_probes}) ran out "
                   f"before the resolution" + (f" ({self.failing:g} failed)" if self.failing else ""))
        return SearchResult(status, cap, self.failing, tuple(self.probes), msg)


def search(spec: SearchSpec, probe: Callable[[float], Probe]) -> SearchResult:
    """Run a whole search with ``probe`` (a function from a load to its judged stage).

    Args:
        spec: the ``[search]`` table.
        probe: runs (or fakes) one stage at the given load.

    Returns:
        The result with every probe. Raises what ``probe`` raises.
    """
    s = CapacitySearch(spec)
    while (load := s.next_load()) is not None:
        s.record(probe(load))
    return s.result()
