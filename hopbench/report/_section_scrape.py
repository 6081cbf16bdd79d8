"""report.html's "Gateway metrics" section: scraped series (scrape.jsonl, written
by ``hopbench.observe._scrape``) on the same time axis as the run's timeline.

Counters (family type ``counter``, or a sample named ``*_total``) are shown as
rates per second between consecutive scrapes (a counter reset gives a gap, not a
negative rate); gauges and untyped series as scraped. Histogram buckets and
quantile series are left out (too many lines); their ``_sum`` / ``_count`` are
kept, as rates. At most ``MAX_FAMILIES`` families of ``MAX_SERIES_PER_FAMILY``
series each are drawn, in scrape order; the rest stay in scrape.jsonl. The file is
read line by line, twice (series and span, then points), and each series keeps at
most ``MAX_POINTS`` points: memory does not grow with the run's length.

x: seconds since the run start, like the "Over time" figure (a scrape's ``t_ms``
is its start; timeline points are interval ends).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._textfile import decode_line, iter_lines
from .._format import plural

__all__ = ["read_scrapes", "scrape_series", "scrape_section", "MAX_FAMILIES", "MAX_SERIES_PER_FAMILY",
           "MAX_POINTS"]

MAX_POINTS = 720
"""Points per series at most: a long run's scrapes are thinned to the last one per time
bucket, so report.html's memory does not grow with the run (as hopbench.report._series does)."""
MAX_FAMILIES = 8
MAX_SERIES_PER_FAMILY = 8
_NAME = re.compile(r"[^{]+")
_SKIP_LABELS = ('le="', 'quantile="')


class _ScrapeFile:
    """scrape.jsonl's records, read line by line each time it is iterated (malformed
    lines skipped): the series are folded in two passes without holding the file.

    Raises (when iterated):
        ResultsError: a line other than a cut last one is not UTF-8 (file:line).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            lines = iter_lines(self.path)
            for n, raw, last in lines:
                if last and not raw.endswith(b"\n"):
                    line = raw.decode("utf-8", "replace")  # cut by a crash: malformed, skipped
                else:
                    line = decode_line(raw, self.path, n)  # not UTF-8: file:line
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("t_ms"), (int, float)):
                    yield rec
        except OSError:
            return


def read_scrapes(results_dir: Path) -> list[dict[str, Any]]:
    """scrape.jsonl's records in file order (malformed lines skipped; [] when absent)."""
    return list(_ScrapeFile(Path(results_dir) / "scrape.jsonl"))


def _family(key: str, types: Mapping[str, str]) -> tuple[str, bool]:
    """(family name, is a counter) of a sample key ``name{labels}``."""
    m = _NAME.match(key)
    name = m.group(0) if m else key
    for suffix in ("_total", "_sum", "_count", "_created", "_bucket"):
        if name.endswith(suffix) and name[:-len(suffix)] in types:
            fam = name[:-len(suffix)]
            return fam, types[fam] in ("counter", "histogram", "summary") and suffix != "_created"
    return name, types.get(name) == "counter" or name.endswith("_total")


