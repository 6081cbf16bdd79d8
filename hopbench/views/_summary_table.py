"""The end-of-run summary on the terminal (rich), from a summary.json dict.

Role: presentation only. It reads the dict :meth:`ResultsWriter.finish`
returns (or :func:`read_summary` reads back), so a saved run renders the same
as a live one. Invariants: fits in 100 columns; never raises on a missing
section (an interrupted run's summary may lack most of them); warnings come
last, red for results that cannot be trusted as they stand, yellow for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..measure._burst import burst_warnings
from ..measure._error_bound import UNCERTAIN_MARK, uncertain, uncertain_note_lines
from .._format import fmt_num as _num
from .._format import cpu_phrase, load_phrase
from ..measure._metrics import METRICS, UNIT_LABELS
from ..measure._outcomes import (ANOMALY_PREFIX, BROKEN, DETAIL_PREFIXES, ERROR_RATE_WARN, OUTCOMES, TokensSource,
                                 detail_tally, tokens_source)

__all__ = ["load_text", "render_summary"]

_OUTCOMES = ("started", *OUTCOMES)
#: warnings that mean the figures cannot be trusted as they stand (red)
_RED_WARNINGS = ("nothing completed", "no output", "error rate", "target lost", "target failing", "target unreachable",
                 "hopbench crashed", "load generator saturated", "run interrupted")
#: stop classes in report order (hopbench.protocols.STOP_CLASSES)
_STOP_CLASSES = ("stop", "length", "tool_calls", "content_filter", "pause_turn", "abort", "other", "none")
#: per-stream flags shown under the stop reasons: counter -> label
_STREAM_FLAGS = (("refused", "refused"), ("hidden_reasoning", "hidden reasoning"),
                 ("no_done", "no [DONE]"), ("usage_total_mismatch", "total != in+out"),
                 ("tokens_source.events", "tpot from events"))


def _int(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


def _metrics_table(name: str, scope: Mapping[str, Any]) -> tuple[Table, list[str]]:
    """One scope's table, and the notes to print under it (the keys to ``~`` and ``<0.001``,
    each line at most ``NOTE_COLUMNS`` wide: printed as lines of their own, not as the table's
    caption, which rich wraps at the table's width)."""
    table = Table(title=f"[bold]{name}[/bold]", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, padding=(0, 1), show_edge=False)
    table.add_column("metric", no_wrap=True)
    table.add_column("unit", no_wrap=True)
    for col in ("count", "p50", "p90", "p99", "p99.9", "max"):
        table.add_column(col, justify="right", no_wrap=True)
    metrics = scope.get("metrics") or {}
    marked_any = False
    shared_read = False  # some time printed as "<0.001" (events that shared a read)
    for metric in list(METRICS) + [m for m in metrics if m not in METRICS]:
        m = metrics.get(metric)
        if not isinstance(m, Mapping):
            continue
        label = metric if not m.get("out_of_range") else f"{metric} (!)"
        # a percentile whose error bound is too wide to read (docs/results/units.md, "Times from the wire")
        marked = {key for key, _, _ in uncertain(m)}
        marked_any = marked_any or bool(marked)

        in_ms = m.get("unit") == "ms"

        def num(key: str) -> str:
            nonlocal shared_read
            value = m.get(key)
            if in_ms and _below_print(value):
                shared_read = True
                return SHARED_READ_TEXT
            return _num(value)

        def pct(key: str) -> Text | str:
            text = num(key)
            return Text(text + UNCERTAIN_MARK, style="yellow") if key in marked else text

        table.add_row(
            label,
            UNIT_LABELS.get(str(m.get("unit")), str(m.get("unit", ""))),
            _int(m.get("count")),
            pct("p50"),
            pct("p90"),
            pct("p99"),
            pct("p999"),
            num("max"),
        )
    notes = (list(uncertain_note_lines()) if marked_any else []) + (list(SHARED_READ_LINES) if shared_read else [])
    return table, notes


