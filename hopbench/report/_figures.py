"""report.html's figures: percentile spectra, the run over time, stream outcomes, keepalive gaps.

Role: each function builds one plotly figure from the runs' data
(:class:`hopbench.report._series.RunData`, one run or two overlaid: A solid,
B dashed) and :func:`figure_html` turns a figure into the page's ``<div>``
(plotly.js is embedded once by the page). Which metrics a spectrum draws is
the registry's (``hopbench.measure._metrics``: ``figure``). plotly is imported
inside the functions: importing the report costs nothing until a page is built.

Invariants:

* Percentile spectra come from :meth:`Histogram.hgrm_text` (hdrh's percentile
  iterator, the same rows as the ``.hgrm`` files), values in each metric's
  reporting unit; x is 1/(1-p) on a log scale, labelled 90 %, 99 %, 99.9 %...
* Series over time are the folded points of ``hopbench.report._series``: at
  most ``MAX_POINTS`` per series, whatever the run's length.
* Every text from a results folder that reaches a hover label is HTML-escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..measure._hdr import Histogram
from ..measure._metrics import METRICS, metrics_where
from ..measure._outcomes import ANOMALY_PREFIX, DETAIL_PREFIXES, OUTCOMES, detail_tally
from ..measure._recorder import ALL
from ._series import MAX_POINTS, SERIES_PERCENTILES, RunData, SeriesPoint
from .._units import NS_PER_S

__all__ = ["SPECTRUM_METRICS", "DETAIL_KEYS", "spectrum", "spectrum_figure", "timeline_figure", "outcome_figure",
           "keepalive_figure", "figure_html", "scope_counters", "detail_colour"]

SPECTRUM_METRICS = metrics_where(figure="latency")
"""The metrics of the page's percentile spectrum per scenario (the registry's ``figure``)."""
#: counter prefixes of an outcome's details and of the anomalies (truncated.*, http_error_code.*, ...)
DETAIL_KEYS = (*DETAIL_PREFIXES, ANOMALY_PREFIX)
_OUTCOME_COLOURS = {"completed": "#2ca02c", "failed": "#d62728", "truncated": "#ff7f0e",
                    "timeout": "#9467bd", "connect_error": "#8c564b", "http_error": "#e377c2",
                    "cancelled": "#7f7f7f", "client_cancelled": "#17becf"}
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#bcbd22", "#17becf")
_ALL_COLOUR = "#222222"
#: an anomaly (anomaly.<kind>) is not an outcome: its bars get a colour no outcome has
_ANOMALY_COLOUR = "#bcbd22"
#: interval percentiles: (p, colour, (dash, marker)); p99.9 dotted with diamonds so that it stays
#: visible where it lies on p99 (a run of few streams per interval)
_PERCENTILE_STYLES = ((50.0, "#1f77b4", ("solid", "circle")), (99.0, "#d62728", ("solid", "square")),
                      (99.9, "#9467bd", ("dot", "diamond-open")))


def detail_colour(key: str) -> str:
    """The bar colour of an outcome detail: its outcome's (``http_error_code.*`` is http_error's),
    the colour the outcome has in the stacked bars' legend; anomalies their own.

    Args:
        key: a counter name, e.g. ``failed.rate_limit_error`` or ``anomaly.unknown_event``.
    """
    outcome = key.partition(".")[0]
    if outcome == "http_error_code":
        outcome = "http_error"
    return _OUTCOME_COLOURS.get(outcome, _ANOMALY_COLOUR)


def spectrum(hist: Histogram) -> tuple[list[float], list[float], list[float]]:
    """The HdrHistogram percentile spectrum of a histogram.

    Rows of :meth:`Histogram.hgrm_text` (hdrh's percentile iterator, 5 ticks
    per half distance). The 100 % row, whose 1/(1-p) is infinite, is placed
    at 1/(1-p) = count (p = 1 - 1/count) or the last finite x if larger.

    Returns:
        (x, value, percentile): x = 1/(1-p), value in the reporting unit,
        percentile in %; empty lists for an empty histogram.
    """
    xs: list[float] = []
    values: list[float] = []
    pcts: list[float] = []
    if not hist.count:
        return xs, values, pcts
    for row in hist.hgrm_text().splitlines():
        parts = row.split()
        if len(parts) not in (3, 4) or row.startswith("#"):
            continue
        try:
            value, p = float(parts[0]), float(parts[1])
        except ValueError:
            continue  # the header
        if p >= 1.0:
            x = max(float(hist.count), xs[-1] if xs else 1.0)
        else:
            x = 1.0 / (1.0 - p)
        xs.append(x)
        values.append(value)
        pcts.append(p * 100.0)
    return xs, values, pcts


def _colour(index: int, scope: str) -> str:
    return _ALL_COLOUR if scope == ALL else _PALETTE[index % len(_PALETTE)]


def _nines_axis(max_x: float) -> dict[str, Any]:
    ticks, labels = [1.0], ["0%"]
    k = 1
    while 10.0 ** (k - 1) < max_x and k <= 9:
        ticks.append(10.0**k)
        labels.append(f"{100 - 100 / 10**k:.{max(k - 2, 0)}f}%")
        k += 1
    return {"type": "log", "tickvals": ticks, "ticktext": labels, "title": {"text": "percentile"}}


def _no_samples_note(metric: str) -> str:
    """The note an empty spectrum panel shows: "no samples" and what the metric records
    (its registry description: "no samples in this run; it records<br>a gap over 500 ms between
    two upstream writes"), with ``<br>`` breaks for plotly."""
    what = METRICS[metric].description.removeprefix("gateway overhead: ")
    words, lines = what.split(), [""]
    for w in words:  # about 45 characters a line: the panel is half the page wide
        lines[-1:] = [f"{lines[-1]} {w}".strip()] if len(lines[-1]) + len(w) < 45 else [lines[-1], w]
    return "<br>".join(["no samples in this run; it records"] + [html.escape(line) for line in lines])


def spectrum_figure(runs: Sequence[RunData], metrics: Sequence[str], title: str) -> Any:
    """Percentile spectra of ``metrics``, one panel each (two columns), a line per scope and run.

    Args:
        runs: one run, or two (A solid, B dashed).
        metrics: registry metric names, in panel order.
        title: the figure's title.

    Returns:
        a plotly Figure; a scope without samples of a metric draws no line.
    """
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    cols = 2
    rows = math.ceil(len(metrics) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[
        f"{m} ({METRICS[m].unit})" for m in metrics], vertical_spacing=0.12, horizontal_spacing=0.08)
    scope_index = {s: i for i, s in enumerate(dict.fromkeys(s for r in runs for s in r.scopes()))}
    shown: set[str] = set()
    max_x = 10.0
    for k, metric in enumerate(metrics):
        row, col = k // cols + 1, k % cols + 1
        drawn = False
        for r_i, run in enumerate(runs):
            for scope in run.scopes():
                xs, ys, ps = spectrum(run.snapshot.histogram(scope, metric))
                if not xs:
                    continue
                drawn = True
                max_x = max(max_x, xs[-1])
                name = scope if len(runs) == 1 else f"{scope} [{'AB'[r_i]}]"
                fig.add_trace(go.Scatter(
                    x=xs, y=ys, customdata=ps, mode="lines", name=name, legendgroup=name,
                    showlegend=name not in shown,
                    line={"color": _colour(scope_index[scope], scope), "shape": "hv",
                          "dash": "solid" if r_i == 0 else "dash",
                          "width": 2.5 if scope == ALL else 1.5},
                    hovertemplate=f"{html.escape(name)}<br>p%{{customdata:.4f}}: %{{y:.3f}} "
                                  f"{METRICS[metric].unit}<extra></extra>"), row=row, col=col)
                shown.add(name)
        if not drawn:  # an empty panel says so, and what would have filled it (issue 39)
            ref = "" if k == 0 else str(k + 1)
            fig.add_annotation(text=_no_samples_note(metric), xref=f"x{ref} domain", yref=f"y{ref} domain",
                               x=0.5, y=0.5, showarrow=False, font={"color": "#666"})
    axis = _nines_axis(max_x)
    for k in range(len(metrics)):
        fig.update_xaxes(axis, row=k // cols + 1, col=k % cols + 1)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(title={"text": title}, height=380 * rows + 80, template="plotly_white",
                      legend={"orientation": "h", "y": -0.08}, margin={"t": 80, "b": 60})
    return fig


def _percentile_series(points: Sequence[SeriesPoint], p: float) -> tuple[list[float], list[float | None]]:
    i = SERIES_PERCENTILES.index(p)
    xs: list[float] = []
    ys: list[float | None] = []
    for pt in points:
        xs.append(pt.end_ns / NS_PER_S)
        ys.append(pt.values[i] if pt.count else None)
    return xs, ys


def _rate(timeline: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for rec in timeline:
        dur_s = (rec["end_ns"] - rec.get("start_ns", 0)) / NS_PER_S
        if dur_s <= 0:
            continue
        xs.append(rec["end_ns"] / NS_PER_S)
        ys.append(float(rec.get(key, 0) or 0) / dur_s)
    return xs, ys


def _warmup_s(run: RunData) -> float:
    prof = run.summary.get("profile")
    run_t = prof.get("run") if isinstance(prof, Mapping) else None
    w = run_t.get("warmup_s") if isinstance(run_t, Mapping) else None
    return float(w) if isinstance(w, (int, float)) and not isinstance(w, bool) else 0.0


def timeline_figure(runs: Sequence[RunData]) -> Any:
    """The run over time, seven rows sharing the x axis (seconds since start): TTFT and ITL
    percentiles per interval (ms; p50, p99 and p99.9 told apart by marker and dash, not only
    colour), streams/s, output tokens/s, streams in flight and the client-side phases, the load
    generator's CPU (%) and its lags p99 (ms); the warm-up shaded.

    Returns:
        a plotly Figure (at most ``MAX_POINTS`` points per series).
    """
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    # one unit per panel: CPU (%) and lags (ms) never share an axis (issue 39)
    titles = ("TTFT per interval (ms)", "ITL per interval (ms)", "streams per second",
              "output tokens per second", "streams in flight (as a gateway sees them) and client-side phases",
              "load generator: CPU (% of one core)", "load generator: event-loop and schedule lag p99 (ms)")
    fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, subplot_titles=titles,
                        vertical_spacing=0.04)
    for r_i, run in enumerate(runs):
        dash = "solid" if r_i == 0 else "dash"
        tag = "" if len(runs) == 1 else f" [{'AB'[r_i]}]"

        def line(row: int, xs: Sequence[float], ys: Sequence[float | None], name: str,
                 colour: str, style: tuple[str, str] = ("solid", "circle")) -> None:
            fig.add_trace(go.Scatter(x=list(xs), y=list(ys), mode="lines+markers", name=name + tag,
                                     line={"color": colour, "dash": style[0] if r_i == 0 else dash, "width": 1.5},
                                     marker={"size": 5, "symbol": style[1]}, legendgroup=f"r{row}",
                                     legendgrouptitle={"text": titles[row - 1]} if r_i == 0 else None,
                                     connectgaps=False), row=row, col=1)

        for row, tag_name in ((1, "all.ttft"), (2, "all.itl")):
            ivs = run.intervals.get(tag_name, [])
            for p, colour, style in _PERCENTILE_STYLES:
                xs, ys = _percentile_series(ivs, p)
                if xs:
                    line(row, xs, ys, f"{tag_name[4:]} p{p:g}", colour, style)
        tl = run.timeline
        if tl:
            for key, colour in (("started", "#1f77b4"), ("completed", "#2ca02c")):
                line(3, *_rate(tl, key), f"{key}/s", colour)
            line(4, *_rate(tl, "output_tokens"), "output tokens/s", "#ff7f0e")
            ends = [rec["end_ns"] / NS_PER_S for rec in tl]
            line(5, ends, [rec.get("in_flight_mean") for rec in tl], "in flight (mean)", "#1f77b4")
            line(5, ends, [rec.get("in_flight_now") for rec in tl], "in flight (at end)", "#7f7f7f")
            # the client-side phases, by their own names (docs/results/in-flight.md, "In flight")
            for key, colour in (("connecting", "#bcbd22"), ("waiting", "#ff9896"), ("closing", "#c5b0d5")):
                if any(f"{key}_mean" in rec for rec in tl):
                    line(5, ends, [rec.get(f"{key}_mean") for rec in tl], f"{key} (mean)", colour)
            line(6, ends, [100.0 * float(rec.get("cpu", 0) or 0) for rec in tl], "CPU %", "#8c564b")
        for tag_name, colour in (("all.loop_lag", "#e377c2"), ("all.schedule_lag", "#17becf")):
            xs, ys = _percentile_series(run.intervals.get(tag_name, []), 99.0)
            if xs:
                line(7, xs, ys, f"{tag_name[4:]} p99 ms", colour)
    warm = _warmup_s(runs[0])
    if warm > 0:
        fig.add_vrect(x0=0, x1=warm, fillcolor="#bbbbbb", opacity=0.25, line_width=0,
                      annotation_text="warm-up", annotation_position="top left", row="all", col=1)
    fig.update_xaxes(title={"text": "seconds since start"}, row=len(titles), col=1)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(title={"text": "Over time (one point per interval, or per bucket of intervals in a "
                               f"long run: at most {MAX_POINTS} points)"}, height=1700,
                      template="plotly_white", legend={"groupclick": "toggleitem"},
                      margin={"t": 80})
    return fig


def scope_counters(run: RunData, scope: str) -> dict[str, int]:
    """A scope's measured counters ({} when the run has no such scope)."""
    s = run.snapshot.scopes.get(scope)
    return s.counters if s is not None else {}


def outcome_figure(runs: Sequence[RunData]) -> Any:
    """Stream outcomes as stacked bars per scope, and every outcome detail of "all" by count.

    Each detail's bar has its outcome's colour, the one the stacked bars' legend
    gives it (:func:`detail_colour`; run B's bars paler when comparing); a run
    without details (no broken stream, no anomaly) gets the stacked bars alone:
    the page says "no broken streams" in words instead of an empty chart.

    Returns:
        a plotly Figure.
    """
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    details = sorted({k for run in runs for k in scope_counters(run, ALL) if k.startswith(DETAIL_KEYS)})
    if details:
        fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55], horizontal_spacing=0.18,
                            subplot_titles=("stream outcomes by scenario", "by kind and error code (all)"))
    else:
        fig = make_subplots(rows=1, cols=1, subplot_titles=("stream outcomes by scenario",))
    cats: list[str] = []
    for r_i, run in enumerate(runs):
        for scope in run.scopes():
            cats.append(scope if len(runs) == 1 else f"{'AB'[r_i]}: {scope}")
    for outcome in OUTCOMES:
        values = [run.snapshot.counter(scope, outcome) for run in runs for scope in run.scopes()]
        if any(values):
            fig.add_trace(go.Bar(x=cats, y=values, name=outcome, marker_color=_OUTCOME_COLOURS[outcome],
                                 legendgroup="outcomes"), row=1, col=1)
    # one bar count per broken stream (measure._outcomes.detail_tally): the error bodies' codes
    # ride on the http_error bars (label with one run and one status, else the hover text);
    # the anomalies (flags, not outcomes) are bars of their own colour
    tallies = [detail_tally(scope_counters(run, ALL)) for run in runs]
    kinds = sorted({k for t in tallies for k, _ in t.details})
    anomalies = sorted({k for t in tallies for k, _ in t.anomalies})
    statuses = [k for k in kinds if k.startswith("http_error.")]
    labels = {k: k for k in kinds + anomalies}
    if len(runs) == 1 and len(statuses) == 1 and tallies[0].codes:
        labels[statuses[0]] = f"{statuses[0]} ({tallies[0].codes_text()})"
    for r_i, (run, tally) in enumerate(zip(runs, tallies) if details else ()):
        opacity = 1.0 if r_i == 0 else 0.5  # run B's bars paler
        if kinds:
            fig.add_trace(go.Bar(y=[labels[k] for k in kinds], x=[run.snapshot.counter(ALL, k) for k in kinds],
                                 orientation="h", name="count" if len(runs) == 1 else f"count [{'AB'[r_i]}]",
                                 hovertext=[tally.codes_text() if k.startswith("http_error.") else "" for k in kinds],
                                 marker={"color": [detail_colour(k) for k in kinds], "opacity": opacity},
                                 showlegend=False), row=1, col=2)
        if anomalies:
            fig.add_trace(go.Bar(y=anomalies, x=[run.snapshot.counter(ALL, k) for k in anomalies], orientation="h",
                                 name="anomalies (flags, not outcomes)" + ("" if len(runs) == 1 else f" [{'AB'[r_i]}]"),
                                 marker={"color": _ANOMALY_COLOUR, "opacity": opacity},
                                 legendgroup="outcomes", showlegend=r_i == 0), row=1, col=2)
    fig.update_layout(barmode="stack", template="plotly_white", title={"text": "Stream outcomes"},
                      height=max(420, 24 * (len(kinds) + len(anomalies)) + 160))
    if len(runs) > 1:
        fig.update_layout(barmode="relative")
    return fig


def keepalive_figure(runs: Sequence[RunData]) -> Any | None:
    """The spectra of the registry's keepalive figure (keepalive gaps, longest silence per stream).

    Returns:
        a plotly Figure, or None when no run recorded a sample of them.
    """
    metrics = metrics_where(figure="keepalive")
    if not any(run.snapshot.histogram(s, m).count for run in runs for s in run.scopes() for m in metrics):
        return None
    return spectrum_figure(runs, metrics_where(figure="keepalive"),
                            "Keepalive gaps and longest silence per stream (percentile spectrum)")



def figure_html(fig: Any, div_id: str) -> str:
    """A plotly figure as a ``<div id=div_id>`` of the page (plotly.js not included: the page embeds it once)."""
    import plotly.io as pio

    return str(pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id,
                           config={"displaylogo": False, "responsive": True}))