def _numeric(key: str, v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not any(s in key for s in _SKIP_LABELS)


def _fold(records: Iterable[Mapping[str, Any]], max_points: int
          ) -> tuple[dict[str, dict[str, tuple[list[float], list[float | None]]]], int, int]:
    """(series as :func:`scrape_series` returns them, records, error records).

    ``records`` is iterated twice: once for the types, the series and the
    time span, once for the kept series' points, at most ``max_points`` per
    series (the last sample of each time bucket; a counter's rate between two
    kept samples is then its mean rate over the span between them).
    """
    types: dict[str, dict[str, str]] = {}
    keys: dict[str, dict[str, None]] = {}  # url -> sample keys in first-seen order
    n = bad = 0
    t_min = t_max = 0.0
    for rec in records:
        t = float(rec["t_ms"])
        t_min, t_max = (t, t) if n == 0 else (min(t_min, t), max(t_max, t))
        n += 1
        bad += "error" in rec
        url, samples = str(rec.get("url")), rec.get("s")
        if isinstance(rec.get("types"), dict):
            types.setdefault(url, {}).update(rec["types"])
        if isinstance(samples, dict):
            seen = keys.setdefault(url, {})
            for key, v in samples.items():
                if key not in seen and _numeric(key, v):
                    seen[key] = None
    kept: dict[str, dict[str, tuple[str, bool]]] = {}  # url -> key -> (series name, counter)
    for url, per in keys.items():
        fams: dict[str, int] = {}
        chosen: dict[str, tuple[str, bool]] = {}
        for key in per:
            fam, counter = _family(key, types.get(url, {}))
            if fam not in fams and len(fams) >= MAX_FAMILIES:
                continue
            if fams.get(fam, 0) >= MAX_SERIES_PER_FAMILY:
                continue
            fams[fam] = fams.get(fam, 0) + 1
            chosen[key] = (f"{fam} / {key} (per s)" if counter else f"{fam} / {key}", counter)
        kept[url] = chosen
    bucket_ms = max((t_max - t_min) / max(max_points, 1), 1e-9)
    points: dict[str, dict[str, list[tuple[float, float, int]]]] = {u: {} for u in kept}
    for rec in records if n else ():
        url, samples = str(rec.get("url")), rec.get("s")
        want = kept.get(url)
        if not want or not isinstance(samples, dict):
            continue
        t = float(rec["t_ms"])
        k = min(int((t - t_min) // bucket_ms), max_points - 1)  # t_max closes the last bucket
        for key, v in samples.items():
            if key in want and _numeric(key, v):
                pts = points[url].setdefault(key, [])
                if pts and pts[-1][2] == k:
                    pts[-1] = (t / 1000.0, float(v), k)  # the bucket's last sample
                else:
                    pts.append((t / 1000.0, float(v), k))
    out: dict[str, dict[str, tuple[list[float], list[float | None]]]] = {}
    for url, chosen in kept.items():
        series: dict[str, tuple[list[float], list[float | None]]] = {}
        for key, (name, counter) in chosen.items():
            pts = points[url].get(key, [])
            if counter:
                xs, ys = [], []
                for (t0, v0, _), (t1, v1, _) in zip(pts, pts[1:]):
                    xs.append(t1)
                    ys.append((v1 - v0) / (t1 - t0) if v1 >= v0 and t1 > t0 else None)
                series[name] = (xs, ys)
            else:
                series[name] = ([p[0] for p in pts], [p[1] for p in pts])
        out[url] = series
    return out, n, bad


def scrape_series(records: Iterable[Mapping[str, Any]], max_points: int = MAX_POINTS
                  ) -> dict[str, dict[str, tuple[list[float], list[float | None]]]]:
    """The plotted series: ``{url: {"family / key": (x_s, y)}}``, counters as rates per second.

    Args:
        records: scrape.jsonl records (error lines are skipped); iterated
            twice (a list, or an iterable that starts over each time).
        max_points: points per series at most (a long run's scrapes are thinned
            to the last one of each time bucket: memory does not grow with the run).

    Returns:
        per endpoint, per series: x in seconds since the run start, y the value or
        rate (None where a counter went down). Families and series are capped
        (``MAX_FAMILIES``, ``MAX_SERIES_PER_FAMILY``).
    """
    return _fold(records, max_points)[0]


def scrape_section(results_dir: Path, timeline: Sequence[Mapping[str, Any]]) -> list[str]:
    """The section's HTML parts (heading, note, one figure), or [] when the run scraped nothing.

    Args:
        results_dir: the results folder (scrape.jsonl is read from it).
        timeline: timeline.jsonl records, for hopbench's own streams in flight (top row).
    """
    series, n_records, bad = _fold(_ScrapeFile(Path(results_dir) / "scrape.jsonl"), MAX_POINTS)
    if not n_records:
        return []
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.subplots import make_subplots

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
    n_series = len(series)
    note = (f'<p class="note">{n_records} {plural(n_records, "scrape")} of {n_series or "no"} '
            f'{plural(n_series, "endpoint")} from scrape.jsonl'
            + (f", {bad} failed (see the warnings)" if bad else "")
            + "; counters as rates per second between scrapes.</p>")
    html = pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id="fig-scrape",
                       config={"displaylogo": False, "responsive": True})
    return ["<h2>Gateway metrics</h2>", note, str(html)]
