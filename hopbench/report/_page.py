"""report.html: one self-contained page of plots and tables for a results folder.

Role: presentation only. It reads what a run left behind (summary.json,
intervals.hlog, timeline.jsonl, see docs/results.md) and writes one HTML file
that opens offline: plotly.js is embedded in the page once, each figure is a
plotly JSON spec drawn by it, every other piece is a plain HTML table. No
network access, no CDN, no file beside it (docs/report.md says why plotly).

The figures are :mod:`hopbench.report._figures`' and each optional section
has its module (``_section_*``); this module reads the folder (:func:`load_run`),
lays the page out (:func:`render_html`) and writes it (:func:`write_report`).

Page order (docs/report.md, "Page order"): the run's answer first (the
``[gate]`` verdict, run figures, warnings, headline table per scenario:
:mod:`hopbench.report._section_verdict`), then the sections the profile exists
for (:func:`purpose_sections`: compare, capacity, A/B arms, gateway overhead,
the gate's budgets), then the generic ones: the HdrHistogram percentile spectrum
of TTFT, ITL, TPOT and E2E per scenario (x: 1/(1-p) on a log scale, labelled
90 %, 99 %, 99.9 %..., as HdrHistogram's plotter draws ``.hgrm`` files), a
second run overlaid (dashed) with ``--compare``; TTFT/ITL percentiles,
throughput, in-flight streams and the generator's health over time; stream
outcomes by kind and error code; tokens; keepalive gaps and longest
silences; load, profile and environment.

Invariants:

* :func:`write_report` raises only :class:`ResultsError` (a run calls it at
  its end and must never fail because of the report); the file is replaced
  atomically (temp file + rename), so a reader never sees half a page.
* Percentile spectra come from :meth:`Histogram.hgrm_text` (hdrh's percentile
  iterator, the same rows as the ``.hgrm`` files); interval percentiles from
  the exact interval histograms in intervals.hlog (warm-up and measured lines
  of one interval are added: the timeline shows the whole run, the warm-up
  shaded). Values are in each metric's reporting unit (ms, tokens/s).
* Memory is bounded whatever the run's length: intervals.hlog and
  timeline.jsonl are read line by line and folded into at most
  ``_series.MAX_POINTS`` time buckets (interval histograms added exactly, a
  bucket's percentiles taken from the sum); the percentile spectra come from
  summary.json's whole-run histograms.
* Every text that comes from a results folder is HTML-escaped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..measure._burst import BURST_COUNTERS
from ..measure._error_bound import UNCERTAIN_MARK, uncertain, uncertain_note
from .._errors import ResultsError
from ._html import cell, escape, kv_table, table
from ..measure._hdr import Histogram
from ..measure._metrics import METRICS, UNIT_LABELS
from ..measure._outcomes import BROKEN, tokens_source
from ..measure._recorder import ALL
from ._section_capacity import capacity_section
from ._section_scrape import scrape_section
from ._section_workload import workload_section
from ..driver._results import HLOG_NAME, read_summary, replace_text, snapshot_from_summary, write_error
from ._figures import DETAIL_KEYS, SPECTRUM_METRICS, figure_html, keepalive_figure, outcome_figure, scope_counters, spectrum_figure, timeline_figure
from ._section_overhead import overhead_section
from ._section_verdict import GateView, Said, gate_section, gate_view
from ._section_verdict import run_figures as _run_figures, warnings_html as _warnings
from ._section_contract import contract_section
from ._series import MAX_POINTS, RunData, SeriesPoint, bucket_ns_for, fold_hlog, fold_timeline, span_ns
from .._units import NS_PER_MS, NS_PER_S
from .._textfile import read_text

__all__ = ["write_report", "read_hlog", "load_run", "render_html", "basic_bundle_version", "same_minor", "PLOTLY_BASIC_JS",
           "BASIC_TRACES"]

REPORT_NAME = "report.html"
TIMELINE_NAME = "timeline.jsonl"
_TIMELINE_TAGS = ("all.ttft", "all.itl", "all.loop_lag", "all.schedule_lag")

# -- reading a results folder ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class IntervalHist:
    """One interval's histogram of one tag, warm-up and measured lines added.

    Attributes:
        start_ns, end_ns: bounds relative to the run start (ns; from the log's
            seconds with 3 decimals).
        hist: the histogram (recorded unit).
    """

    start_ns: int
    end_ns: int
    hist: Histogram


def read_hlog(path: Path, tags: Iterable[str] | None = None) -> dict[str, list[IntervalHist]]:
    """Read a hopbench intervals.hlog (HdrHistogram interval log format 1.3).

    Lines ``Tag=<scope>.<metric>,<start s>,<length s>,<max>,<base64>``; lines
    with the same tag and start (the warm-up and measured recorders of one
    interval) are added into one histogram. hdrh's ``HistogramLogReader`` reads
    the same file (tests check both agree); this reader returns hopbench's typed
    :class:`Histogram` and names the line of a defect instead of stopping silently.

    Args:
        path: the log file.
        tags: keep only these tags (None: every tag).

    Returns:
        tag -> list of IntervalHist in time order.

    Raises:
        ResultsError: the file cannot be read, or a line is malformed (file:line).
            A last line cut short (a crash mid-write) is ignored.
    """
    want = None if tags is None else set(tags)
    try:
        lines = read_text(Path(path)).splitlines()  # non-UTF-8: ResultsError naming file:line
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror or exc}") from exc
    merged: dict[str, dict[int, IntervalHist]] = {}
    for n, line in enumerate(lines, 1):
        if not line.startswith("Tag="):
            continue  # comments, legend, untagged lines (hopbench writes none)
        try:
            tag, start_s, length_s, _max, b64 = line[4:].split(",", 4)
            if want is not None and tag not in want:
                continue
            metric = tag.rsplit(".", 1)[1]
            if metric not in METRICS:
                raise ResultsError(f"unknown metric {metric!r}")
            start_ns = round(float(start_s) * NS_PER_S)
            end_ns = start_ns + round(float(length_s) * NS_PER_S)
            h = Histogram.decode(metric, b64)
        except (ValueError, IndexError, ResultsError) as exc:
            if n == len(lines):
                break
            raise ResultsError(f"{path}:{n}: malformed interval line: {exc}") from exc
        per_tag = merged.setdefault(tag, {})
        old = per_tag.get(start_ns)
        if old is None:
            per_tag[start_ns] = IntervalHist(start_ns, end_ns, h)
        else:
            old.hist.add(h)
    return {tag: [v[k] for k in sorted(v)] for tag, v in merged.items()}


def load_run(results_dir: Path, max_points: int = MAX_POINTS) -> RunData:
    """Read a results folder for the report, in memory bounded by ``max_points``.

    summary.json is required; intervals.hlog and timeline.jsonl are optional
    (their absence becomes a note on the page). Both are folded into at most
    ``max_points`` time buckets (``hopbench.report._series``): a run of up to
    ``max_points`` intervals keeps one point per interval.

    Raises:
        ResultsError: naming the folder or file that is missing or malformed.
    """
    path = Path(results_dir)
    if not path.is_dir():
        raise ResultsError(f"{path}: not a results folder (no such directory)")
    summary = read_summary(path)
    snapshot = snapshot_from_summary(summary)
    notes: list[str] = []
    record = summary.get("stage_of_record")  # a staged run: its capacity point's files (docs/slo.md)
    if isinstance(record, str) and record and (path / record).is_dir():
        path_files = path / record
    else:
        path_files = path
    hlog, tl_path = path_files / HLOG_NAME, path_files / TIMELINE_NAME
    # bounded memory whatever the run's length (hopbench.report._series): at most
    # MAX_POINTS points per series, interval histograms folded as they are read
    bucket_ns = bucket_ns_for(span_ns(hlog, tl_path), max_points)
    timeline = fold_timeline(tl_path, bucket_ns)
    if not timeline:
        notes.append(f"{tl_path}: missing or empty; no throughput or in-flight plots")
    intervals: dict[str, list[SeriesPoint]] = {}
    if hlog.is_file():
        intervals = fold_hlog(hlog, _TIMELINE_TAGS, bucket_ns)
    else:
        notes.append(f"{hlog}: missing; no latency-over-time plots")
    return RunData(path, summary, snapshot, timeline, intervals, notes)


# -- HTML ---------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1320px;
color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px}h2{margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:0.9em}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}
table.wrap{width:100%}table.wrap th{font-size:0.85em}
.warn{background:#fff4e5;border-left:4px solid #ff9800;padding:6px 12px;margin:6px 0}
.bad{background:#fdecea;border-left:4px solid #d32f2f;padding:6px 12px;margin:6px 0}
.ok{background:#edf7ed;border-left:4px solid #2e7d32;padding:6px 12px;margin:6px 0}
.note{color:#666;font-size:0.9em}
pre{background:#f7f7f7;padding:10px;overflow:auto;font-size:0.85em;max-height:420px}
.meta span{margin-right:18px}
"""


