"""Latency against offered load, with the knee marked: the terminal table of a staged run.

Role: turn summary.json's ``stages`` and ``capacity`` blocks (hopbench._stages;
docs/results.md, "Capacity") into a rich table for the terminal and plain rows
for report.html. Pure apart from printing to the given console.

The knee is the capacity point: the highest load that passed (marked "◀").
Loads are sorted ascending; every probed point is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["capacity_rows", "render_capacity", "COLUMNS"]

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
        Rows: the stages entries plus ``knee`` (bool) and ``verdict`` ("pass" or
        "fail: reasons"); empty when the summary has no stages.
    """
    stages = summary.get("stages") or []
    cap = summary.get("capacity") or {}
    knee = cap.get("rate_rps") if cap.get("mode") == "rate" else cap.get("concurrency")
    rows = []
    for entry in sorted((s for s in stages if isinstance(s, Mapping)), key=lambda s: s.get("load") or 0):
        row = dict(entry)
        row["knee"] = knee is not None and entry.get("load") == knee
        row["verdict"] = "pass" if entry.get("passed") else "fail: " + ", ".join(entry.get("reasons") or [])
        rows.append(row)
    return rows


def render_capacity(summary: Mapping[str, Any], console: Console) -> None:
    """Print the latency-vs-load table and the capacity line (nothing without stages)."""
    rows = capacity_rows(summary)
    if not rows:
        return
    cap = summary.get("capacity") or {}
    unit = cap.get("unit") or ("requests/s" if (cap.get("mode") == "rate") else "users")
    table = Table(title=f"latency (ms) vs offered load ({unit}); good fraction, its lower bound, "
                        "goodput", title_justify="left")
    table.add_column("load", justify="right")
    for header, _, _ in COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("verdict")
    for row in rows:
        load = f"{row['load']:g}" + (" ◀" if row["knee"] else "")
        style = "bold" if row["knee"] else None
        table.add_row(load, *(_fmt(row.get(field), fmt) for _, field, fmt in COLUMNS),
                      row["verdict"], style=style)
    console.print(table)
    if cap:
        color = "red" if cap.get("client_saturated") else "bold"
        console.print(f"[{color}]capacity: {cap.get('message')}[/{color}]", highlight=False, soft_wrap=True)
        knee = cap.get("emulator_knee")
        if isinstance(knee, Mapping) and (knee.get("rate_rps") or knee.get("concurrency")):
            configured = knee.get("rate_rps") if cap.get("mode") == "rate" else knee.get("concurrency")
            if configured is not None:
                console.print(f"embedded emulator's configured knee: {configured:.4g} {unit}", highlight=False)
