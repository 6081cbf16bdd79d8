"""Where a finished stream's record goes: the recorder's histograms and counters.

Role: pure and synchronous (STYLE.md §1). :func:`record_stream` puts one
stream's ``StreamRecord`` (hopbench.measure._meter) into a ``Recorder``:
every figure that exists into its histogram, every flag and outcome into its
counter; :func:`record_lengths` counts requested against reported lengths;
:func:`recorder_sink` is the meter's gap sink, recording each inter-token and
keepalive gap the moment it is measured (so intervals show gaps where they
happened). The counter names are the ones docs/results.md defines.

Invariant: one stream increments each of its outcome counters by exactly 1
(:func:`outcome_counters`), so worker processes and intervals merge exactly.
"""

from __future__ import annotations

from ._lines import HeaderValues
from ._meter import GapSink
from ._rules import StreamRecord
from ._recorder import Recorder

__all__ = ["outcome_counters", "record_lengths", "record_stream", "recorder_sink"]


def recorder_sink(rec: Recorder, scope: str) -> GapSink:
    """A :data:`GapSink` that records into ``rec`` under ``scope`` (and "all").

    Each gap lands in the recorder's *current* interval, so intervals.hlog and
    timeline.jsonl show inter-token gaps in the interval they occurred in, not
    at the stream's end (issue 16).

    Raises:
        UsageError: ``scope`` is not one of ``rec``'s scopes.
    """
    return rec.sink(scope)


def outcome_counters(outcome: str, detail: str) -> tuple[str, ...]:
    """The counters one stream's outcome increments, each by 1.

    Returns:
        ``(outcome,)`` plus, where it applies, ``http_error.<status>`` and
        ``http_error_code.<code>`` (detail "status[:code]"),
        ``<outcome>.<detail>`` (timeout, connect_error, truncated with a
        detail), ``failed.<code>`` ("unknown" without one).
    """
    if outcome == "http_error":
        st, _, code = detail.partition(":")
        return (outcome, f"http_error.{st}") + ((f"http_error_code.{code}",) if code else ())
    if outcome in ("timeout", "connect_error", "truncated") and detail:
        return (outcome, f"{outcome}.{detail}")
    if outcome == "failed":
        return (outcome, f"failed.{detail or 'unknown'}")
    return (outcome,)