_e, _fmt, _table = escape, cell, table


def _headline(run: RunData) -> str:
    header = ["scope", "started", "completed", "broken", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99",
              "TPOT p50", "E2E p50", "E2E p99", "out tok/s p50"]
    rows = []
    marked = False
    for scope in run.scopes():
        snap = run.snapshot
        broken = sum(snap.counter(scope, k) for k in BROKEN)
        row: list[object] = [scope, snap.counter(scope, "started"), snap.counter(scope, "completed"), broken]
        entries = ((run.summary.get("scopes") or {}).get(scope) or {}).get("metrics") or {}
        for metric, p in (("ttft", 50), ("ttft", 99), ("itl", 50), ("itl", 99), ("tpot", 50),
                          ("e2e", 50), ("e2e", 99), ("output_tokens_per_s", 50)):
            h = snap.histogram(scope, metric)
            value = h.percentile(p) / h.spec.divisor if h.count else None
            # a percentile whose error bound is too wide to read (docs/results/units.md)
            entry = entries.get(metric)
            if value is not None and isinstance(entry, Mapping) and f"p{p}" in {k for k, _, _ in uncertain(entry)}:
                marked = True
                row.append(_fmt(value) + UNCERTAIN_MARK)
            else:
                row.append(value)
        rows.append(row)
    note = f'<p class="note">{_e(uncertain_note())}</p>' if marked else ""
    return _table(header, rows) + '<p class="note">times in ms; broken = failed + truncated + ' \
        "timeout + connect_error + http_error</p>" + note


