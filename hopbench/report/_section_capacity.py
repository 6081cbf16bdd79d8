"""report.html's "Capacity" section: latency, good fraction and goodput against offered load.

Role: from a staged run's summary.json (``stages``, ``capacity``; hopbench.driver._stages)
build the section's HTML: a plotly figure of TTFT p50/p99 and ITL p99 (ms) and of
the good fraction, its lower bound and goodput against the offered load, with the
capacity point (the knee) marked by a vertical line, then the same figures as a
table. Nothing for a run without stages.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from ..views._capacity_table import COLUMNS, capacity_rows

__all__ = ["capacity_section"]


def _cell(value: Any, fmt: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return html.escape(fmt.format(value))
    return "-"


def _figure(rows: list[dict[str, Any]], cap: Mapping[str, Any], unit: str) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("latency (ms)", "good fraction (and lower bound); goodput (req/s)"),
                        specs=[[{}], [{"secondary_y": True}]])
    xs = [r["load"] for r in rows]
    for field, name in (("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"), ("itl_p99_ms", "ITL p99")):
        fig.add_trace(go.Scatter(x=xs, y=[r.get(field) for r in rows], mode="lines+markers", name=name),
                      row=1, col=1)
    for field, name in (("good_fraction", "good fraction"), ("good_fraction_lower", "lower bound")):
        fig.add_trace(go.Scatter(x=xs, y=[r.get(field) for r in rows], mode="lines+markers", name=name),
                      row=2, col=1, secondary_y=False)
    fig.add_trace(go.Bar(x=xs, y=[r.get("goodput_rps") for r in rows], name="goodput req/s", opacity=0.35),
                  row=2, col=1, secondary_y=True)
    knee = cap.get("rate_rps") if cap.get("mode") == "rate" else cap.get("concurrency")
    if isinstance(knee, (int, float)):
        fig.add_vline(x=knee, line_dash="dash", line_color="black", annotation_text="capacity",
                      annotation_position="top right")
    target = cap.get("target")
    if isinstance(target, (int, float)):
        fig.add_hline(y=target, line_dash="dot", line_color="grey", row=2, col=1, secondary_y=False)
    fig.update_xaxes(title_text=f"offered load ({unit})", row=2, col=1)
    fig.update_layout(height=620, margin={"t": 40, "b": 40, "l": 60, "r": 60}, legend={"orientation": "h"})
    return fig


def capacity_section(summary: Mapping[str, Any], figure_html: Any) -> list[str]:
    """The section's HTML parts (empty without stages).

    Args:
        summary: the folder's summary.json.
        figure_html: ``(figure, div_id) -> str`` of report.html (offline plotly).
    """
    rows = capacity_rows(summary)
    if not rows:
        return []
    cap = summary.get("capacity") or {}
    modes = {r.get("mode") for r in rows}
    unit = str(cap.get("unit") or ("requests/s" if modes == {"rate"} else "users"))
    parts = ["<h2>Capacity</h2>"]
    if cap:
        cls = "warn" if cap.get("client_saturated") else "note"
        parts.append(f'<p class="{cls}"><b>{html.escape(str(cap.get("message")))}</b></p>')
        knee = cap.get("emulator_knee")
        configured = (knee or {}).get("rate_rps" if cap.get("mode") == "rate" else "concurrency") \
            if isinstance(knee, Mapping) else None
        if isinstance(configured, (int, float)):
            parts.append(f'<p class="note">embedded emulator\'s configured knee: {configured:.4g} {html.escape(unit)}</p>')
    if len(modes) <= 1:
        parts.append(figure_html(_figure(rows, cap, unit), "fig-capacity"))
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["load", *(c[0] for c in COLUMNS), "verdict", "folder"])
    body = []
    for r in rows:
        load = f"{r['load']:g}" + (" ◀ capacity" if r["knee"] else "")
        cells = "".join(f"<td>{_cell(r.get(field), fmt)}</td>" for _, field, fmt in COLUMNS)
        style = ' style="font-weight:bold"' if r["knee"] else ""
        body.append(f"<tr{style}><td>{html.escape(load)}</td>{cells}<td>{html.escape(r['verdict'])}</td>"
                    f"<td>{html.escape(str(r.get('folder') or ''))}</td></tr>")
    parts.append(f"<table><tr>{head}</tr>{''.join(body)}</table>")
    parts.append('<p class="note">latencies in ms; "lower": the good fraction\'s Wilson lower bound; the '
                 "other sections show the stage of record "
                 f"({html.escape(str(summary.get('stage_of_record')))}).</p>")
    return parts
