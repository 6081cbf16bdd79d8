"""The gate's checks on the run itself: complete, streams measured, not saturated, load held.

Role: beside the budgets (:mod:`hopbench.views._gate`), ``hopbench gate``
judges whether the run can be taken as evidence at all (docs/gate.md):
:func:`run_checks` reads summary.json's own verdicts (``complete``,
``headline``, ``saturated``, ``load.held``, the stages, the warnings) into
one :class:`RunCheck` each. Pure: reads the summary dict, never a folder.

Invariants:

* A check quotes the summary's own figures and words (``load_phrase``, the
  run's warnings), never a second rule for what the run already judged.
* A failed check fails the gate (exit 1) unless an ``allow_*`` option lets it
  pass; its detail then ends in ``"; allowed (<option>)"``.
* Never raises on a malformed or partial summary: what is missing is not judged.
"""

from __future__ import annotations

import json

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config._gate_spec import GateOptions
from .._format import load_phrase
from ..measure._recorder import ALL

__all__ = ["RunCheck", "run_checks"]


@dataclass(frozen=True, slots=True)
class RunCheck:
    """A check on the run itself (complete, not saturated, load held, ...; docs/gate.md).

    Attributes:
        name: ``run.<check>``, e.g. ``run.load_held``.
        passed: whether this check lets the gate pass (an allowed failure passes).
        detail: one line quoting the summary's own figures; ``"; allowed (<option>)"``
            at its end when an ``allow_*`` option let a failure pass.
    """

    name: str
    passed: bool
    detail: str