def _details_table(runs: Sequence[RunData]) -> str:
    """Every outcome detail with its count (truncated.*, connect_error.*,
    http_error_code.*, ...) and the first error messages kept per kind; "no broken
    streams" in one line when no run has a detail."""
    details = sorted({k for run in runs for k, n in scope_counters(run, ALL).items()
                      if n and k.startswith(DETAIL_KEYS)})
    out = []
    if not details:  # a clean run: one line, not an empty chart (issue 39)
        out.append('<p id="no-broken" class="ok">no broken streams and no anomalies: nothing to show by kind '
                   "and error code</p>")
    if details:
        header = ["detail"] + (["count"] if len(runs) == 1 else ["A", "B"])
        out.append(_table(header, [[k] + [scope_counters(run, ALL).get(k, 0) for run in runs] for k in details]))
    for i, run in enumerate(runs):
        samples = run.summary.get("error_samples")
        if isinstance(samples, Mapping) and samples:
            tag = "" if len(runs) == 1 else f" [{'AB'[i]}]"
            rows = [[kind, text] for kind, texts in samples.items() if isinstance(texts, list)
                    for text in texts]
            out.append(f"<h3>What the target said{_e(tag)} (first messages per error kind, "
                       "secrets redacted)</h3>" + _table(["kind", "message or body"], rows, left=2))
    return "".join(out)


def _verdicts(runs: Sequence[RunData]) -> str:
    """``hopbench compare``'s verdicts of B against A (A the base), as text."""
    from ..views._compare import compare_summaries
    from .._errors import HopbenchError

    try:
        c = compare_summaries(runs[0].summary, runs[1].summary, force=True,
                              base_dir=runs[0].path, candidate_dir=runs[1].path)
    except HopbenchError as exc:
        return f'<div class="warn">{_e(f"no verdicts: {exc}")}</div>'
    worse = c.any_worse
    return (f'<div class="{"bad" if worse else "ok"}">'
            f'{"B is worse than A on at least one figure" if worse else "B is not worse than A"}</div>'
            f"<pre>{_e(c.render('text'))}</pre>")