#: a time under 0.0005 ms, which 3 decimals would print as a bare 0.000, in the terminal table
SHARED_READ_TEXT = "<0.001"
#: its key under the table, in lines of at most 80 columns (hopbench.measure._error_bound.NOTE_COLUMNS)
SHARED_READ_LINES = (f"{SHARED_READ_TEXT} ms: under 1 us; for itl, events shared a network read (one stamp,",
                     "  a gap of 0, recorded as 1 ns); summary.json keeps the number")
SHARED_READ_NOTE = " ".join(line.strip() for line in SHARED_READ_LINES)


def _below_print(value: object) -> bool:
    """A time in ms that ``fmt_num`` would print as ``0.000`` (0 <= value < 0.0005):
    shown as ``<0.001`` instead (docs/results/units.md, "Zero values")."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 0.0005


def _cancel_line(counters: Mapping[str, int], metrics: Mapping[str, Any]) -> Text:
    """Client cancels joined with the upstream's record: how fast the upstream
    noticed, the tokens it wasted, the upstreams that ran on (yellow when any did)."""
    text = f"client cancels {counters['client_cancelled']:,}"
    matched = counters.get("cancel.matched", 0)
    if matched or counters.get("cancel.unmatched"):
        delay = metrics.get("cancel_delay") or {}
        text += (f" · upstream noticed p50/p99 {_num(delay.get('p50'))}/{_num(delay.get('p99'))} ms"
                 f" · wasted tokens {counters.get('cancel.wasted_tokens', 0):,}"
                 f" · upstream ran to the end {counters.get('cancel.upstream_completed', 0):,}"
                 f" · not noticed {counters.get('cancel.upstream_not_closed', 0):,}")
        if counters.get("cancel.unmatched"):
            text += f" · not in the upstream's record {counters['cancel.unmatched']:,}"
    ran_on = counters.get("cancel.upstream_completed", 0) or counters.get("cancel.upstream_not_closed", 0)
    return Text(text, style="yellow" if ran_on or counters.get("cancel.unmatched") else "")


def _scope_lines(scope: Mapping[str, Any]) -> list[Text]:
    counters: Mapping[str, int] = scope.get("counters") or {}
    lines: list[Text] = []
    line = Text("outcomes: ")
    for i, k in enumerate(k for k in _OUTCOMES if counters.get(k) or k == "completed"):
        if i:
            line.append(" · ")
        style = ("green" if k == "completed" and counters.get(k) else
                 "red" if k in BROKEN or k == "completed" else "yellow" if k == "cancelled" else "")
        line.append(f"{k} {counters.get(k, 0):,}", style=style)
    lines.append(line)
    # every detail with its count: the reason of each failure kind is the point; one count per
    # broken stream: the error bodies' codes are a sub-detail of the http_error ones, and the
    # anomalies (flags, not outcomes) a line of their own (measure._outcomes.detail_tally)
    tally = detail_tally(counters)
    if tally.details or tally.codes:
        parts = [f"{k} {n:,}" for k, n in tally.details]
        last_http = max((i for i, (k, _) in enumerate(tally.details) if k.startswith("http_error.")), default=None)
        if last_http is not None and tally.codes:
            parts[last_http] += f" ({tally.codes_text()})"
        elif tally.codes:
            parts.append(f"({tally.codes_text()})")
        lines.append(Text("details: " + ", ".join(parts), style="dim"))
    if tally.anomalies:
        lines.append(Text("anomalies (flags, not outcomes): " + ", ".join(f"{k} {n:,}" for k, n in tally.anomalies),
                          style="dim"))
    tokens = scope.get("tokens") or {}
    tin, tout = tokens.get("input") or {}, tokens.get("output") or {}
    tev = tokens.get("output_events") or {}  # streams without usage: their output events

    def out(kind: str) -> str:
        n, ev = tout.get(kind, 0), tev.get(kind, 0)
        return ("~" if ev else "") + _int(n + ev)

    src = tokens_source(counters)

    def inp(kind: str) -> str:  # input tokens come from usage only: none reported is unknown, not 0
        return "-" if src.source == "events" else _int(tin.get(kind, 0))

    if not src.counted and not any(tin.get(k) for k in ("completed", "broken")):
        lines.append(Text("tokens in/out: none counted (no stream reported usage or carried a content event)"))
    else:
        lines.append(Text(
            f"tokens in/out: completed {inp('completed')} / "
            f"{out('completed')} · broken {inp('broken')} / {out('broken')}"
            + (f" · no usage reported by {counters['no_usage']:,} streams" if counters.get("no_usage") else "")
            + (f" · output {src.label()}" if src.source in ("events", "mixed") else "")
        ))
    lengths = scope.get("lengths") or {}  # docs/workloads.md: requested vs reported
    if lengths:
        lines.append(Text("lengths requested → reported (mean tokens): " + " · ".join(
            f"{d} {v['requested_mean']:,.1f} → {v['reported_mean']:,.1f} (×{v['ratio']:.3f})"
            for d, v in lengths.items())))
    cache = scope.get("cache")  # docs/results/counters.md, "Prompt cache"
    if cache:
        lines.append(Text(f"prompt cache: {cache['hit_ratio']:.1%} of {_int(cache['prompt_tokens'])} prompt "
                          f"tokens cached ({cache['streams']:,} streams reported it)"
                          + (f"; the trace implies {cache['implied_hit_ratio']:.1%}"
                             if "implied_hit_ratio" in cache else "")))
    turns = scope.get("turns") or []  # docs/results/counters.md, "Sessions"
    if turns:
        shown = turns if len(turns) <= 12 else turns[:10] + turns[-2:]
        lines.append(Text("session turns (streams · mean TTFT ms · mean input tokens): " + " | ".join(
            f"{x['turn']}: {x['streams']:,} · {_num(x['ttft_mean_ms'])} · {_num(x['input_tokens_mean'])}"
            for x in shown)))
    lines.extend(_stop_lines(counters))
    if counters.get("client_cancelled"):  # docs/results/counters.md, "Client cancellation"
        lines.append(_cancel_line(counters, scope.get("metrics") or {}))
    ka, bad = counters.get("keepalives", 0), counters.get("keepalive_violations", 0)
    if ka or bad:
        ka_line = f"keepalives {ka:,} · violations {bad:,}"
        if "max_silence" in (scope.get("metrics") or {}):
            ka_line += f" · max silence p99 {_num(scope['metrics']['max_silence'].get('p99'))} ms"
        lines.append(Text(ka_line, style="yellow" if bad else ""))
    return lines


def _headline(summary: Mapping[str, Any]) -> Text | None:
    """Throughput and error rate over the run (summary.json ``headline``), and that the load
    generator was saturated when it was (summary.json ``saturated``)."""
    head = summary.get("headline")
    if not isinstance(head, Mapping) or not head.get("started"):
        return None
    rate = head.get("error_rate") or 0.0
    intr = head.get("interrupted_rate") or 0.0
    text = Text("run: ", style="bold")
    text.append(f"{head.get('completed', 0):,} of {head.get('started', 0):,} streams completed · "
                f"{_num(head.get('completed_per_s'))} completed/s · "
                f"{tokens_phrase(head)} · ")
    text.append(f"error rate {rate:.1%}", style="bold red" if not head.get("completed") else
                "red" if rate > ERROR_RATE_WARN else "green")
    if intr:
        text.append(f" · interrupted {intr:.1%}", style="yellow")
    if summary.get("saturated") is True:  # the line a reader trusts must not look clean (warnings say why)
        text.append(" · SATURATED: its latencies are the client's, not the target's (see warnings)",
                    style="bold yellow")
    return text


def tokens_phrase(head: Mapping[str, Any], unit: str = "tok/s", span: str = "") -> str:
    """The run's output token rate with where its tokens came from (summary.json
    ``headline``; docs/results/counters.md, "Output tokens without usage").

    Args:
        head: summary.json ``headline``.
        unit: the rate's unit as the caller spells it.
        span: words after the rate (e.g. ``" (over the run)"``), left out without one.

    Returns:
        e.g. ``"693.0 output tok/s"``, ``"693.0 output tok/s ~ counted from events"``,
        or ``"no token counts (no usage, no output events)"``: never a 0 made of no count.
    """
    rate = head.get("output_tokens_per_s")
    src = TokensSource.from_json(head.get("tokens_source"))
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or (src is not None and not src.counted):
        return "no token counts (no usage, no output events)"
    label = "" if src is None else src.label()
    return f"{_num(rate)} output {unit}{span}" + (f" {label}" if label else "")


def load_text(load: Mapping[str, Any]) -> str | None:
    """The load the run held, one line (summary.json ``load``; docs/results/in-flight.md,
    "Load held"): the shared phrase (``hopbench._format.load_phrase``, the words
    ``hopbench gate`` uses too), then, for an open loop, its schedule lag p99 and
    how many requests the dispatcher thread wrote. None when the block says neither."""
    text = load_phrase(load)
    if not text:
        return None
    if load.get("requested_concurrency") is None and load.get("mode") != "concurrency":
        text += f" · schedule lag p99 {_num(load.get('schedule_lag_p99_ms'))} ms"
        if load.get("dispatcher_threads"):
            text += (f" · {_int(load.get('dispatched'))} written by the dispatcher thread, "
                     f"{_int(load.get('spare_connections'))} spare connections")
    return text


def _has(warnings: list[str], phrase: str | tuple[str, ...]) -> bool:
    """True when a warning already says ``phrase`` (e.g. "worker 2: load generator saturated")."""
    phrases = (phrase,) if isinstance(phrase, str) else phrase
    return any(p in w for w in warnings for p in phrases)
def _stop_lines(counters: Mapping[str, int]) -> list[Text]:
    """Streams by stop class, the per-stream flags, and recorded header values."""
    lines: list[Text] = []
    stops = [f"{c} {counters[f'stop.{c}']:,}" for c in _STOP_CLASSES if counters.get(f"stop.{c}")]
    flags = [f"{label} {counters[k]:,}" for k, label in _STREAM_FLAGS if counters.get(k)]
    if stops or flags:
        lines.append(Text("stop reasons: " + (" · ".join(stops) or "-")
                          + ("  |  " + " · ".join(flags) if flags else "")))
    headers: dict[str, list[str]] = {}
    for k, n in sorted(counters.items()):
        if k.startswith("header.") and n:
            name, _, value = k[len("header."):].partition("=")
            headers.setdefault(name, []).append(f"{value} ×{n:,}")
    for name, values in headers.items():
        more = f" (+{len(values) - 6} more)" if len(values) > 6 else ""
        lines.append(Text(f"header {name}: " + ", ".join(values[:6]) + more, style="dim"))
    return lines


def _warnings(summary: Mapping[str, Any]) -> list[Text]:
    out: list[Text] = []
    listed = [str(w) for w in summary.get("warnings") or []]
    said = ("run interrupted", "hopbench crashed", "target unreachable", "target lost", "target failing")
    if summary.get("complete") is not True and not _has(listed, said):  # else the warning says it
        by = summary.get("interrupted_by")
        out.append(Text(
            "INCOMPLETE: the run stopped before its end"
            + (f" (interrupted by {by})" if by else "")
            + "; figures cover the part that ran",
            style="bold red",
        ))
    if summary.get("saturated") and not _has(listed, "load generator saturated"):
        out.append(Text(
            "SATURATED: the client could not keep to the schedule; "
            "latencies include client-side lag",
            style="bold red",
        ))
    load = summary.get("load")
    if isinstance(load, Mapping) and load.get("held") is False and not _has(listed, "load not held"):
        out.append(Text("load not held: the achieved load fell short of the target", style="red"))
    all_scope = (summary.get("scopes") or {}).get("all") or {}
    counters: Mapping[str, int] = all_scope.get("counters") or {}
    # proxy_buffering_suspected / client_lagged are stream flags (shown with the stop
    # reasons); a warning only past the rule summary.json's warnings use (docs/results.md:
    # more than half of the completed streams), so a few flagged streams warn nowhere.
    done = counters.get("completed", 0)
    # the burst verdict: summary.json's own rule (hopbench.measure._burst), re-judged counters included
    if not _has(listed, "proxy buffering") and not _has(listed, "origin_burst"):
        for w in burst_warnings(counters, embedded=summary.get("target") == "embedded"):
            out.append(Text(w, style="yellow"))
    if counters.get("client_lagged", 0) * 2 > done > 0 and not _has(listed, "client_lagged"):
        out.append(Text(
            f"{counters['client_lagged']:,} streams arrived in bursts because the client's own event loop "
            "was late to read them (client_lagged: not evidence of a proxy; see loop_lag)",
            style="yellow",
        ))
    oor = {k.split(".", 1)[1]: n for k, n in counters.items() if k.startswith("out_of_range.") and n}
    if oor and not any("outside the histogram's range" in w for w in listed):
        listing = ", ".join(f"{m} {n:,}" for m, n in sorted(oor.items()))
        out.append(Text(f"values out of range (not in histograms, counted): {listing}", style="yellow"))
    if counters.get("keepalive_violations"):
        out.append(Text(f"keepalive violations: {counters['keepalive_violations']:,}", style="yellow"))
    for w in listed:
        # (an arm's or a scenario's own "nothing completed" / "no output" too)
        bad = w.startswith(_RED_WARNINGS) or ": nothing completed:" in w or ": no output:" in w
        out.append(Text(w, style="bold red" if bad else "yellow"))
    return out


def _warmup_counters(summary: Mapping[str, Any]) -> Mapping[str, Any] | None:
    warm = summary.get("warmup")
    scope = warm.get("all") if isinstance(warm, Mapping) else None
    counters = scope.get("counters") if isinstance(scope, Mapping) else None
    return counters if isinstance(counters, Mapping) else None


def _ended_in_warmup(summary: Mapping[str, Any]) -> bool:
    """The run measured no stream but its warm-up started some: it ended (Ctrl-C, a stop
    reason) inside ``run.warmup_s``, so every figure is empty while streams did run."""
    head = summary.get("headline")
    counters = _warmup_counters(summary)
    return (isinstance(head, Mapping) and head.get("started") == 0 and counters is not None
            and bool(counters.get("started")))


def _warmup_line(summary: Mapping[str, Any]) -> Text | None:
    """The warm-up's broken streams, which the figures above leave out (summary.json
    ``warmup``): a target that failed from the start must not read as "0 broken"; and
    every warm-up stream of a run that ended in its warm-up (:func:`_ended_in_warmup`).
    None when the warm-up broke no stream and the run measured some."""
    counters = _warmup_counters(summary)
    if counters is None or not (any(counters.get(k) for k in BROKEN) or _ended_in_warmup(summary)):
        return None
    outcomes = " · ".join(f"{k} {counters.get(k, 0):,}" for k in ("started", *OUTCOMES) if counters.get(k))
    tally = detail_tally(counters)
    details = ", ".join(f"{k} {n:,}" for k, n in tally.details)
    where = "in no figure" if _ended_in_warmup(summary) else "not in the figures above"
    return Text(f"warm-up ({where}): {outcomes}" + (f"; details: {details}" if details else ""),
                style="red" if not counters.get("completed") else "yellow")


def stamps_phrase(summary: Mapping[str, Any]) -> str:
    """Where the run's event times came from, for the terminal's ``stamps:`` line: the share of
    SSE items whose stamp was exact (the kernel's receive stamp of the read that ended at them)
    and the rest bounded (docs/results/units.md, "Times from the wire"), from the ``all``
    scope's ``wire.items_exact`` / ``wire.items_bounded`` counters; "" without them."""
    scopes = summary.get("scopes")
    sc = scopes.get("all") if isinstance(scopes, Mapping) else None
    counters = sc.get("counters") if isinstance(sc, Mapping) else None
    if not isinstance(counters, Mapping):
        return ""
    exact, bounded = int(counters.get("wire.items_exact") or 0), int(counters.get("wire.items_bounded") or 0)
    total = exact + bounded
    if not total:
        return ""
    if not exact:
        return (f"none of {total:,} SSE items had a kernel receive stamp (transport httpx, TLS, or a platform "
                "without them): each is timed when the event loop read it, with its error bound (error_bound_ms)")
    return (f"{exact / total:.1%} of {total:,} SSE items exact (the kernel's receive stamp of their read), "
            f"{bounded:,} bounded (earlier items of a read: error_bound_ms)")


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print one compact table per scope, then the warnings. The key to a mark (``~``,
    ``<0.001``) comes once, under the first table that shows it.

    Args:
        summary: a summary.json dict (``ResultsWriter.finish`` or ``read_summary``).
        console: where to print; everything fits in 100 columns.

    Never raises on missing sections: what is absent is not shown.
    """
    scopes = summary.get("scopes") or {}
    names = [n for n in scopes if n != "all"]
    # With a single scenario, "all" repeats it, unless it holds global metrics.
    if "all" in scopes:
        only = scopes[names[0]] if len(names) == 1 else None
        if only is None or set(scopes["all"].get("metrics") or {}) != set(only.get("metrics") or {}):
            names.append("all")
    shown: set[str] = set()  # each key to a mark once, under the first table that shows it
    in_warmup = _ended_in_warmup(summary)
    if in_warmup:  # one line, not an empty block per scope
        console.print(Text("no stream was measured: the run ended during its warm-up (the warnings say why)",
                           style="yellow"))
        console.print()
    for name in names:
        scope = scopes[name]
        if not isinstance(scope, Mapping) or (in_warmup and not scope.get("metrics")
                                              and not any((scope.get("counters") or {}).values())):
            continue
        if scope.get("metrics"):
            table, notes = _metrics_table(name, scope)
            console.print(table)
            for note in notes:
                if note not in shown:
                    shown.add(note)
                    console.print(Text(note, style="dim"))
        else:
            console.print(Text.assemble((name, "bold"), ": no values recorded"))
        for line in _scope_lines(scope):
            console.print(line)
        console.print()
    warm = _warmup_line(summary)
    if warm is not None:
        console.print(warm)
    from ..driver._overhead import overhead_lines  # docs/gateway-overhead.md

    for text in overhead_lines(summary.get("gateway_overhead") or {}):
        console.print(Text(text))
    held = load_text(summary.get("load") or {})
    if held is not None:
        console.print(Text.assemble(("load: ", "bold"), held))
    gen = summary.get("generator")
    cpu = cpu_phrase(gen, summary.get("workers")) if isinstance(gen, Mapping) else ""
    if cpu:  # who used the machine's CPUs (one process and --workers alike)
        console.print(Text.assemble(("cpu: ", "bold"), cpu))
    stamps = stamps_phrase(summary)
    if stamps:
        console.print(Text.assemble(("stamps: ", "bold"), stamps))
    head = _headline(summary)
    if head is not None:
        console.print(head)
    warnings = _warnings(summary)
    if warnings:
        console.print(Text("warnings", style="bold"))
        for w in warnings:
            console.print(Text("  ") + w)
    else:
        console.print(Text("no warnings", style="green"))