def run_checks(summary: Mapping[str, Any], opts: GateOptions) -> list[RunCheck]:
    """The gate's checks on the run itself, in report order (docs/gate.md).

    ``run.complete``; then at most one of ``run.streams_completed`` (no stream
    completed), ``run.streams_measured`` (none started after the warm-up, or a
    stage that measured nothing) and ``run.output_measured`` (completed streams
    carried no output); ``run.scenarios_completed`` (a scenario or arm of
    several completed nothing); ``run.not_saturated``; ``run.load_held``
    (:func:`_load_held_check`).

    Args:
        summary: a summary.json dict.
        opts: the gate's options (``allow_incomplete``, ``allow_saturated``,
            ``allow_load_not_held``: an allowed failure passes, its detail says so).

    Returns:
        list of RunCheck; never raises on a malformed summary (what is missing is not judged).
    """
    checks = []
    complete = summary.get("complete") is True
    by = summary.get("interrupted_by")
    if complete:
        detail = "run ran to its end (not interrupted)"
    elif by:
        detail = f"run did not complete (interrupted_by: {by})"
    elif "ended_at" in summary and summary.get("ended_at") is None:
        # the checkpoint written every few seconds during the load (hopbench.driver._single): the
        # process never wrote its final summary (SIGKILL, out of memory, a power cut)
        detail = ("run did not complete (complete: false): summary.json is a checkpoint written during "
                  "the load (ended_at null): the run was killed before its final write")
    elif "complete" not in summary:  # a damaged or hand-made summary.json: said as it is
        detail = "run did not complete: summary.json has no \"complete\" field (a damaged or hand-made file?)"
    else:
        detail = f"run did not complete (complete: {json.dumps(summary.get('complete'))})"
    if not complete and opts.allow_incomplete:
        detail += "; allowed (allow_incomplete)"
    checks.append(RunCheck("run.complete", complete or opts.allow_incomplete, detail))
    # "complete" means "ran to its end", not "streams completed": a run whose every
    # stream failed is complete and must still fail its gate (hopbench run exits 4).
    head = summary.get("headline")
    # streams the scenario's cancel key closed on purpose count neither way (docs/results.md)
    if isinstance(head, Mapping) and not head.get("completed") and (
            (head.get("started") or 0) - (head.get("client_cancelled") or 0) > 0):
        checks.append(RunCheck("run.streams_completed", False,
                               f"no stream completed of {head.get('started'):,} started"))
    elif isinstance(head, Mapping) and head.get("started") == 0:
        # every stream started in the warm-up (or none at all): nothing to judge, never a pass
        checks.append(RunCheck("run.streams_measured", False,
                               "no stream was measured (none started after the warm-up)"))
    elif isinstance(head, Mapping) and head.get("completed") and not _output_measured(summary):
        # every stream ended with its terminal event, none carried output: nothing was measured
        checks.append(RunCheck("run.output_measured", False,
                               f"none of the {head.get('completed'):,} completed streams carried output "
                               "(no ttft sample, no output tokens)"))
    empty = [str(st.get("folder") or "?") for st in _staged_stages(summary) if st.get("measured") is False]
    if empty and not any(c.name in ("run.streams_completed", "run.streams_measured") for c in checks):
        # a plain [[stage]] run: every stage is load the profile asked for; one that measured
        # nothing is no evidence (hopbench run exits 4 for it; docs/slo.md)
        checks.append(RunCheck("run.streams_measured", False,
                               f"no stream was measured in stage{'s' if len(empty) > 1 else ''} {', '.join(empty)} "
                               "(none started after the warm-up)"))
    failed = _failed_parts(summary)
    if failed and not any(c.name == "run.streams_completed" for c in checks):
        # one scenario (or A/B arm) of several completed nothing: `hopbench run` exits 4 for it
        # (a wrong path, a model the gateway does not route); the others' budgets may all hold
        checks.append(RunCheck("run.scenarios_completed", False, "; ".join(failed)))
    saturated = summary.get("saturated") is True
    # a plain [[stage]] run: every stage is load the profile asked for (as run.load_held)
    stage = summary.get("stage_of_record")
    others = [str(st.get("folder") or "?") for st in _staged_stages(summary)
              if st.get("saturated") is True and st.get("folder") != stage]
    if saturated or others:
        warnings = [w for w in summary.get("warnings") or [] if isinstance(w, str) and "saturated" in w]
        detail = warnings[0] if warnings else "load generator saturated"
        cap = summary.get("capacity")
        if isinstance(cap, Mapping) and cap.get("client_saturated"):
            # a search's (or stages') capacity message gives the cause and its advice: said
            # once, by the capacity line (issue 39 item 7)
            from ..driver._search import message_head

            detail = message_head(detail)
        if others:
            detail = ((detail + "; and " if saturated else "")
                      + f"load generator saturated in stage{'s' if len(others) > 1 else ''} {', '.join(others)}")
        if opts.allow_saturated:
            detail += "; allowed (allow_saturated)"
    elif not isinstance(summary.get("saturated"), bool):
        # a damaged summary.json: not judged, never "not saturated" (the check passes, saying so)
        detail = ("not judged: summary.json has no \"saturated\" field (a damaged or hand-made file?)"
                  if "saturated" not in summary else
                  f"not judged: summary.json's \"saturated\" is {json.dumps(summary.get('saturated'))}, not true or false")
    else:
        detail = "load generator not saturated"
    saturated = saturated or bool(others)
    checks.append(RunCheck("run.not_saturated", (not saturated) or opts.allow_saturated, detail))
    checks.append(_load_held_check(summary, opts))
    return checks


