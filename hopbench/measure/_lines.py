"""What a finished stream writes to streams.jsonl, and the response headers it records.

Role: pure and synchronous (STYLE.md §1). :func:`stream_line` turns one
stream's ``StreamRecord`` (hopbench.measure._meter) into its streams.jsonl line
(docs/results/files.md, "streams.jsonl"); :func:`overhead_line` adds the per-event
read stamps that gateway overhead joins against the upstream's record
(docs/gateway-overhead.md); :func:`capture_headers` and :class:`HeaderValues`
bound what ``run.record_headers`` records. Stamps in a line are integer ns
from the run's start.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._burst import SUSPECTED
from ._digest import digest_percentile
from ._meter import StreamMeter
from ._rules import StreamRecord

__all__ = ["HEADER_VALUE_MAX_CHARS", "HEADER_VALUES_MAX", "HeaderValues", "add_run_fields", "arm_fields",
           "capture_headers", "overhead_line", "stream_line"]

HEADER_VALUE_MAX_CHARS = 64
"""A recorded response header value is cut to this many characters."""

HEADER_VALUES_MAX = 20
"""Distinct values counted per recorded header and process; later new values
are counted as ``header.<name>=(other)``."""


def capture_headers(get: Any, names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """The response headers ``run.record_headers`` names, bounded for recording.

    Args:
        get: a lookup ``name -> str | None`` (e.g. ``httpx.Headers.get``;
            header names are case-insensitive there).
        names: lower-case header names (validated by the profile: never an
            auth header).

    Returns:
        (name, value) pairs in ``names`` order for the headers present; each
        value stripped, cut to ``HEADER_VALUE_MAX_CHARS`` characters, control
        characters replaced by "?".
    """
    out = []
    for name in names:
        value = get(name)
        if value is None:
            continue
        v = "".join(c if c.isprintable() else "?" for c in str(value).strip()[:HEADER_VALUE_MAX_CHARS])
        out.append((name, v))
    return tuple(out)


#: response headers every run with ``[upstream]`` records (beside ``run.record_headers``): they
#: tell which gateway it is, so that advice can name its own setting (docs/gateway-overhead.md,
#: "Buffering settings"): ``server`` (nginx, Caddy, Envoy write theirs) and LiteLLM's version header
GATEWAY_KIND_HEADERS: tuple[str, ...] = ("server", "x-litellm-version")


class HeaderValues:
    """Names the counter of a recorded header's value, bounding distinct values.

    One per process (the runner's); pure and synchronous. Each header gets at
    most ``max_values`` distinct value counters (``header.<name>=<value>``);
    values first seen after that count as ``header.<name>=(other)``, so a
    header that carries a request id cannot grow summary.json without bound.
    Worker processes bound their own values: a merged run holds at most
    ``workers * max_values`` per header.
    """

    __slots__ = ("_seen", "_max")

    def __init__(self, max_values: int = HEADER_VALUES_MAX) -> None:
        self._seen: dict[str, set[str]] = {}
        self._max = max_values

    def counter(self, name: str, value: str) -> str:
        """The counter name for one stream's ``name: value``."""
        seen = self._seen.setdefault(name, set())
        if value not in seen:
            if len(seen) >= self._max:
                return f"header.{name}=(other)"
            seen.add(value)
        return f"header.{name}={value}"


def stream_line(r: StreamRecord, request_id: str, scope: str, t0_ns: int,
                sent_at: tuple[int, int] | None = None) -> dict[str, Any]:
    """One streams.jsonl line (docs/results.md): stamps relative to ``t0_ns``.

    ``sent_at``: stamps (ns, the run's clock) just before and just after the write
    that completed the request (``hopbench.engine._transport.SENT_AT``), or None
    (not written, or not known): then ``request_sent_ns`` (the after stamp, from the
    run start) and ``request_sent_bound_ns`` (after - before: the last byte reached
    the kernel at most that much earlier) are left out.

    Returns:
        A JSON-ready dict: id, scenario, outcome, detail (None when ""), status,
        start/sent/headers/first_token/first_content/terminal/end stamps (ns
        from the run start, None when absent), ttft_ns, ttft_content_ns,
        e2e_ns (start to the answer's end, every outcome), tail_ns,
        content_events (non-reasoning), output_events (any channel), events
        (per channel), input/output/total tokens,
        tokens_source, stop_class, max_silence_ns (0 without a response head),
        keepalives, client_lag_ns, ``burst`` ("proxy_buffering_suspected",
        "client_lagged" or None) and ``burst_held_ns`` (the suspected burst's hold,
        else None), ``cached_tokens`` when the usage reported it, and ``headers``
        (name -> value) when any were recorded.
    """

    def rel(t: int | None) -> int | None:
        return None if t is None else t - t0_ns

    line: dict[str, Any] = {
        "id": request_id, "scenario": scope, "outcome": r.outcome, "detail": r.detail or None,
        "status": r.status, "start_ns": rel(r.start_ns), "sent_ns": rel(r.sent_ns),
        "headers_ns": rel(r.headers_ns), "first_token_ns": rel(r.first_token_ns),
        "first_content_ns": rel(r.first_content_ns), "terminal_ns": rel(r.terminal_ns),
        "end_ns": rel(r.end_ns), "ttft_ns": r.ttft_ns, "ttft_content_ns": r.ttft_content_ns,
        "e2e_ns": r.elapsed_ns, "tail_ns": r.tail_ns,
        "content_events": r.content_events, "output_events": r.output_events, "events": dict(r.events),
        "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
        "total_tokens": r.total_tokens, "tokens_source": r.tokens_source,
        "stop_class": r.stop_class,
        "max_silence_ns": r.max_silence_ns or 0, "keepalives": r.keepalives,
        "client_lag_ns": r.client_lag_ns,
    }
    if sent_at is not None:  # only where the request's write was stamped
        line["request_sent_ns"] = sent_at[1] - t0_ns
        line["request_sent_bound_ns"] = max(sent_at[1] - sent_at[0], 0)
    if r.cached_tokens is not None:  # only where the usage reported it
        line["cached_tokens"] = r.cached_tokens
    if r.headers:
        line["headers"] = dict(r.headers)
    # the client's burst flag, re-judged after the run (hopbench.measure._burst.BURST_LINE_MARK)
    line["burst"] = SUSPECTED if r.proxy_buffering_suspected else "client_lagged" if r.client_lagged else None
    line["burst_held_ns"] = r.burst_held_ns
    return line


def add_run_fields(line: dict[str, Any], r: StreamRecord, m: StreamMeter, t0_ns: int, *, warmup: bool,
                   arm: str | None, scenario: str, shape: tuple[int | None, int] | None,
                   fields: Iterable[tuple[str, Any]] | None, overhead: bool) -> dict[str, Any]:
    """Add to ``line`` (``stream_line``'s) the fields a run's setup decides, in this order:
    ``warmup`` (a warm-up stream, docs/results/files.md); in an A/B arms run ``arm``, the
    scenario's own name as ``scenario`` (in place of the arm's scope) and ``arm_fields``;
    ``requested_input_tokens`` / ``requested_max_tokens`` from ``shape`` (docs/workloads.md);
    the workload entry's own ``fields`` ((name, value) pairs); and with ``overhead`` ``overhead_line(m, t0_ns)``.

    Returns:
        ``line``, changed in place.
    """
    line["warmup"] = warmup
    if arm is not None:
        line["arm"], line["scenario"] = arm, scenario
        line.update(arm_fields(r))
    if shape is not None:
        line["requested_input_tokens"], line["requested_max_tokens"] = shape
    if fields is not None:
        line.update(fields)
    if overhead:
        line.update(overhead_line(m, t0_ns))
    return line


def arm_fields(r: StreamRecord) -> dict[str, Any]:
    """The streams.jsonl fields an A/B arms run adds per stream, for its paired verdicts
    (docs/ab-arms.md, "Paired verdicts"; ``hopbench.views._arm_differences``).

    Args:
        r: the stream's record; its ``itl_digest`` kept (``StreamMeter(itl_digest=True)``).

    Returns:
        ``tpot_ns`` (the stream's time per output token, ns, None when it has none) and
        ``itl_p50_ns`` / ``itl_p99_ns`` (the median and p99 of the stream's own inter-token
        gaps by nearest rank over their digest, ns: the top of the digest's bucket, at
        most 1/128 above the true gap (hopbench.measure._digest); None without a gap).
    """
    digest = r.itl_digest or ()
    return {"tpot_ns": r.tpot_ns, "itl_p50_ns": digest_percentile(digest, 50) if digest else None,
            "itl_p99_ns": digest_percentile(digest, 99) if digest else None}


def overhead_line(m: StreamMeter, t0_ns: int) -> dict[str, Any]:
    """The streams.jsonl fields that gateway overhead needs (docs/gateway-overhead.md).

    Args:
        m: the stream's meter, its ``event_chars`` and ``event_read_ns`` lists set by the runner.
        t0_ns: the run's start (stamps are relative to it, like ``stream_line``).

    Returns:
        ``first_read_ns`` (the first body read, ns from the run start, or None),
        ``content_read_ns`` (list, one read stamp per content event in stream
        order, ns from the run start), ``content_chars`` (list, the
        characters of each of those events), ``content_crc`` (list, the CRC-32
        of each event's text, -1 for a tool-call event; ``StreamMeter.on_event_texts``)
        ``keepalive_read_ns`` (list, the read stamp of each keepalive comment,
        ns from the run start) and ``quiet_read_ns`` (list, the stamp of each body
        read that carried no content event, ns from the run start);
        ``content_bound_ns`` (list, the error bound of each content event's
        stamp, ns, 0: exact) and ``first_read_bound_ns`` (the first read's, of
        its first bytes; docs/results/units.md, "Times from the wire");
        ``body_end_ns`` (when the body's last bytes reached the socket, ns from
        the run start, or None: the read loop did not end) and ``body_end_bound_ns``
        (its error bound, ns, 0: exact; ``StreamMeter.on_body_end``).
    """
    out = {"first_read_ns": None if m.first_read_ns is None else m.first_read_ns - t0_ns,
            "content_read_ns": [t - t0_ns for t in m.event_read_ns or ()],
            "content_chars": list(m.event_chars or ()),
            "content_crc": list(m.event_crc or ()),
            "keepalive_read_ns": [t - t0_ns for t in m.keepalive_read_ns or ()],
            "quiet_read_ns": [t - t0_ns for t in m.quiet_read_ns or ()]}
    out["content_bound_ns"] = list(m.event_bound_ns or ())
    out["first_read_bound_ns"] = m.first_read_bound_ns
    out["body_end_ns"] = None if m.body_end_ns is None else m.body_end_ns - t0_ns
    out["body_end_bound_ns"] = m.body_end_bound_ns
    return out
