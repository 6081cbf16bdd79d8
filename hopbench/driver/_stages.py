"""Running load stages and the capacity search: one results folder, one sub-folder per stage.

Role: the I/O shell around ``_search`` (decisions) and the single-run runners
(``_single.run_profile``, ``_workers.run_profile_workers``, ``_ray``): each stage
or probe is one run of the profile with its load and duration replaced, into
``<results>/<stage label>/`` (a complete results folder: summary.json with one
scope per scenario, streams.jsonl, .hgrm files); the stage × scenario scopes
thus sit in one results folder. The folder's own summary.json is the stage of
record's (the capacity point: the highest passing stage, else the last one)
with two more blocks: ``stages`` (every stage or probe, judged) and
``capacity`` (docs/results/summary-json.md, "Capacity"), so that ``hopbench gate``,
``compare`` and ``report`` work on it unchanged.

Invariants:
- Stages do not overlap: a stage's streams finish (or are cancelled after
  ``run.grace_s``) before the next stage starts, so each stage's latencies
  count from its own requests' intended starts (open loop: the scheduled
  time), and no stage's queue spills into the next one's figures.
- Every probed point is kept, in the order run.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config._records import LoadSpec, Profile
from ._results import replace_text
from ._common import RunOutcome
from ._search import CapacitySearch, Probe, SearchResult, probe_line, saturated_message, stage_probe
from ..config._stage_spec import Stage, stage_label

__all__ = ["stage_profile", "run_stages", "run_search", "capacity_block"]

Runner = Callable[..., RunOutcome]


def stage_profile(profile: Profile, stage: Stage, arrival: str | None = None) -> Profile:
    """``profile`` with its load and duration replaced by ``stage``'s (no stages, no search).

    Args:
        profile: the validated profile.
        stage: the stage to run.
        arrival: the open loop's arrivals (None: the profile's, "poisson" when it is closed-loop).

    Returns:
        A profile that ``run_profile`` runs as one plain run.
    """
    base = profile.load
    if stage.mode == "concurrency":
        n = int(stage.load)
        load = LoadSpec("concurrency", n, 0, 0.0, "constant", n)
    else:
        max_in_flight = base.max_in_flight if base.mode == "rate" else 1000
        arr = arrival or stage.arrival or (base.arrival if base.mode == "rate" else "poisson")
        load = LoadSpec("rate", max_in_flight, 0, stage.load, arr, max_in_flight)  # type: ignore[arg-type]
    run = dataclasses.replace(profile.run, duration_ns=stage.duration_ns, warmup_ns=stage.warmup_ns,
                              requests=None, name=f"{profile.run.name}.{stage.label}")
    raw = dict(profile.raw)
    raw.update(load={"mode": stage.mode, ("concurrency" if stage.mode == "concurrency" else "rate_rps"):
                     int(stage.load) if stage.mode == "concurrency" else stage.load})
    raw["run"] = dict(raw.get("run") or {}, duration_s=stage.duration_ns / 1e9, warmup_s=stage.warmup_ns / 1e9)
    raw.pop("stage", None)
    raw.pop("search", None)
    return dataclasses.replace(profile, load=load, run=run, stages=(), search=None, raw=raw, gate={})


def _run_one(profile: Profile, stage: Stage, out: Path, runner: Runner, arrival: str | None,
             progress: Callable[..., None] | None) -> tuple[Probe, RunOutcome]:
    outcome = runner(stage_profile(profile, stage, arrival), out_dir=out / stage.label, progress=progress)
    probe = stage_probe(stage.load, outcome.summary)
    figures = dict(probe.figures, mode=stage.mode, folder=stage.label, passed=probe.passed,
                   reasons=list(probe.reasons), measured=probe.measured)
    return dataclasses.replace(probe, figures=figures), outcome


def _stopped(outcome: RunOutcome) -> bool:
    """The stage ended by a signal, a crash or a lost target: no further stage runs."""
    reason = outcome.summary.get("interrupted_by") or ""
    return outcome.crashed is not None or (not outcome.complete and bool(reason))


def run_stages(profile: Profile, out: Path, runner: Runner, *,
               on_line: Callable[[str], None] | None = None,
               progress: Callable[..., None] | None = None) -> RunOutcome:
    """Run ``profile``'s ``[[stage]]`` entries in order into ``out``.

    Returns:
        The folder's outcome: its summary is the stage of record's plus
        ``stages`` and ``capacity`` (capacity: the highest passing load when the
        profile has objectives, see :func:`capacity_block`).
    """
    probes: list[Probe] = []
    outcomes: list[RunOutcome] = []
    for stage in profile.stages:
        if on_line:
            on_line(f"stage {stage.label}: {stage.mode} {stage.load:g} for {stage.duration_ns / 1e9:g} s")
        probe, outcome = _run_one(profile, stage, out, runner, None, progress)
        probes.append(probe)
        outcomes.append(outcome)
        if on_line:
            on_line(probe_line(probe))
        if _stopped(outcome):
            break
    has_slo = any(sc.slo is not None for sc in profile.scenarios)
    capacity = None
    if has_slo:
        passing = [p.load for p in probes if p.passed]
        # a stage that measured nothing is no evidence either way (docs/slo.md)
        failing = [p.load for p in probes if not p.passed and p.measured and p.interrupted is None]
        mode = profile.stages[0].mode
        if all(s.mode == mode for s in profile.stages):
            client = any(p.client_saturated for p in probes)
            status = "client_saturated" if client else "stages"
            cap = max(passing) if passing and not client else None
            message = (saturated_message(next(p for p in probes if p.client_saturated),
                                         "requests/s" if mode == "rate" else "users") if client else
                       f"highest passing stage: {cap:g}" if cap is not None else
                       "no stage passed" if failing else "no stage measured anything")
            capacity = capacity_block(profile, mode, SearchResult(
                status, cap, min(failing) if failing else None, tuple(probes), message), None)
    return _finish(profile, out, probes, outcomes, capacity, "stages")


def run_search(profile: Profile, out: Path, runner: Runner, *,
               on_line: Callable[[str], None] | None = None,
               progress: Callable[..., None] | None = None) -> RunOutcome:
    """Run ``profile``'s ``[search]``: probes until the search decides, into ``out``.

    Returns:
        The folder's outcome (summary: the capacity point's stage plus
        ``stages`` and ``capacity``).
    """
    spec = profile.search
    assert spec is not None
    s = CapacitySearch(spec)
    probes: list[Probe] = []
    outcomes: list[RunOutcome] = []
    while (load := s.next_load()) is not None:
        stage = Stage(spec.mode, load, spec.duration_ns, spec.warmup_ns,
                      stage_label(len(probes), spec.mode, load).replace("stage-", "probe-"))
        if on_line:
            on_line(f"probe {stage.label}: {spec.mode} {load:g} for {spec.duration_ns / 1e9:g} s")
        probe, outcome = _run_one(profile, stage, out, runner, spec.arrival, progress)
        s.record(probe)
        probes.append(probe)
        outcomes.append(outcome)
        if on_line:
            on_line(probe_line(probe))
        if _stopped(outcome):
            s.status = "interrupted"
            break
    result = s.result()
    return _finish(profile, out, probes, outcomes, capacity_block(profile, spec.mode, result, spec),
                   "search")


def capacity_block(profile: Profile, mode: str, result: SearchResult, spec: Any) -> dict[str, Any]:
    """summary.json's ``capacity`` block (docs/results/summary-json.md, "Capacity").

    Args:
        profile: the profile (its objectives' target and confidence, its emulator's knee).
        mode: "rate" or "concurrency".
        result: the search's (or the stages') result.
        spec: the ``SearchSpec``, None for plain stages.
    """
    slos = [sc.slo for sc in profile.scenarios if sc.slo is not None]
    out: dict[str, Any] = {
        "mode": mode,
        "unit": "requests/s" if mode == "rate" else "users",
        "status": result.status,
        "rate_rps": result.capacity if mode == "rate" else None,
        "concurrency": int(result.capacity) if mode == "concurrency" and result.capacity is not None else None,
        "lowest_failing": result.lowest_failing,
        "message": result.message,
        "target": max((s.target for s in slos), default=None),
        "confidence": max((s.confidence for s in slos), default=None),
        "probes": len(result.probes),
        "client_saturated": result.status == "client_saturated",
    }
    if spec is not None:
        out.update(min=spec.min, max=spec.max, growth=spec.growth, resolution=spec.resolution,
                   probe_duration_s=spec.duration_ns / 1e9, probe_warmup_s=spec.warmup_ns / 1e9)
    if profile.target.embedded:
        from ..emulator._capacity import knee

        k = knee(profile.emulator_config)
        out["emulator_knee"] = {"concurrency": k.concurrency, "rate_rps": k.rate_rps}
    return out


def _shape(profile: Profile, kind: str) -> dict[str, Any]:
    """The staged run's load shape (``hopbench compare`` compares these): the search's
    settings or the stages, and the scenarios."""
    out: dict[str, Any] = {"load.mode": kind}
    spec = profile.search
    if kind == "search" and spec is not None:
        out.update({"search.mode": spec.mode, "search.min": spec.min, "search.max": spec.max,
                    "search.start": spec.start, "search.growth": spec.growth,
                    "search.resolution": spec.resolution, "search.duration_s": spec.duration_ns / 1e9,
                    "search.warmup_s": spec.warmup_ns / 1e9, "search.arrival": spec.arrival})
    else:
        out["stages"] = [[s.mode, s.load, s.duration_ns / 1e9, s.warmup_ns / 1e9] for s in profile.stages]
    out["scenarios"] = [[s.name, s.weight] for s in profile.scenarios]
    return out


def _finish(profile: Profile, out: Path, probes: list[Probe], outcomes: list[RunOutcome],
            capacity: dict[str, Any] | None, kind: str) -> RunOutcome:
    """Write the folder's summary.json: the stage of record's plus ``stages`` and ``capacity``."""
    if not outcomes:
        raise AssertionError("a stage run runs at least one stage")
    # the highest passing stage, else the last that measured something, else the last
    record = max((i for i, p in enumerate(probes) if p.measured and p.interrupted is None),
                 default=len(outcomes) - 1)
    passing = [i for i, p in enumerate(probes) if p.passed]
    if passing:
        record = max(passing, key=lambda i: probes[i].load)
    base = outcomes[record]
    summary = dict(base.summary)
    summary["name"] = profile.run.name
    from ..config._profile import sanitized

    summary["profile"] = sanitized(profile)
    summary["gate"] = dict(profile.gate) or None
    summary["stage_of_record"] = probes[record].figures.get("folder")
    summary["stages_kind"] = kind
    # the whole staged run's span (the figures below it are the stage of record's)
    first, last = outcomes[0].summary, outcomes[-1].summary
    summary["started_at"], summary["started_at_unix_s"] = first.get("started_at"), first.get("started_at_unix_s")
    summary["ended_at"] = last.get("ended_at")
    t0, t1 = first.get("started_at_unix_s"), last.get("started_at_unix_s")
    if isinstance(t0, (int, float)) and isinstance(t1, (int, float)):
        summary["duration_s"] = round(t1 - t0 + float(last.get("duration_s") or 0.0), 3)
    summary["stages"] = [dict(p.figures) for p in probes]
    summary["resolved_load"] = _shape(profile, kind)
    summary["capacity"] = capacity
    complete = all(o.complete for o in outcomes) and not (capacity or {}).get("status") == "interrupted"
    summary["complete"] = complete
    warnings = list(summary.get("warnings") or [])
    for i, o in enumerate(outcomes):
        if i == record:
            continue
        folder = probes[i].figures.get("folder")
        if probes[i].interrupted is not None:
            warnings.append(f"stage {folder}: interrupted ({probes[i].interrupted}): not judged, "
                            "neither a passing nor a failing load")
        elif not probes[i].measured:
            # a stage or probe that measured nothing is no evidence either way: said here,
            # not only in its own folder, whichever kind of staged run (docs/slo.md)
            warnings.append(f"stage {folder}: no stream was measured (none started after the warm-up): "
                            "neither a passing nor a failing load")
        if kind == "stages":
            # every [[stage]] is load the user asked for (a search's probes past capacity
            # are expected to fail): a stage that did not hold it, or whose client was
            # saturated, says so here too, not only in its own folder (docs/slo.md)
            for w in o.summary.get("warnings") or []:
                if isinstance(w, str) and w.startswith(("load not held", "load generator saturated")):
                    warnings.append(f"stage {folder}: {w}")
    if capacity is not None and capacity.get("client_saturated"):
        summary["saturated"] = True
        warnings.insert(0, "load generator saturated: " + str(capacity["message"]))
    for o, p in zip(outcomes, probes):
        if not o.complete and o.summary.get("interrupted_by"):
            summary["interrupted_by"] = o.summary["interrupted_by"]
    summary["warnings"] = list(dict.fromkeys(warnings))
    out.mkdir(parents=True, exist_ok=True)
    replace_text(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    return RunOutcome(summary, out, complete, next((o.crashed for o in outcomes if o.crashed), None),
                      tuple(s for o in outcomes for s in o.late_signals))
