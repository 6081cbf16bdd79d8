"""Latency against offered load, with the knee marked: the terminal table of a staged run.

Role: turn summary.json's ``stages`` and ``capacity`` blocks (hopbench.driver._stages;
docs/results/summary-json.md, "Capacity") into a rich table for the terminal and plain rows
for report.html. Pure apart from printing to the given console.

The knee is the capacity point: the highest load that passed (marked "◀").
Loads are sorted ascending; every probed point is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["capacity_rows", "render_capacity", "COLUMNS", "compare_capacity", "capacity_compare_lines", "slo_lines"]

#: (header, stages-entry field, format) of each column after the load.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("TTFT p50", "ttft_p50_ms", "{:.1f}"),
    ("TTFT p99", "ttft_p99_ms", "{:.1f}"),
    ("ITL p99", "itl_p99_ms", "{:.1f}"),
    ("good", "good_fraction", "{:.1%}"),
    ("lower", "good_fraction_lower", "{:.1%}"),
    ("req/s", "goodput_rps", "{:.2f}"),
    ("tok/s", "goodput_tokens_per_s", "{:.0f}"),
)


def _fmt(value: Any, fmt: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value)
    return "-"


def capacity_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per probed load, ascending, with ``knee`` (the capacity point) and ``verdict``.

    Args:
        summary: a staged run's summary.json (``stages``, ``capacity``).

    Returns:
        Rows: the stages entries plus ``knee`` (bool) and ``verdict`` ("pass",
        "fail: reasons", "not measured: ..." for a stage that measured nothing, or
        "interrupted (SIGINT): not judged" for one cut short), ascending by load (in the order run when stages mix
        concurrency and rate); empty when the summary has no stages.
    """
    stages = summary.get("stages") or []
    cap = summary.get("capacity") or {}
    knee = cap.get("rate_rps") if cap.get("mode") == "rate" else cap.get("concurrency")
    entries = [s for s in stages if isinstance(s, Mapping)]
    if len({s.get("mode") for s in entries}) <= 1:  # one kind of load: ascending; mixed: as run
        entries.sort(key=lambda s: s.get("load") or 0)
    rows = []
    for entry in entries:
        row = dict(entry)
        row["knee"] = knee is not None and entry.get("load") == knee
        row["verdict"] = ("pass" if entry.get("passed") else
                          # cut short, or measured nothing: neither a pass nor a fail (docs/slo.md)
                          f"interrupted ({entry['interrupted_by']}): not judged" if entry.get("interrupted_by")
                          else "not measured: no stream started after the warm-up" if entry.get("measured") is False
                          else "fail: " + ", ".join(entry.get("reasons") or []))
        rows.append(row)
    return rows


def render_capacity(summary: Mapping[str, Any], console: Console) -> None:
    """Print the latency-vs-load table and the capacity line (nothing without stages)."""
    rows = capacity_rows(summary)
    if not rows:
        return
    cap = summary.get("capacity") or {}
    modes = {r.get("mode") for r in rows}
    mixed = len(modes) > 1
    unit = ("c: users, r: requests/s" if mixed else cap.get("unit")
            or ("requests/s" if modes == {"rate"} else "users"))
    table = Table(title=f"latency (ms) vs offered load ({unit}); good fraction, its lower bound, "
                        "goodput", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True, show_edge=False)
    table.add_column("load", justify="right")
    for header, _, _ in COLUMNS:
        table.add_column(header, justify="right")
    # The column holds "pass", "fail", "interrupted" or "-" only: a failing probe's reasons (up to four, ~70
    # characters) go under the table, one line each, so that the table fits in 80 columns
    # and no reason is cut (rich crops a table wider than the console).
    table.add_column("verdict")
    reasons: list[str] = []
    for row in rows:
        prefix = ("c" if row.get("mode") == "concurrency" else "r") if mixed else ""
        load = f"{prefix}{row['load']:g}"
        style = "bold" if row["knee"] else None
        passed = row["verdict"] == "pass"
        if not passed:
            reasons.append(f"load {load}: {row['verdict']}")
        table.add_row(load + (" ◀" if row["knee"] else ""),
                      *(_fmt(row.get(field), fmt) for _, field, fmt in COLUMNS),
                      "pass" if passed else "-" if row["verdict"].startswith("not measured")
                      else "interrupted" if row["verdict"].startswith("interrupted") else "fail",
                      style=style)
    console.print(table)
    for line in reasons:  # (reasons are text, not markup); wrapped at the console's width
        console.print(escape(line), highlight=False)
    if cap:
        color = "red" if cap.get("client_saturated") else "bold"
        # the message is text: "lengthen [search] duration_s" is not a markup tag
        message = str(cap.get("message"))  # "capacity 20 requests/s ...": the label says it once
        message = message.removeprefix("capacity ") if message.startswith("capacity ") else message
        console.print(f"[{color}]capacity: {escape(message)}[/{color}]", highlight=False, soft_wrap=True)
        knee = cap.get("emulator_knee")
        if isinstance(knee, Mapping) and (knee.get("rate_rps") or knee.get("concurrency")):
            configured = knee.get("rate_rps") if cap.get("mode") == "rate" else knee.get("concurrency")
            if configured is not None:
                console.print(f"embedded emulator's configured knee: {configured:.4g} {unit}", highlight=False)


