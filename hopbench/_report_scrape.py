"""report.html's "Gateway metrics" section: scraped series (scrape.jsonl, written
by ``hopbench._scrape``) on the same time axis as the run's timeline.

Counters (family type ``counter``, or a sample named ``*_total``) are shown as
rates per second between consecutive scrapes (a counter reset gives a gap, not a
negative rate); gauges and untyped series as scraped. Histogram buckets and
quantile series are left out (too many lines); their ``_sum`` / ``_count`` are
kept, as rates. At most ``MAX_FAMILIES`` families of ``MAX_SERIES_PER_FAMILY``
series each are drawn, in scrape order; the rest stay in scrape.jsonl.

x: seconds since the run start, like the "Over time" figure (a scrape's ``t_ms``
is its start; timeline points are interval ends).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["read_scrapes", "scrape_series", "scrape_section", "MAX_FAMILIES", "MAX_SERIES_PER_FAMILY"]

MAX_FAMILIES = 8
MAX_SERIES_PER_FAMILY = 8
_NAME = re.compile(r"[^{]+")
_SKIP_LABELS = ('le="', 'quantile="')


def read_scrapes(results_dir: Path) -> list[dict[str, Any]]:
    """scrape.jsonl's records in file order (malformed lines skipped; [] when absent)."""
    path = Path(results_dir) / "scrape.jsonl"
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("t_ms"), (int, float)):
            out.append(rec)
    return out


def _family(key: str, types: Mapping[str, str]) -> tuple[str, bool]:
    """(family name, is a counter) of a sample key ``name{labels}``."""
    m = _NAME.match(key)
    name = m.group(0) if m else key
    for suffix in ("_total", "_sum", "_count", "_created", "_bucket"):
        if name.endswith(suffix) and name[:-len(suffix)] in types:
            fam = name[:-len(suffix)]
            return fam, types[fam] in ("counter", "histogram", "summary") and suffix != "_created"
    return name, types.get(name) == "counter" or name.endswith("_total")


def scrape_series(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, tuple[list[float], list[float | None]]]]:
    """The plotted series: ``{url: {"family / key": (x_s, y)}}``, counters as rates per second.

    Args:
        records: scrape.jsonl records (error lines are skipped).

    Returns:
        per endpoint, per series: x in seconds since the run start, y the value or
        rate (None where a counter went down). Families and series are capped
        (``MAX_FAMILIES``, ``MAX_SERIES_PER_FAMILY``).
    """
    types: dict[str, dict[str, str]] = {}
    raw: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for rec in records:
        url, samples = str(rec.get("url")), rec.get("s")
        if isinstance(rec.get("types"), dict):
            types.setdefault(url, {}).update(rec["types"])
        if not isinstance(samples, dict):
            continue
        per = raw.setdefault(url, {})
        for key, v in samples.items():
            if isinstance(v, (int, float)) and not any(s in key for s in _SKIP_LABELS):
                per.setdefault(key, []).append((rec["t_ms"] / 1000.0, float(v)))
    out: dict[str, dict[str, tuple[list[float], list[float | None]]]] = {}
    for url, per in raw.items():
        fams: dict[str, int] = {}
        series: dict[str, tuple[list[float], list[float | None]]] = {}
        for key, points in per.items():
            fam, counter = _family(key, types.get(url, {}))
            if fam not in fams and len(fams) >= MAX_FAMILIES:
                continue
            if fams.get(fam, 0) >= MAX_SERIES_PER_FAMILY:
                continue
            fams[fam] = fams.get(fam, 0) + 1
            if counter:
                xs, ys = [], []
                for (t0, v0), (t1, v1) in zip(points, points[1:]):
                    xs.append(t1)
                    ys.append((v1 - v0) / (t1 - t0) if v1 >= v0 and t1 > t0 else None)
                series[f"{fam} / {key} (per s)"] = (xs, ys)
            else:
                series[f"{fam} / {key}"] = ([p[0] for p in points], [p[1] for p in points])
        out[url] = series
    return out


def scrape_section(results_dir: Path, timeline: Sequence[Mapping[str, Any]]) -> list[str]:
    """The section's HTML parts (heading, note, one figure), or [] when the run scraped nothing.

    Args:
        results_dir: the results folder (scrape.jsonl is read from it).
        timeline: timeline.jsonl records, for hopbench's own streams in flight (top row).
    """
    records = read_scrapes(results_dir)
    if not records:
        return []
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.subplots import make_subplots

    series = scrape_series(records)
    fams: list[tuple[str, str]] = []  # (url, family) in first-seen order
    for url, per in series.items():
        for name in per:
            f = (url, name.split(" / ")[0])
            if f not in fams:
                fams.append(f)
    rates = {(url, name.split(" / ")[0]) for url, per in series.items() for name in per if name.endswith("(per s)")}
    titles = ["hopbench: streams in flight (at interval end)"] + [
        f"{fam}{' per second' if (url, fam) in rates else ''} ({url})" for url, fam in fams]
    fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, subplot_titles=titles,
                        vertical_spacing=min(0.06, 0.3 / max(len(titles), 1)))
    if timeline:
        fig.add_trace(go.Scatter(x=[r.get("end_ns", 0) / 1e9 for r in timeline],
                                 y=[r.get("in_flight_now") for r in timeline], mode="lines+markers",
                                 name="hopbench in flight", marker={"size": 4}), row=1, col=1)
    for url, per in series.items():
        for name, (xs, ys) in per.items():
            row = fams.index((url, name.split(" / ")[0])) + 2
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name.split(" / ", 1)[1],
                                     marker={"size": 4}, connectgaps=False), row=row, col=1)
    fig.update_xaxes(title={"text": "seconds since start"}, row=len(titles), col=1)
    fig.update_layout(height=220 * len(titles) + 120, template="plotly_white", margin={"t": 60})
    bad = sum(1 for r in records if "error" in r)
    note = (f'<p class="note">{len(records)} scrapes of {len(series) or "no"} endpoint(s) from scrape.jsonl'
            + (f", {bad} failed (see the warnings)" if bad else "")
            + "; counters as rates per second between scrapes.</p>")
    html = pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id="fig-scrape",
                       config={"displaylogo": False, "responsive": True})
    return ["<h2>Gateway metrics</h2>", note, str(html)]