def _arm_differences(block: Mapping[str, Any]) -> str:
    """summary.json's ``arm_differences`` (hopbench.views._arm_differences): per pair of
    arms, its paired verdicts (per figure the pairs, both medians, the median difference, the
    verdict and its sentence), then each metric's p50/p99 of both, the p50 change and the verdict;
    units as every other table labels them (``tok/s``: ``UNIT_LABELS``)."""
    out = [f'<p class="note">{_e(block.get("method", ""))}; alpha {_e(block.get("alpha"))}, '
           f'min effect {_e(block.get("min_effect"))}.</p>']
    for pair in block.get("pairs", []):
        b, c = str(pair.get("base")), str(pair.get("candidate"))
        paired = pair.get("paired")
        if isinstance(paired, Mapping):  # the rounds' paired differences first (docs/ab-arms.md)
            v = str(paired.get("verdict"))
            out.append(f'<div class="{"bad" if v == "worse" else "ok"}">{_e(c)} against {_e(b)}, paired over '
                       f'{_e(paired.get("n"))} rounds: {_e(v)}</div>')
            out.append(_table(["figure", "pairs", f"{b} p50", f"{c} p50", "p50 diff (ms)", "verdict", "why"],
                              [(f["figure"], f["n"], f["base_p50"], f["candidate_p50"], f["p50_diff"], f["verdict"],
                                f["reason"]) for f in paired.get("figures", [])]
                              + [(r["rate"], "", r["base"], r["candidate"], None, "worse", "over all its requests (the "
                                  "rates are no latency: the unpaired test's)") for r in paired.get("rates_worse") or ()],
                              left=1))
        worse = bool(pair.get("worse"))
        out.append(f'<div class="{"bad" if worse else "ok"}">{_e(c)} against {_e(b)}: '
                   f'{"worse on at least one figure" if worse else "not worse"}</div>')
        rows = []
        for name, m in (pair.get("metrics") or {}).items():
            rel = m["change"]["p50"]["rel"]
            rows.append((name, UNIT_LABELS.get(m["unit"], m["unit"]), m["base"]["p50"], m["candidate"]["p50"],
                         "-" if rel is None else f"{rel:+.1%}", m["base"]["p99"], m["candidate"]["p99"],
                         m["verdict"]))
        for name, r in (pair.get("rates") or {}).items():
            rows.append((name, "rate", r["base"]["value"], r["candidate"]["value"], "", None, None, r["verdict"]))
        out.append(_table(["metric", "unit", f"{b} p50", f"{c} p50", "p50 change", f"{b} p99", f"{c} p99",
                           "verdict"], rows, left=2))
    return "".join(out)


def _tokens_table(run: RunData) -> str:
    rows = []
    for scope in run.scopes():
        counters = scope_counters(run, scope)
        src = tokens_source(counters)
        rows.append([scope] + [counters.get(f"tokens.{d}.{k}", 0) for d in ("input", "output")
                               for k in ("completed", "broken")]
                    + [counters.get(f"tokens.output_events.{k}", 0) for k in ("completed", "broken")]
                    + [counters.get("no_usage", 0), src.source if src.counted else "none: no token counts"])
    return _table(["scope", "input (completed)", "input (broken)", "output (completed)",
                   "output (broken)", "~ output events, no usage (completed)", "~ output events, no usage (broken)",
                   "no usage reported", "output tokens from"], rows)


_STOP_CLASSES = ("stop", "length", "tool_calls", "content_filter", "pause_turn", "abort", "other", "none")
_STREAM_FLAGS = ("refused", "hidden_reasoning", "no_done", "usage_total_mismatch", "tokens_source.usage",
                 "tokens_source.events", "proxy_buffering_suspected", "client_lagged") + BURST_COUNTERS


