"""The load-shape rule: which runs may be compared (``hopbench compare``, ``hopbench gate --baseline``).

Role: :func:`load_shape` reads the parts of a run that make two runs
comparable (the load mode and its figures, the run's length, warm-up and
workers, the scenarios and their weights) from a summary.json dict, and
:func:`shape_differences` says how two runs' shapes differ. Compare refuses a
pair by it, the gate refuses a baseline by it: one rule, imported by both
without the rest of compare. Pure; reads only the summary dicts.

Invariants:

* The profile's defaults are applied, so ``mode = "concurrency"`` written or
  omitted is the same shape; a summary that recorded ``resolved_load`` is read
  from it.
* Targets, models and emulator settings are not part of the shape: they are
  what one compares.
* Never raises on a malformed summary (missing parts read as null).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["load_shape", "shape_differences"]


_LOAD_DEFAULTS: dict[str, dict[str, Any]] = {"concurrency": {"ramp_up_s": 0},
                  "rate": {"arrival": "poisson", "max_in_flight": 1000}}
_LOAD_KEYS = {"concurrency": ("concurrency", "ramp_up_s"),
              "rate": ("rate_rps", "arrival", "max_in_flight")}


def load_shape(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a run that make two runs comparable, as the run resolved them.

    The profile's defaults are applied (``mode = "concurrency"`` written or
    omitted is the same shape): from the summary's ``resolved_load`` when the
    run recorded it, else from its profile text with hopbench's defaults.

    Returns:
        flat dict: ``load.mode`` and the keys that mode uses (concurrency:
        ``load.concurrency``, ``load.ramp_up_s``; rate: ``load.rate_rps``,
        ``load.arrival``, ``load.max_in_flight``), ``run.duration_s``,
        ``run.requests``, ``run.warmup_s``, ``workers``, and ``scenarios`` (a
        list of [name, weight]). Targets, models and emulator settings are not
        part of the shape: they are what one compares.
    """
    resolved = summary.get("resolved_load")
    if isinstance(resolved, Mapping):
        out = dict(resolved)
        workers = summary.get("workers", 1)
        out["workers"] = workers if workers is not None else 1
        return out
    profile = summary.get("profile")
    p = profile if isinstance(profile, Mapping) else {}
    out = {}
    load = p.get("load")
    load = load if isinstance(load, Mapping) else {}
    mode = load.get("mode", "concurrency")
    out["load.mode"] = mode
    defaults = _LOAD_DEFAULTS.get(mode, {})
    for k in _LOAD_KEYS.get(mode, tuple(load)):
        if k != "mode":
            out[f"load.{k}"] = load.get(k, defaults.get(k))
    run = p.get("run")
    run = run if isinstance(run, Mapping) else {}
    for k in ("duration_s", "requests"):
        out[f"run.{k}"] = run.get(k)
    out["run.warmup_s"] = run.get("warmup_s", 0)
    workers = summary.get("workers", run.get("workers", 1))
    out["workers"] = workers if workers is not None else 1
    scen = p.get("scenario")
    if isinstance(scen, list):
        out["scenarios"] = [[s.get("name") or f"{s.get('protocol')}-{s.get('model')}", s.get("weight", 1)]
                            for s in scen if isinstance(s, Mapping)]
    return out


def shape_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """How two runs' load shapes (:func:`load_shape`) differ: the one rule that
    ``hopbench compare`` and ``hopbench gate --baseline`` refuse a pair by.

    Args:
        a: the base (or baseline) run's summary.json dict.
        b: the candidate (or gated) run's.

    Returns:
        list of ``"<key>: <a's value as JSON> vs <b's value as JSON>"``, in
        ``a``'s key order then ``b``'s extra keys; empty when the shapes are the
        same. Never raises on a malformed summary (missing parts read as null).
    """
    sa, sb = load_shape(a), load_shape(b)
    diffs = []
    for k in list(sa) + [k for k in sb if k not in sa]:
        if sa.get(k) != sb.get(k):
            diffs.append(f"{k}: {json.dumps(sa.get(k))} vs {json.dumps(sb.get(k))}")
    return diffs
