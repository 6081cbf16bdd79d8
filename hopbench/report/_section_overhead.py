"""report.html's gateway overhead section (docs/gateway-overhead.md).

Role: for runs with an ``[upstream]`` (summary.json ``gateway_overhead``): the
overhead metrics' percentile spectra (the registry's ``figure = "overhead"``),
the per-event delay over time, the match and event counts, and the fault
matrix (upstream fault -> what the client saw). Nothing for runs without it.
Every text from a results folder is HTML-escaped (``hopbench.report._html``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..measure._metrics import metrics_where
from ._figures import figure_html, spectrum_figure
from ._html import kv_table, table
from ._series import RunData

__all__ = ["overhead_section"]


def overhead_section(runs: Sequence[RunData]) -> list[str]:
    """The gateway overhead section's body (docs/gateway-overhead.md; its heading is the page's):
    the overhead spectra, the match and event counts, and the fault matrix; nothing for runs without it."""
    blocks = [(i, r.summary.get("gateway_overhead")) for i, r in enumerate(runs)]
    if not any(isinstance(b, Mapping) for _, b in blocks):
        return []
    out = ['<p class="note">What the gateway added, per request and per event, against the emulator '
           "behind it (one clock). Solid: A, dashed: B when comparing.</p>",
           figure_html(spectrum_figure(runs, metrics_where(figure="overhead"), "Gateway overhead spectrum"), "fig-overhead")]
    series = [(i, b.get("event_delay_over_time")) for i, b in blocks if isinstance(b, Mapping)]
    if any(pts for _, pts in series):
        import plotly.graph_objects as go

        fig = go.Figure()
        for i, pts in series:
            tag = "" if len(runs) == 1 else f" [{'AB'[i]}]"
            for key, colour in (("p50_ms", "#1f77b4"), ("p99_ms", "#d62728")):
                fig.add_trace(go.Scatter(x=[p["t_s"] for p in pts or ()], y=[p[key] for p in pts or ()],
                                         mode="lines+markers", name=f"event_delay {key[:3]}{tag}",
                                         line={"color": colour, "dash": "solid" if i == 0 else "dash"}))
        fig.update_layout(title="Per-event delay over time (by upstream write time)", height=340,
                          xaxis_title="seconds since the first send", yaxis_title="ms", template="plotly_white")
        out.append(figure_html(fig, "fig-overhead-time"))
    for i, block in blocks:
        if not isinstance(block, Mapping):
            continue
        if len(runs) > 1:
            out.append(f"<h3>{'AB'[i]}</h3>")
        out.append(kv_table({k: v for k, v in block.items() if k not in ("fault_matrix", "event_delay_over_time")}))
        matrix = block.get("fault_matrix") or {}
        rows = [[fault, seen, n] for fault, row in matrix.items() for seen, n in row.items()]
        if rows:
            out.append("<h3>Fault translation: upstream fault -> what the client saw</h3>")
            out.append(table(["upstream", "client", "streams"], rows, left=2))
    return out