def _stop_table(run: RunData) -> str:
    """Streams per stop class and per-stream flags, per scope; recorded header values."""
    rows, flags = [], []
    headers: list[list[object]] = []
    for scope in run.scopes():
        counters = scope_counters(run, scope)
        rows.append([scope] + [counters.get(f"stop.{c}", 0) for c in _STOP_CLASSES])
        flags.append([scope] + [counters.get(f, 0) for f in _STREAM_FLAGS])
        headers += [[scope, k[len("header."):].partition("=")[0], k.partition("=")[2], n]
                    for k, n in sorted(counters.items()) if k.startswith("header.") and n]
    # stop classes and flags apart, headers wrapping after "_": each table fits the page (issue 39)
    out = _table(["scope"] + list(_STOP_CLASSES), rows) + _table(
        ["scope"] + [f.replace("tokens_source.", "tokens from ") for f in _STREAM_FLAGS], flags, cls="wrap")
    out += ('<p class="note">streams by stop class (protocol stop reasons mapped by '
            "hopbench.protocols.stop_class; none: no stop reason arrived) and per-stream flags "
            "(docs/results.md, Counters)</p>")
    if headers:
        out += _table(["scope", "response header", "value", "streams"], headers, left=3)
    return out


def _keepalive_table(run: RunData) -> str:
    rows = []
    for scope in run.scopes():
        snap = run.snapshot
        ka = snap.histogram(scope, "keepalive_interval")
        sil = snap.histogram(scope, "max_silence")
        d = NS_PER_MS
        rows.append([scope, snap.counter(scope, "keepalives"), snap.counter(scope, "keepalive_violations"),
                     ka.percentile(50) / d if ka.count else None, ka.max / d if ka.count else None,
                     sil.percentile(50) / d if sil.count else None,
                     sil.percentile(99) / d if sil.count else None,
                     sil.percentile(99.9) / d if sil.count else None, sil.max / d if sil.count else None])
    return _table(["scope", "keepalives", "violations", "gap p50", "gap max", "longest silence p50",
                   "p99", "p99.9", "max"], rows) + \
        '<p class="note">gaps between SSE keepalive comments and, per stream, the longest time with ' \
        "no byte received (ms)</p>"


def _run_meta(run: RunData) -> str:
    s = run.summary
    items = [("run", s.get("name")), ("folder", str(run.path)), ("started", s.get("started_at")),
             ("duration", f"{s.get('duration_s')} s"), ("target", s.get("target")),
             ("complete", s.get("complete")), ("saturated", s.get("saturated")),
             ("workers", s.get("workers"))]
    return '<p class="meta">' + "".join(f"<span><b>{_e(k)}</b> {_e(_fmt(v))}</span>" for k, v in items) + "</p>"


#: plotly.js's "basic" bundle (scatter, bar, pie and the core components: subplots, log axes,
#: shapes, annotations, legends, hover), from the npm package ``plotly.js-basic-dist-min``
#: (MIT: ``plotly-basic.LICENSE`` beside it): 1.2 MB where the full bundle plotly.py ships
#: is 4.8 MB, of which the page used only these traces (docs/report.md, "Why plotly")
PLOTLY_BASIC_JS = Path(__file__).with_name("plotly-basic.min.js")
#: the trace types the basic bundle draws: a figure of any other type needs the full bundle
BASIC_TRACES = frozenset({"scatter", "bar", "pie"})


def basic_bundle_version(text: str) -> str | None:
    """The plotly.js version in a bundle's banner (``plotly.js (basic - minified) v4.1.1``),
    None when the banner names none. Never raises."""
    m = re.search(r"plotly\.js[^\n]*? v(\d+\.\d+\.\d+)", text[:200])
    return m.group(1) if m else None


def same_minor(a: str | None, b: str | None) -> bool:
    """Two plotly.js versions of one major.minor series (``4.1.1``, ``4.1.2``): a patch
    release fixes bugs and keeps the figure schema (semver), so plotly.py's figures for one
    are drawn by the other's bundle. Never raises."""
    return a is not None and b is not None and a.split(".")[:2] == b.split(".")[:2]


def _plotly_js() -> str:
    """The plotly.js the page embeds: the basic bundle when it is of the series plotly.py's
    figures are written for (:func:`same_minor`), else plotly.py's full bundle."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    try:
        basic = PLOTLY_BASIC_JS.read_text(encoding="utf-8")
    except OSError:  # (an install without the file: the full bundle draws the same page)
        basic = ""
    if basic and same_minor(basic_bundle_version(basic), get_plotlyjs_version()):
        return basic
    return str(get_plotlyjs())


def _tagged(parts: list[str], i: int, n: int) -> list[str]:
    """A run's parts under an ``<h3>A</h3>`` / ``<h3>B</h3>`` when comparing (none when empty)."""
    return [f"<h3>{'AB'[i]}</h3>", *parts] if parts and n > 1 else parts