def compare_capacity(base: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Any] | None:
    """The capacity difference between two staged runs (``hopbench compare``; docs/compare.md).

    A search knows its capacity only to its resolution (the failing load is at
    most ``resolution`` above the passing one), so a change within the larger
    of the two resolutions is "same"; a lower capacity beyond it is "worse".

    Args:
        base, candidate: the two summary.json dicts.

    Returns:
        None when neither has a ``capacity`` block; else ``{mode, unit, base,
        candidate, change: {abs, rel}, resolution, verdict, note}``: verdict
        "better", "worse", "same" or "unknown" (one side has no capacity, the
        modes differ, or a side's search was limited by hopbench itself).
    """
    a, b = base.get("capacity"), candidate.get("capacity")
    if not isinstance(a, Mapping) and not isinstance(b, Mapping):
        return None
    a = a if isinstance(a, Mapping) else {}
    b = b if isinstance(b, Mapping) else {}
    mode = a.get("mode") or b.get("mode")
    field = "rate_rps" if mode == "rate" else "concurrency"
    va, vb = a.get(field), b.get(field)
    res = max(float(a.get("resolution") or 0.0), float(b.get("resolution") or 0.0))
    out: dict[str, Any] = {"mode": mode, "unit": a.get("unit") or b.get("unit"), "base": va,
                           "candidate": vb, "change": {"abs": None, "rel": None}, "resolution": res,
                           "verdict": "unknown", "note": ""}
    if a.get("mode") != b.get("mode"):
        def shape(c: Mapping[str, Any]) -> str:
            return str(c["mode"]) if c.get("mode") else "no capacity (not a search)"

        out["note"] = f"capacity modes differ ({shape(a)} vs {shape(b)})"
        return out
    if not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
        msgs = [f"{side}: {c.get('message') or 'no capacity block'}" for side, c, v in
                (("base", a, va), ("candidate", b, vb)) if not isinstance(v, (int, float))]
        out["note"] = "; ".join(msgs)
        return out
    rel = (vb - va) / va if va else None
    out["change"] = {"abs": vb - va, "rel": rel}
    if rel is None or abs(rel) <= res:
        out["verdict"] = "same"
        out["note"] = f"within the search's resolution ({res:.0%})" if res else ""
    else:
        out["verdict"] = "better" if rel > 0 else "worse"
    return out


def capacity_compare_lines(cap: Mapping[str, Any] | None) -> list[str]:
    """``hopbench compare``'s text lines for :func:`compare_capacity`'s result (none for None)."""
    if not cap:
        return []
    rel = (cap.get("change") or {}).get("rel")
    change = "" if rel is None else f" ({rel:+.1%})"
    verdict = {"worse": "WORSE", "better": "better", "same": "no change beyond resolution",
               "unknown": "unknown"}[str(cap.get("verdict"))]
    note = f"; {cap['note']}" if cap.get("note") else ""
    return ["", "== capacity ==",
            f"  {cap.get('mode')} capacity ({cap.get('unit')}): {cap.get('base')} -> {cap.get('candidate')}"
            f"{change}: {verdict}{note}"]


def slo_lines(summary: Mapping[str, Any]) -> list[str]:
    """The terminal's SLO lines: one per scope of summary.json's ``slo`` block (none without).

    Each: ``slo <scope>: good 99.5 % of 600 (lower bound 98.9 %, target 99 %: met) ·
    goodput 9.95 req/s, 477.6 tok/s · failed: ttft 2, completed 1``.
    """
    block = summary.get("slo")
    if not isinstance(block, Mapping):
        return []
    out = []
    for scope, b in block.items():
        if not isinstance(b, Mapping):
            continue
        gf, lower = b.get("good_fraction"), b.get("good_fraction_lower")
        if gf is None:
            out.append(f"slo {scope}: no request judged")
            continue
        target = b.get("target")
        met = b.get("met")
        verdict = "" if target is None else (f", target {target:.4g}: " + ("met" if met else "NOT met"))
        failed = ", ".join(f"{k} {v}" for k, v in (b.get("failed") or {}).items())
        toks = b.get("goodput_tokens_per_s")
        source = b.get("tokens_source")
        toks_text = ("no token counts (no usage reported, no content events)" if toks is None else
                     f"~{toks} tok/s (counted from events)" if source == "events" else
                     f"~{toks} tok/s (partly counted from events)" if source == "mixed" else f"{toks} tok/s")
        out.append(f"slo {scope}: good {gf:.1%} of {b.get('judged')} (lower bound {lower:.1%}{verdict}) · "
                   f"goodput {b.get('goodput_rps')} req/s, {toks_text}"
                   + (f" · failed: {failed}" if failed else ""))
    return out