def _load_held_check(summary: Mapping[str, Any], opts: GateOptions) -> RunCheck:
    """``run.load_held``: the run held the load it asked for (summary.json ``load.held``).

    The rule is the run's own (``hopbench.driver._judge.analyse``; docs/results/in-flight.md,
    "Load held"): a closed loop of N users holds when on average at least 90 %
    of N were busy with the target; an open loop when the requests sent reach
    90 % of the arrivals its schedule had due in the load's window (``load.due``)
    and no arrival was dropped at ``max_in_flight``. Budgets measured under a
    lighter load than asked are no evidence of the gateway at that load, so
    ``held: false`` fails unless ``allow_load_not_held``. ``held`` null passes (a
    run with nothing due or measured, which other checks fail; a closed loop's
    ``run.requests`` budget is judged up to its last request, so null only when
    it was taken before any steady window, or in a summary written before issue 39),
    and so does a summary without it; the detail gives the reason
    (:func:`_not_judged_reason`). The figures are said in the
    words of the terminal's ``load:`` line (``hopbench._format.load_phrase``).

    As ``run.not_saturated`` reads the top-level ``saturated``, this reads the
    top-level ``load``: with workers it is the merged load of all of them (the
    load the target saw; ``worker_detail`` records no ``held`` of its own). A
    staged folder's top-level ``load`` is its stage of record's:

    * plain ``[[stage]]`` entries (``stages_kind`` "stages"): every stage is a
      load the profile asked for, so any stage in ``stages`` whose ``held`` is
      false fails the check too: the first such stage (or the stage of record)
      leads the detail with its figures, the others are named after it;
    * a capacity search (``stages_kind`` "search"): only the stage of record is
      judged; probes above the capacity are expected not to hold their load
      (their ``held`` is part of their probe verdicts).

    Args:
        summary: a summary.json dict.
        opts: the gate's options (``allow_load_not_held``).

    Returns:
        the check; never raises on a malformed summary (what is missing is not judged).
    """
    load = summary.get("load")
    load = load if isinstance(load, Mapping) else {}
    held = load.get("held")
    figures = load_phrase(load)
    stage = summary.get("stage_of_record")
    where = f"stage of record {stage}: " if isinstance(stage, str) and stage else ""
    failed = _stages_not_held(summary)
    if held is not False and not failed:
        if held is True and figures:
            return RunCheck("run.load_held", True, f"{where}load held: {figures}")
        if held is True:  # held with no figure: no load reached the target (e.g. unreachable)
            return RunCheck("run.load_held", True, f"{where}load not judged (load.held true without "
                            "figures: nothing was measured)")
        return RunCheck("run.load_held", True, f"{where}load not judged ({_not_judged_reason(summary, load)})")
    if held is False:
        if not figures:  # a summary without the figures: the run's own words
            warned = [w for w in summary.get("warnings") or [] if isinstance(w, str) and "load not held" in w]
            figures = warned[0].split("load not held: ", 1)[-1] if warned else "load.held: false"
        detail = f"{where}load not held: {figures}"
        # the stage of record is one of the stages: the others are named after it
        failed = [f for f in failed if f.get("folder") != stage]
    else:
        first = failed.pop(0)
        detail = f"stage {first.get('folder') or '?'}: load not held: {_stage_figures(first)}"
    if failed:
        detail += (f"; and {len(failed)} more stage{'s' if len(failed) > 1 else ''} not held: "
                   + ", ".join(str(f.get("folder") or "?") for f in failed))
    if opts.allow_load_not_held:
        detail += "; allowed (allow_load_not_held)"
    return RunCheck("run.load_held", opts.allow_load_not_held, detail)


def _not_judged_reason(summary: Mapping[str, Any], load: Mapping[str, Any]) -> str:
    """Why a run's ``load.held`` is null, from what its summary.json shows (docs/gate.md).

    The run leaves ``held`` null (``hopbench.driver._judge.analyse``) for a run bounded by
    ``run.requests``, an open loop with no arrival due in its measured window
    (``load.due`` 0: a short Poisson run, a run stopped in its warm-up), and a closed
    loop with no steady window (``mean_busy`` null); an interruption is said beside it.

    Args:
        summary: a summary.json dict (``profile.run.requests``, ``stages_kind``,
            ``headline.started``, ``complete``, ``interrupted_by``).
        load: its ``load`` block.

    Returns:
        The reason, e.g. ``load.held null: no arrival was due in the measured window
        (load.due 0); no stream was measured``. Never raises.
    """
    if "held" not in load:
        return "summary.json has no load.held"
    profile = summary.get("profile")
    run = profile.get("run") if isinstance(profile, Mapping) else None
    # a stage's or probe's run never has a request budget (hopbench.driver._stages.stage_profile)
    # (an open loop with a budget is judged: its window ends one mean gap after its last arrival;
    # a closed loop's too, up to its last request, when that window lasted BUDGET_WINDOW_MIN_S:
    # a measured mean_busy beside a null held is a shorter one, or a summary written before)
    if not summary.get("stages_kind") and isinstance(run, Mapping) and run.get("requests") is not None \
            and load.get("mode") not in ("rate", "trace") and load.get("mean_busy") is not None:
        from ..driver._judge import BUDGET_WINDOW_MIN_S

        return (f"load.held null: a run bounded by run.requests whose steady window, to its last request, "
                f"lasted under {BUDGET_WINDOW_MIN_S:g} s")
    why: list[str] = []
    if load.get("mode") in ("rate", "trace") and load.get("due") == 0:
        why.append("no arrival was due in the measured window (load.due 0)")
    elif load.get("mode") == "concurrency" and load.get("mean_busy") is None:
        why.append("no steady window was measured (load.mean_busy null)")
    head = summary.get("headline")
    if isinstance(head, Mapping) and head.get("started") == 0:
        why.append("no stream was measured")
    if summary.get("complete") is False and summary.get("interrupted_by"):
        why.append(f"the run was interrupted ({summary.get('interrupted_by')})")
    return "load.held null: " + ("; ".join(why) if why else "the run did not judge it")