#: the sections a profile exists for, in page order: (id, title); docs/report.md, "Page order"
PURPOSES = (("compare", "Compare verdicts (B against A)"), ("capacity", "Capacity"), ("arms", "A/B arms"),
            ("overhead", "Gateway overhead"), ("gate", "Gate"))


def purpose_sections(runs: Sequence[RunData], gates: Sequence[GateView | None], said: Said) -> list[str]:
    """The sections the runs' profiles exist for, each a ``<section id="purpose-<id>" class="purpose">``
    in :data:`PURPOSES` order, placed under the verdict and before the generic figures.

    Args:
        runs: one run, or two (A, B) when comparing.
        gates: each run's gate verdict (:func:`gate_view`), None without ``[gate]``.
        said: the sentences the page said above (a capacity message already said is shortened).

    Returns:
        HTML parts; empty when no run has any of them (a plain load test).
    """
    a = runs[0]
    bodies: dict[str, list[str]] = {}
    if len(runs) > 1:
        bodies["compare"] = [_verdicts(runs)]
    # staged runs: latency against offered load (hopbench.report._section_capacity)
    capacity = [p for i, run in enumerate(runs)
                for p in _tagged(capacity_section(run.summary, figure_html, said), i, len(runs))]
    if capacity:
        bodies["capacity"] = capacity
    arms = a.summary.get("arm_differences")
    if len(runs) == 1 and isinstance(arms, Mapping):
        bodies["arms"] = [_arm_differences(arms)]
    overhead = overhead_section(runs)  # docs/gateway-overhead.md
    if overhead:
        bodies["overhead"] = overhead
    gate_parts = [p for i, g in enumerate(gates) if g is not None
                  for p in _tagged([gate_section(g, said)] if g.rows else [], i, len(runs))]
    if gate_parts:
        bodies["gate"] = gate_parts
    out = []
    for key, title in PURPOSES:
        if key in bodies:
            out += [f'<section id="purpose-{key}" class="purpose"><h2>{_e(title)}</h2>', *bodies[key], "</section>"]
    return out


def render_html(runs: Sequence[RunData]) -> str:
    """The whole page for one run, or two (A and B, overlaid) when comparing.

    Returns:
        The HTML text (plotly.js's basic bundle included: about 1.3 MB; :func:`_plotly_js`).
    """
    a = runs[0]
    title = f"hopbench report: {a.label}" + (f" vs {runs[1].label}" if len(runs) > 1 else "")
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>",
             f"<style>{_CSS}</style>",
             f'<script type="text/javascript">{_plotly_js()}</script></head><body>',
             f"<h1>{_e(title)}</h1>"]
    said = Said()  # each sentence once: the gate's, the warnings', the capacity search's (docs/report.md)
    gates = [gate_view(run, "" if len(runs) == 1 else f"[{'AB'[i]}] ") for i, run in enumerate(runs)]
    parts.append('<section id="verdict">')  # the run's answer first: docs/report.md, "Page order"
    for i, run in enumerate(runs):
        tag = "" if len(runs) == 1 else f"[{'AB'[i]}] "
        heading = [f"<h3>{_e(tag + run.label)}</h3>"] if len(runs) > 1 else []  # h1 names a lone run
        gate = gates[i]
        if gate is not None:
            said.fresh(gate.sentence)
        parts += heading + [gate.box if gate is not None else "", _run_figures(run), _warnings(run, said),
                            _run_meta(run), _headline(run)]
    parts.append("</section>")
    parts += purpose_sections(runs, gates, said)
    parts += ["<h2>Latency percentile spectrum</h2>",
              '<p class="note">HdrHistogram style: x is 1/(1-p) on a log scale, so the tail gets room.'
              + (" Solid: A, dashed: B." if len(runs) > 1 else "") + "</p>",
              figure_html(spectrum_figure(runs, SPECTRUM_METRICS, "Percentile spectrum per scenario"),
                           "fig-spectrum"),
              "<h2>Over time</h2>", figure_html(timeline_figure(runs), "fig-timeline"),
              *scrape_section(a.path, a.timeline),  # [[scrape]] series (hopbench.report._section_scrape)
              "<h2>Stream outcomes</h2>", figure_html(outcome_figure(runs), "fig-outcomes"),
              _details_table(runs),
              "<h2>Stop reasons and stream flags</h2>"]
    for i, run in enumerate(runs):
        if len(runs) > 1:
            parts.append(f"<h3>{'AB'[i]}</h3>")
        parts.append(_stop_table(run))
    parts.append("<h2>Tokens</h2>")
    for i, run in enumerate(runs):
        if len(runs) > 1:
            parts.append(f"<h3>{'AB'[i]}</h3>")
        parts.append(_tokens_table(run))
    # lengths, prompt cache, session turns (docs/workloads.md): only when a scope has them
    parts += workload_section([("" if len(runs) == 1 else "AB"[i], run.summary.get("scopes") or {})
                               for i, run in enumerate(runs)])
    parts.append("<h2>Keepalives and silences</h2>")
    ka = keepalive_figure(runs)
    if ka is not None:
        parts.append(figure_html(ka, "fig-keepalive"))
    for i, run in enumerate(runs):
        if len(runs) > 1:
            parts.append(f"<h3>{'AB'[i]}</h3>")
        parts.append(_keepalive_table(run))
    for i, run in enumerate(runs):
        tag = "" if len(runs) == 1 else f" [{'AB'[i]}]"
        s = run.summary
        parts.append(f"<h2>Load and generator{_e(tag)}</h2>")
        for key in ("load", "generator"):
            if isinstance(s.get(key), Mapping):
                parts.append(kv_table(s[key]))
        parts.append(f"<h2>Profile{_e(tag)}</h2>")
        parts.append(f"<pre>{_e(json.dumps(s.get('profile'), indent=2, ensure_ascii=False))}</pre>")
        parts.append(f"<h2>Environment{_e(tag)}</h2>")
        if isinstance(s.get("environment"), Mapping):
            parts.append(kv_table(s["environment"]))
    parts.append('<p class="note">written by hopbench report; plots drawn offline by the embedded '
                 "plotly.js</p></body></html>\n")
    return "".join(parts)


