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
    # the style of the page's other figures (hopbench.report._figures): plotly_white, the timeline's
    # colours, dash and markers per percentile, a horizontal legend under the figure (issue 39)
    for field, name, colour, (dash, symbol) in (
            ("ttft_p50_ms", "TTFT p50", "#1f77b4", ("solid", "circle")),
            ("ttft_p99_ms", "TTFT p99", "#d62728", ("solid", "square")),
            ("itl_p99_ms", "ITL p99", "#9467bd", ("dot", "diamond-open"))):
        fig.add_trace(go.Scatter(x=xs, y=[r.get(field) for r in rows], mode="lines+markers", name=name,
                                 line={"color": colour, "dash": dash, "width": 1.5},
                                 marker={"size": 6, "symbol": symbol}), row=1, col=1)
    for field, name, colour, dash in (("good_fraction", "good fraction", "#2ca02c", "solid"),
                                      ("good_fraction_lower", "lower bound", "#2ca02c", "dot")):
        fig.add_trace(go.Scatter(x=xs, y=[r.get(field) for r in rows], mode="lines+markers", name=name,
                                 line={"color": colour, "dash": dash, "width": 1.5}, marker={"size": 6}),
                      row=2, col=1, secondary_y=False)
    fig.add_trace(go.Bar(x=xs, y=[r.get("goodput_rps") for r in rows], name="goodput req/s", opacity=0.35,
                         marker_color="#1f77b4"), row=2, col=1, secondary_y=True)
    knee = cap.get("rate_rps") if cap.get("mode") == "rate" else cap.get("concurrency")
    if isinstance(knee, (int, float)):
        fig.add_vline(x=knee, line_dash="dash", line_color="black", annotation_text="capacity",
                      annotation_position="top right")
    target = cap.get("target")
    if isinstance(target, (int, float)):
        fig.add_hline(y=target, line_dash="dot", line_color="grey", row=2, col=1, secondary_y=False)
    fig.update_xaxes(title_text=f"offered load ({unit})", row=2, col=1)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(title={"text": f"Latency, good fraction and goodput against the offered load ({unit})"},
                      height=660, template="plotly_white", legend={"orientation": "h", "y": -0.12},
                      margin={"t": 80, "b": 60})
    return fig


def capacity_section(summary: Mapping[str, Any], figure_html: Any, said: Any = None) -> list[str]:
    """The section's body (empty without stages; its heading is the page's).

    Args:
        summary: the folder's summary.json.
        figure_html: ``(figure, div_id) -> str`` of report.html (offline plotly).
        said: the page's :class:`hopbench.report._section_verdict.Said` (None: nothing said yet):
            the search's message, when the gate's verdict or a warning above already said it
            (a saturated search: issue 39), is shortened to its first clause.
    """
    rows = capacity_rows(summary)
    if not rows:
        return []
    cap = summary.get("capacity") or {}
    modes = {r.get("mode") for r in rows}
    unit = str(cap.get("unit") or ("requests/s" if modes == {"rate"} else "users"))
    parts = []
    if cap:
        cls = "warn" if cap.get("client_saturated") else "note"
        message = str(cap.get("message"))
        shown = message if said is None else said.fresh(message)
        if shown is None:  # said whole above (the gate's verdict, a warning): its verdict only
            shown = message.partition("; ")[0] + " (why: above)"
        parts.append(f'<p class="{cls}"><b>{html.escape(shown)}</b></p>')
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