def _staged_stages(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The stages of a plain ``[[stage]]`` run (its ``stages`` entries), in the order run;
    [] for a capacity search (its probes above capacity are expected to fail) and for a
    run without stages."""
    kind = summary.get("stages_kind")
    if kind is None:  # (a folder written before stages_kind: its load shape says it)
        shape = summary.get("resolved_load")
        kind = shape.get("load.mode") if isinstance(shape, Mapping) else None
    stages = summary.get("stages")
    if kind != "stages" or not isinstance(stages, list):
        return []
    return [st for st in stages if isinstance(st, Mapping)]


def _stages_not_held(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The stages of a plain ``[[stage]]`` run whose ``held`` is false, in the order run
    ([] for a capacity search, whose probes above capacity are expected to fail it, and
    for a run without stages)."""
    return [st for st in _staged_stages(summary) if st.get("held") is False]


def _stage_figures(stage: Mapping[str, Any]) -> str:
    """A stage's load figures (its entry in ``stages``): the shared phrase when the
    entry has them, else its load and achieved rate or busy users."""
    text = load_phrase(stage)
    if text:
        return text
    load, mode = stage.get("load"), stage.get("mode")
    if not isinstance(load, (int, float)):
        return "held: false"
    if mode == "rate":  # the stage's own load is the rate it asked
        return load_phrase({"requested_rate_rps": load, "achieved_rate_rps": stage.get("achieved_rate_rps")}) \
            or "held: false"
    return load_phrase({"requested_concurrency": int(load), "mean_busy": stage.get("mean_busy")}) or "held: false"


def _output_measured(summary: Mapping[str, Any]) -> bool:
    """Whether the "all" scope holds a TTFT sample or output tokens of completed
    streams; True when the summary does not say (an older or partial summary.json)."""
    scopes = summary.get("scopes")
    scope = scopes.get("all") if isinstance(scopes, Mapping) else None
    if not isinstance(scope, Mapping):
        return True
    metrics = scope.get("metrics")
    counters = scope.get("counters")
    if not isinstance(metrics, Mapping) or not isinstance(counters, Mapping):
        return True
    ttft = metrics.get("ttft")
    return bool(isinstance(ttft, Mapping) and ttft.get("count")) or bool(counters.get("tokens.output.completed"))


def _failed_parts(summary: Mapping[str, Any]) -> list[str]:
    """Of several scenarios, or of the A/B arms, those that completed none of their streams
    (``hopbench.driver._warnings.failed_scenarios`` / ``failed_arms``, the rule ``hopbench run`` exits 4
    by), each said by the run's own warning, or ``scenario NAME: no stream completed``."""
    from ..driver._warnings import NO_OUTPUT_WARNING, failed_arms, failed_scenarios

    scopes = summary.get("scopes")  # the scenarios' resolved names (the profile may not write them)
    names = [k for k in scopes if k != ALL] if isinstance(scopes, Mapping) else []
    warnings = [w for w in summary.get("warnings") or () if isinstance(w, str)]
    out = []
    for kind, failed in (("arm", failed_arms(summary)), ("scenario", failed_scenarios(summary, names))):
        for name in failed:
            said = next((w for w in warnings if w.startswith(f"{kind} {name}: nothing completed")), None)
            out.append(said or f"{kind} {name}: no stream completed")
    # streams of one scenario completed, none carried output: nothing of it was measured (exit 4 too)
    out += [w for w in warnings if w.startswith("scenario ") and f": {NO_OUTPUT_WARNING}" in w]
    return out