def _is_check(folder: Path) -> bool:
    """A check folder: contract.json without a run's summary.json."""
    return (folder / "contract.json").is_file() and not (folder / "summary.json").exists()


def render_contract_html(folder: Path) -> str:
    """report.html of a check folder: its "Streaming contract" section (no figures, no plotly.js).

    Raises:
        ResultsError: contract.json cannot be read or is not JSON.
    """
    path = folder / "contract.json"
    try:
        doc = json.loads(read_text(path))
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ResultsError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, Mapping):
        raise ResultsError(f"{path}: expected a JSON object")
    title = f"hopbench check: {doc.get('target')}"
    return "".join([f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>",
                    f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>", *contract_section(doc),
                    '<p class="note">written by hopbench check / hopbench report</p></body></html>\n'])


def write_report(results_dir: Path, *, compare_dir: Path | None = None, out: Path | None = None) -> Path:
    """Write ``report.html`` for a results folder (optionally compared with another).

    Args:
        results_dir: the results folder (run A).
        compare_dir: a second results folder (run B), overlaid dashed.
        out: the file to write (default ``results_dir / "report.html"``).

    Returns:
        The path written.

    Raises:
        ResultsError: a folder or file cannot be read or is malformed, or the
            report cannot be written (the message names it). Never anything
            else: any other failure while building the page is wrapped in a
            ResultsError, because a run calls this at its end and must not fail.
    """
    results_dir = Path(results_dir)
    target = Path(out) if out is not None else results_dir / REPORT_NAME
    try:
        if compare_dir is None and _is_check(results_dir):  # a `hopbench check` folder (docs/check.md)
            text = render_contract_html(results_dir)
        else:
            runs = [load_run(results_dir)]
            if compare_dir is not None:
                runs.append(load_run(Path(compare_dir)))
            text = render_html(runs)
    except ResultsError:
        raise
    except Exception as exc:  # the boundary: a report must never crash a run
        raise ResultsError(f"cannot build the report for {results_dir}: "
                           f"{type(exc).__name__}: {exc}") from exc
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(write_error(target, exc)) from exc
    replace_text(target, text)  # atomic: a full disk or a Ctrl-C keeps no half report
    return target