def record_stream(rec: Recorder, scope: str, r: StreamRecord,
                  header_values: HeaderValues | None = None) -> None:
    """Record one stream's figures and counters in ``rec`` under ``scope``.

    Histograms get each figure that is not None; ``itl`` and
    ``keepalive_interval`` are not recorded here: the meter's sink
    (:func:`recorder_sink`) recorded each gap when it was measured. Counters: :func:`outcome_counters`, ``keepalive_violations``,
    ``keepalives`` (n), ``anomaly.<kind>`` (n), ``proxy_buffering_suspected``,
    ``client_lagged``,
    ``no_usage``, ``tokens.<input|output>.<completed|broken>`` (n) for
    streams that got a body, and of those ``output_tokens_from.usage`` (streams
    that reported output usage) or, without it, ``output_tokens_from.events``
    and ``tokens.output_events.<completed|broken>`` (n: their output events,
    the run's token count without usage: ``_outcomes.output_tokens``), ``stop.<class>``, ``refused``,
    ``hidden_reasoning``, ``no_done``, ``usage_total_mismatch``,
    ``tokens_source.<usage|events>`` (completed streams),
    ``wire.items_exact`` and ``wire.items_bounded`` (n: SSE items whose
    stamp is exact or bounded; the bounds of figures whose stamps are not
    exact go to ``Recorder.record_bound``),
    ``cache.{streams,prompt_tokens,cached_tokens}`` (streams whose usage
    reported cached tokens and input tokens) and
    ``header.<name>=<value>`` (through ``header_values``; a fresh
    ``HeaderValues`` when None).

    Raises:
        UsageError: ``scope`` is not one of ``rec``'s scenario scopes.
    """
    for name in outcome_counters(r.outcome, r.detail):
        rec.incr(scope, name)
    if r.ttfb_ns is not None:
        rec.record(scope, "ttfb", r.ttfb_ns)
    if r.max_silence_ns is not None:
        rec.record(scope, "max_silence", r.max_silence_ns)
    if r.keepalive_violation:
        rec.incr(scope, "keepalive_violations")
    for metric, value in (("queue_delay", r.queue_delay_ns), ("ttft", r.ttft_ns),
                          ("ttft_from_send", r.ttft_from_send_ns),
                          ("ttft_content", r.ttft_content_ns), ("tail", r.tail_ns)):
        if value is not None:
            rec.record(scope, metric, value)
    if r.keepalives:
        rec.incr(scope, "keepalives", r.keepalives)
    for kind, n in r.anomalies:
        rec.incr(scope, f"anomaly.{kind}", n)
    for metric, value in (("e2e", r.e2e_ns), ("e2e_from_send", r.e2e_from_send_ns),
                          ("tpot", r.tpot_ns), ("output_tokens_per_s", r.output_milli_tokens_per_s)):
        if value is not None:
            rec.record(scope, metric, value)
    for metric, value, below, above in r.bounds:  # figures whose stamps are not exact
        rec.record_bound(scope, metric, value, below, above)
    if r.items_exact:
        rec.incr(scope, "wire.items_exact", r.items_exact)
    if r.items_bounded:
        rec.incr(scope, "wire.items_bounded", r.items_bounded)
    for flag, name in ((r.proxy_buffering_suspected, "proxy_buffering_suspected"),
                       (r.client_lagged, "client_lagged"),
                       (r.refused, "refused"), (r.hidden_reasoning, "hidden_reasoning"),
                       (r.no_done, "no_done"), (r.usage_total_mismatch, "usage_total_mismatch")):
        if flag:
            rec.incr(scope, name)
    if r.stop_class is not None:
        rec.incr(scope, f"stop.{r.stop_class}")
    if r.tokens_source is not None:
        rec.incr(scope, f"tokens_source.{r.tokens_source}")
    if r.headers:
        hv = header_values if header_values is not None else HeaderValues()
        for header, text in r.headers:
            rec.incr(scope, hv.counter(header, text))
    if r.outcome in ("http_error", "connect_error"):
        return
    if r.no_usage:
        rec.incr(scope, "no_usage")
    kind = "completed" if r.outcome == "completed" else "broken"
    if r.input_tokens:
        rec.incr(scope, f"tokens.input.{kind}", r.input_tokens)
    if r.output_tokens:
        rec.incr(scope, f"tokens.output.{kind}", r.output_tokens)
    if r.output_tokens is not None:
        rec.incr(scope, "output_tokens_from.usage")
    elif r.output_events:  # no usage: its output events are its tokens, as tpot counts them
        rec.incr(scope, "output_tokens_from.events")
        rec.incr(scope, f"tokens.output_events.{kind}", r.output_events)
    if r.cached_tokens is not None and r.input_tokens:  # docs/results/counters.md, "Prompt cache"
        rec.incr(scope, "cache.streams")
        rec.incr(scope, "cache.prompt_tokens", r.input_tokens)
        if r.cached_tokens:
            rec.incr(scope, "cache.cached_tokens", min(r.cached_tokens, r.input_tokens))


def record_lengths(rec: Recorder, scope: str, r: StreamRecord,
                   shape: tuple[int | None, int] | None) -> None:
    """Count requested against reported lengths (docs/workloads.md) under ``scope``.

    Args:
        rec: the recorder.
        scope: the scenario's scope name.
        r: the stream's record.
        shape: (requested input tokens or None, ``max_tokens`` sent), or None for
            a scenario without workload keys (then nothing is counted).

    Counters: ``length.input.{streams,requested,reported}`` for streams with a
    requested input length that reported ``input_tokens``;
    ``length.output.{streams,requested,reported}`` for completed streams that
    reported output tokens; ``length.output.over_max`` for those of them that
    reported more output tokens than the ``max_tokens`` they were sent (the
    cap covers every generated token, reasoning included, in all three APIs:
    a target past it ignores ``max_tokens``). The cap is per choice while the
    usage counts every choice (OpenAI chat ``n`` > 1: ``completion_tokens``
    sums them), so a stream of ``choices`` choices is past it only above
    ``max_tokens`` x ``choices``, and that is what it counts as requested (the
    output ratio is then per choice too). Never raises.
    """
    if shape is None:
        return
    inp, out = r.input_tokens, r.output_tokens
    if shape[0] is not None and inp:
        rec.incr(scope, "length.input.streams")
        rec.incr(scope, "length.input.requested", shape[0])
        rec.incr(scope, "length.input.reported", inp)
    if r.outcome == "completed" and out:
        cap = shape[1] * max(r.choices, 1)  # (the cap is per choice: see above)
        rec.incr(scope, "length.output.streams")
        rec.incr(scope, "length.output.requested", cap)
        rec.incr(scope, "length.output.reported", out)
        if out > cap:
            rec.incr(scope, "length.output.over_max")
