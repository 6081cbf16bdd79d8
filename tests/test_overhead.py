"""Gateway overhead's pure core (hopbench.driver._overhead, hopbench.protocols._marker): no sockets, no clock."""

from __future__ import annotations

import json

import pytest

from hopbench.protocols._marker import find_marker, marked_template, marker_text
from hopbench.driver._alignment import SILENCE_FLOOR_NS, align_events, silences
from hopbench.driver._overhead import (
    BUFFER_SPAN_NS,
    ClientStream,
    UpstreamRequest,
    analyse,
    client_from_line,
    overhead_lines,
    upstream_from_record,
)

MS = 1_000_000
BOOT = "boot-a"


# -- the marker ---------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol,body,path", [
    ("chat", {"model": "m", "messages": [{"role": "user", "content": "first"},
                                         {"role": "assistant", "content": "a"},
                                         {"role": "user", "content": "last"}]}, ("messages", 2, "content")),
    ("chat", {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "u"}}]}]},
     ("messages", 0, "content", 0, "text")),
    ("messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}]}]}, ("messages", 0, "content", 0, "text")),
    ("responses", {"model": "m", "input": "plain"}, ("input",)),
    ("responses", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "t"}]}]}, ("input", 0, "content", 0, "text")),
])
def test_marker_template_marks_the_last_user_message(protocol: str, body: dict, path: tuple) -> None:
    tpl = marked_template(protocol, json.dumps(body).encode())
    assert tpl is not None
    raw = tpl[0] + b"0-17" + tpl[1]
    doc = json.loads(raw)
    node = doc
    want = body
    for p in path:
        node, want = node[p], want[p]
    assert node == want + marker_text("0-17")
    assert find_marker(raw) == "0-17"
    # nothing else changed
    assert json.loads(raw.replace(marker_text("0-17").encode(), b"")) == body


def test_marker_none_without_user_text() -> None:
    assert marked_template("chat", b'{"messages": [{"role": "system", "content": "s"}]}') is None
    assert marked_template("chat", b"not json") is None
    assert marked_template("chat", b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}') is None


def test_marker_find_takes_the_last() -> None:
    assert find_marker(b'{"x": "a [hb:1-2] b [hb:1-3] c"}') == "1-3"
    assert find_marker(b'{"x": "no marker [hb:]"}') is None


# -- event alignment ----------------------------------------------------------------------------

def test_align_one_to_one() -> None:
    al = align_events((10, 20, 30), (1, 2, 1), (15, 26, 37), (1, 2, 1))
    assert al.delays_ns == [5, 6, 7]
    assert (al.merged, al.split, al.dropped, al.added) == (0, 0, 0, 0)


def test_align_merged_events_wait_for_the_last_one() -> None:
    # the gateway sent upstream events 0 and 1 as one event at 25
    al = align_events((10, 20, 30), (1, 1, 1), (25, 35), (2, 1))
    assert al.delays_ns == [15, 5, 5]
    assert al.merged == 1 and al.split == 0
    assert al.reads == [(10, 2), (0, 1)]


def test_align_split_dropped_and_added() -> None:
    al = align_events((10, 20), (4, 2), (11, 12, 22), (2, 2, 2))
    assert al.delays_ns == [2, 2] and al.split == 1 and al.merged == 0
    dropped = align_events((10, 20, 30), (1, 1, 1), (11, 21), (1, 1))
    assert dropped.dropped == 1 and dropped.delays_ns == [1, 1]
    added = align_events((10,), (1,), (11, 12), (1, 3))
    assert added.added == 1


def test_align_by_order_without_characters() -> None:
    al = align_events((10, 20), (), (11, 23), ())
    assert al.delays_ns == [1, 3]


def _crc(*texts: str) -> list[int]:
    import zlib

    return [zlib.crc32(t.encode()) for t in texts]


def test_align_swapped_events_are_reordered_without_a_delay() -> None:
    # same lengths: character offsets cannot see the swap; texts can
    up = ("ab", "cd", "ef", "gh")
    al = align_events((10, 20, 30, 40), (2, 2, 2, 2), (11, 31, 32, 41), (2, 2, 2, 2),
                      _crc(*up), _crc("ab", "ef", "cd", "gh"))
    assert al.reordered == 1 and (al.merged, al.split, al.dropped, al.added) == (0, 0, 0, 0)
    # the events that stayed in order are timed where they really arrived
    # (cd moved: by character offsets it would read 31 - 20 = 11 ns, the time "ef" arrived)
    assert al.delays_ns == [1, 1, 1] and al.written_ns == [10, 30, 40]
    # different lengths: not a split and a merge, a swap
    al = align_events((10, 20, 30), (2, 1, 3), (11, 21, 31), (1, 2, 3), _crc("ab", "c", "def"),
                      _crc("c", "ab", "def"))
    assert al.reordered == 1 and (al.merged, al.split, al.dropped) == (0, 0, 0)
    assert len(al.delays_ns) == 2


def test_align_reordering_is_not_confused_with_merges_of_repeated_text() -> None:
    # "x","a","y","a": the gateway merged x+a; the later "a" is in place, nothing moved
    up = _crc("x", "a", "y", "a")
    al = align_events((10, 20, 30, 40), (1, 1, 1, 1), (21, 31, 41), (2, 1, 1), up, _crc("xa", "y", "a"))
    assert al.reordered == 0 and al.merged == 1 and al.delays_ns == [11, 1, 1, 1]
    # repeated tokens in order: paired in order, nothing reordered
    al = align_events((10, 20, 30), (1, 1, 1), (11, 21, 31), (1, 1, 1), _crc("a", "b", "a"), _crc("a", "b", "a"))
    assert al.reordered == 0 and al.delays_ns == [1, 1, 1]


def test_align_tool_events_are_not_compared() -> None:
    al = align_events((10, 20), (1, 1), (11, 21), (1, 1), [-1, -1], [-1, -1])
    assert al.reordered == 0 and al.delays_ns == [1, 1]


def _sil_streams(ka_up: tuple[int, ...], ka_client: tuple[int, ...]) -> tuple[ClientStream, UpstreamRequest]:
    s = 1_000 * MS  # upstream: first bytes at 0, silence to 2 s, events at 2 s and 2.01 s, end 2.02 s
    u = UpstreamRequest("r", None, BOOT, 0, 0, (2 * s, 2 * s + 10 * MS), (1, 1), 2 * s + 20 * MS, 200, "completed",
                        keepalive_write_ns=ka_up)
    c = ClientStream("r", "chat", "completed", None, 200, True, 0, 1 * MS, (2 * s + MS, 2 * s + 11 * MS), (1, 1),
                     2 * s + 21 * MS, keepalive_read_ns=ka_client)
    return c, u


def test_silences_gateway_keepalives_keep_the_client_alive() -> None:
    inj = tuple(i * 300 * MS + MS for i in range(1, 7))  # every 300 ms, 1 ms after the tick
    c, u = _sil_streams((), inj)
    sil = silences(c, u)
    assert sil.silences_ns == [2_000 * MS]
    assert sil.injected == sil.injected_in_silences == 6
    assert sil.intervals_ns == [300 * MS] * 5
    assert sil.client_silence_ns == [300 * MS]  # the keepalive cadence, not the 2 s silence


def test_silences_without_gateway_keepalives_the_client_hears_nothing() -> None:
    c, u = _sil_streams((), ())
    sil = silences(c, u)
    assert sil.injected == 0 and sil.intervals_ns == []
    assert sil.client_silence_ns == [2_000 * MS - MS]  # from the first read (1 ms) to the event
    # the upstream's own keepalives split its silence and are not counted as injected
    c, u = _sil_streams((700 * MS, 1_400 * MS), (701 * MS, 1_401 * MS))
    sil = silences(c, u)
    assert sil.silences_ns == [700 * MS, 700 * MS, 600 * MS] and sil.injected == 0
    assert SILENCE_FLOOR_NS < 600 * MS


def test_analyse_reports_reordered_events_and_silences() -> None:
    import zlib

    s = 1_000 * MS
    rec = {"request_id": "r", "t0_mono_ns": 1, "boot_id": BOOT, "ttft_ns": s, "gaps_ns": [MS, MS], "status": 200,
           "end": "completed", "first_write_ns": 0, "final_write_ns": s + 3 * MS, "event_chars": [2, 2, 2],
           "text": "aabbcc", "reasoning_text": "", "keepalive_write_ns": []}
    u = upstream_from_record(rec)
    assert u is not None and list(u.event_crc) == [zlib.crc32(b"aa"), zlib.crc32(b"bb"), zlib.crc32(b"cc")]
    line = {"id": "r", "scenario": "chat", "outcome": "completed", "sent_ns": 0, "start_ns": 0, "end_ns": s + 9 * MS,
            "first_read_ns": MS, "content_read_ns": [s + 2 * MS, s + 4 * MS, s + 5 * MS],
            "content_chars": [2, 2, 2], "content_crc": _crc("bb", "aa", "cc"),
            "keepalive_read_ns": [250 * MS, 500 * MS, 750 * MS]}
    c = client_from_line(line, 1)
    assert c is not None
    out = analyse([c], [u], boot_id=BOOT)
    assert out.block["events"]["reordered"] == 1
    assert len(out.values[("chat", "event_delay")]) == 2
    sil = out.block["silences"]
    assert sil["upstream_silences"] == 1 and sil["injected_keepalives_inside"] == 3
    assert out.values[("chat", "injected_keepalive_interval")] == [250 * MS, 250 * MS]
    assert any("reordered the stream: 1 content events in 1 streams" in w for w in out.warnings)
    assert any("reordered 1" in x for x in overhead_lines(out.block))
    assert any("upstream silences (> 500 ms): 1 in 1 streams" in x for x in overhead_lines(out.block))


# -- matching and subtraction -------------------------------------------------------------------

def _client(id: str, sent: int = 0, reads: tuple[int, ...] = (60 * MS, 70 * MS), scenario: str = "chat",
            outcome: str = "completed", detail: str | None = None, measured: bool = True, end: int = 80 * MS,
            chars: tuple[int, ...] | None = None, lag: int = 0, output_tokens: int | None = 2,
            keepalives: int = 0, written: bool = True) -> ClientStream:
    """``written``: its request's write stamped at ``sent``, exactly (False: a line without it)."""
    return ClientStream(id, scenario, outcome, detail, 200, measured, sent, reads[0] - MS if reads else None,
                        reads, chars if chars is not None else (1,) * len(reads), end, output_tokens,
                        keepalives, lag, request_sent_ns=sent if written else None)


def _up(id: str | None, received: int = 1 * MS, writes: tuple[int, ...] = (58 * MS, 68 * MS), *,
        marker: str | None = None, boot: str = BOOT, status: int = 200, end: str = "completed",
        fault: str | None = None, end_ns: int = 75 * MS, output_tokens: int | None = 2,
        keepalives: int = 0, wire: int | None = None, wire_error: int = 0) -> UpstreamRequest:
    return UpstreamRequest(id, marker, boot, received, writes[0] - MS if writes else None, writes,
                           (1,) * len(writes), end_ns, status, end, fault, None, output_tokens, keepalives,
                           wire_received_ns=wire, wire_error_ns=wire_error)


def test_analyse_subtracts_per_stream_and_per_event() -> None:
    o = analyse([_client("0-1")], [_up("0-1", received=MS, wire=MS)], boot_id=BOOT)
    v = o.values
    assert v[("chat", "request_delay")] == [1 * MS]
    assert v[("chat", "first_event_delay")] == [2 * MS]
    # client ttft 60 ms, upstream ttft 57 ms
    assert v[("chat", "added_ttft")] == [3 * MS]
    assert v[("chat", "event_delay")] == [2 * MS, 2 * MS]
    # client e2e 80 ms, upstream 74 ms
    assert v[("chat", "added_e2e")] == [6 * MS]
    b = o.block
    assert b["match_rate"] == 1.0 and b["matched_by"] == {"header": 1, "marker": 0}
    assert b["fault_matrix"] == {"none": {"completed": 1}}
    assert not o.warnings


def test_analyse_carries_the_client_stamps_error_bounds() -> None:
    """docs/results/units.md, "Times from the wire": the second client event came in a read with
    a later one (bounded by 8 ms), the first read's first bytes by 1 ms: each figure's sample
    keeps its bound; exact ones have none."""
    import dataclasses

    c = dataclasses.replace(_client("0-1"), content_bound_ns=(0, 8 * MS), first_read_bound_ns=1 * MS,
                            body_end_ns=80 * MS)
    up = _up("0-1", wire=1 * MS)  # the upstream's receive from the wire, exact
    o = analyse([c], [up], boot_id=BOOT)
    assert o.bounds == {("chat", "first_event_delay"): [(2 * MS, 1 * MS, 0)],
                        ("chat", "event_delay"): [(2 * MS, 8 * MS, 0)]}
    # a line without bounds: only added_e2e's end (the client's close, a loop time) is bounded,
    # back to the send (nothing says when the body's last bytes came)
    assert analyse([_client("0-1")], [up], boot_id=BOOT).bounds == {
        ("chat", "added_e2e"): [(6 * MS, 80 * MS, 0)]}


def test_analyse_times_the_upstream_receive_from_its_wire_stamp() -> None:
    """docs/gateway-overhead.md, "Times from the wire at the upstream": the request reached the
    emulator's socket at 1 ms, its app ran at 3 ms: request_delay and the upstream's own TTFT
    start at the wire stamp, each bounded by the stamp's clock move (0.05 ms either way)."""
    o = analyse([_client("0-1")], [_up("0-1", received=3 * MS, wire=1 * MS, wire_error=MS // 20)], boot_id=BOOT)
    assert o.values[("chat", "request_delay")] == [1 * MS]
    # client ttft 60 ms, upstream ttft 58 - 1 = 57 ms (58 - 3 = 55 from the app's stamp)
    assert o.values[("chat", "added_ttft")] == [3 * MS]
    assert o.values[("chat", "added_e2e")] == [6 * MS]
    assert o.bounds[("chat", "request_delay")] == [(1 * MS, MS // 20, MS // 20)]
    assert o.bounds[("chat", "added_ttft")] == [(3 * MS, MS // 20, MS // 20)]
    assert o.block["upstream_received"] == {"wire": 1, "app": 0}
    assert not any("upstream receive" in line for line in overhead_lines(o.block))


def test_analyse_bounds_request_delay_by_its_value_without_a_wire_stamp() -> None:
    """No kernel stamp (TLS, another platform, an older emulator): the app's stamp is late by
    an unknown share of the time since the send, so request_delay's true value lies in [0, v]
    and added_ttft may be that much lower; the fallback is counted and shown."""
    o = analyse([_client("0-1")], [_up("0-1", received=3 * MS)], boot_id=BOOT)
    assert o.values[("chat", "request_delay")] == [3 * MS]
    assert o.bounds[("chat", "request_delay")] == [(3 * MS, 3 * MS, 0)]
    assert o.bounds[("chat", "added_ttft")] == [(5 * MS, 3 * MS, 0)]
    assert o.block["upstream_received"] == {"wire": 0, "app": 1}
    assert any("upstream receive: 1 of 1 requests without the kernel's stamp" in line
               for line in overhead_lines(o.block))
    assert any(w.startswith("gateway overhead: 1 of 1 upstream requests were timed from the emulator's app")
               and w.endswith("(Linux x86-64/arm64)") for w in o.warnings)
    assert not any("emulator's app" in w for w in analyse([_client("0-1")], [_up("0-1", wire=MS)],
                                                          boot_id=BOOT).warnings)


def test_analyse_added_e2e_ends_when_the_bodys_last_bytes_arrived() -> None:
    """Issue 36: the client's end of added_e2e was its close of the body (a loop time, 80 ms,
    after the read loop's work): it is when the body's last bytes reached its socket (77 ms,
    their kernel stamp, exact), and a loop-time end carries its bound (the upstream's receive
    from the wire here, exact: its own bound is the tests above)."""
    import dataclasses

    from hopbench.measure._error_bound import UNBOUNDED_METRICS

    exact = dataclasses.replace(_client("0-1"), content_bound_ns=(0, 0), body_end_ns=77 * MS)
    o = analyse([exact], [_up("0-1", wire=1 * MS)], boot_id=BOOT)
    # client 77 ms from the send, upstream 74 ms from its receive
    assert o.values[("chat", "added_e2e")] == [3 * MS] and o.bounds == {}
    late = dataclasses.replace(exact, body_end_ns=80 * MS, body_end_bound_ns=9 * MS)
    assert analyse([late], [_up("0-1", wire=1 * MS)], boot_id=BOOT).bounds == {("chat", "added_e2e"): [(6 * MS, 9 * MS, 0)]}
    # an older line: the close, bounded back to its last content event's earliest arrival
    old = dataclasses.replace(_client("0-1"), content_bound_ns=(0, 4 * MS))
    assert analyse([old], [_up("0-1", wire=1 * MS)], boot_id=BOOT).bounds[("chat", "added_e2e")] == [(6 * MS, 14 * MS, 0)]
    assert "added_e2e" not in UNBOUNDED_METRICS  # summary.json gives it error_bound_ms


def test_analyse_counts_from_the_requests_write_and_bounds_it() -> None:
    """docs/gateway-overhead.md, "Definitions": request_delay and added_ttft count from the stamp
    just before the write that completed the request (request_sent_ns - request_sent_bound_ns),
    not from the stream's send; the write's duration is their error bound (the true value up to
    that much lower). TTFT's own start is not moved. added_e2e counts from the same write (a new
    user's finding: it counted from the send, the client's own time read as the gateway's)."""
    import dataclasses

    # sent at 0, but its request written between 0.4 and 0.5 ms (a connect, building it)
    c = dataclasses.replace(_client("0-1"), request_sent_ns=MS // 2, request_sent_bound_ns=MS // 10)
    o = analyse([c], [_up("0-1", wire=1 * MS)], boot_id=BOOT)
    assert o.values[("chat", "request_delay")] == [MS - 4 * MS // 10]
    assert o.values[("chat", "added_ttft")] == [3 * MS - 4 * MS // 10]
    assert o.values[("chat", "added_e2e")] == [6 * MS - 4 * MS // 10]
    # its end's bound (a line without body_end_ns: the close, 80 ms after the last read) plus the write's
    assert o.bounds[("chat", "added_e2e")] == [(6 * MS - 4 * MS // 10, 80 * MS + MS // 10, 0)]
    assert o.bounds[("chat", "request_delay")] == [(MS - 4 * MS // 10, MS // 10, 0)]
    assert o.bounds[("chat", "added_ttft")] == [(3 * MS - 4 * MS // 10, MS // 10, 0)]
    assert o.block["request_sent_from"] == {"write": 1, "send": 0}
    assert not any("client send" in line for line in overhead_lines(o.block))


def test_analyse_falls_back_to_the_send_counted_and_bounded_by_the_whole_delay() -> None:
    """A line without the write's stamps (written before this version): from its send, counted,
    and its request_delay known only to lie between 0 and its value (the write came at some time
    between the send and the receipt)."""
    clients = [_client("0-1", written=False), _client("0-2", written=False)]
    o = analyse(clients, [_up("0-1", wire=1 * MS), _up("0-2", wire=1 * MS)], boot_id=BOOT)
    assert o.values[("chat", "request_delay")] == [MS, MS]
    assert o.bounds[("chat", "request_delay")] == [(MS, MS, 0)] * 2
    assert o.bounds[("chat", "added_ttft")] == [(3 * MS, MS, 0)] * 2
    assert o.block["request_sent_from"] == {"write": 0, "send": 2}
    assert any("client send: 2 of 2 streams without their request's write stamps" in line
               for line in overhead_lines(o.block))


def test_client_from_line_reads_the_requests_write_stamps() -> None:
    line = {"id": "0-1", "scenario": "chat", "outcome": "completed", "sent_ns": 5, "start_ns": 5,
            "end_ns": 90, "request_sent_ns": 40, "request_sent_bound_ns": 7}
    c = client_from_line(line, t0_mono_ns=1000)
    assert c is not None and (c.sent_ns, c.request_sent_ns, c.request_sent_bound_ns) == (1005, 1040, 7)
    assert c.wire_sent == (1033, 7)
    old = client_from_line({k: v for k, v in line.items() if not k.startswith("request_")}, 1000)
    assert old is not None and old.request_sent_ns is None and old.wire_sent == (1005, 0)


def test_analyse_matches_by_marker_when_the_gateway_drops_the_header() -> None:
    o = analyse([_client("0-1")], [_up(None, marker="0-1")], boot_id=BOOT)
    assert o.block["matched_by"] == {"header": 0, "marker": 1}
    assert o.block["matched"] == 1


def test_analyse_counts_unseen_retries_and_fault_matrix() -> None:
    clients = [_client("0-1"), _client("0-2", outcome="http_error", detail="502"), _client("0-3")]
    ups = [_up("0-1", received=1 * MS, fault="http_429", status=429, end="http_error", writes=()),
           _up("0-1", received=5 * MS),
           _up("0-2", fault="disconnect", end="disconnect")]
    o = analyse(clients, ups, boot_id=BOOT)
    b = o.block
    assert b["matched"] == 2 and b["unseen_by_upstream"] == 1
    assert b["unseen_outcomes"] == {"completed": 1}
    assert b["retried_streams"] == 1 and b["retry_triggers"] == {"http_429": 1}
    assert b["fault_matrix"] == {"http_429": {"completed after 2 upstream requests": 1},
                                 "disconnect": {"http_error 502": 1}}
    # the retried stream's request delay counts from its first attempt, ttft from the last
    assert o.values[("chat", "request_delay")] == [1 * MS, 1 * MS]
    assert any("never reached the upstream" in w for w in o.warnings)


def test_analyse_no_match_at_all_says_so() -> None:
    o = analyse([_client("0-1"), _client("0-2")], [_up("9-9")], boot_id=BOOT, source='[upstream].listen = "x"')
    assert o.block["match_rate"] == 0.0 and o.block["upstream_requests_unmatched"] == 1
    assert any("none of the 2 client streams reached" in w and '[upstream].listen = "x"' in w for w in o.warnings)
    assert not o.values


def test_analyse_refuses_per_event_figures_across_hosts() -> None:
    o = analyse([_client("0-1")], [_up("0-1", boot="boot-b")], boot_id=BOOT, source="[upstream].record")
    assert o.block["per_event"] is False and o.block["clock"].startswith("other host")
    assert o.block["matched"] == 1  # matching and the fault matrix need no clock
    assert not o.values
    assert any("per-event figures refused ([upstream].record)" in w for w in o.warnings)


def test_analyse_warmup_streams_match_but_do_not_count() -> None:
    o = analyse([_client("0-1", measured=False), _client("0-2")], [_up("0-1"), _up("0-2")], boot_id=BOOT)
    assert o.block["streams"] == 1 and o.block["upstream_requests_unmatched"] == 0
    assert o.block["matched_by"] == {"header": 1, "marker": 0}  # the measured stream's request only
    assert len(o.values[("chat", "added_ttft")]) == 1


def test_analyse_flags_buffering() -> None:
    writes = tuple(i * 20 * MS for i in range(1, 6))
    # a buffer: everything reached the client in one read at the end
    held = _client("0-1", reads=(101 * MS,) * 5, end=110 * MS)
    passed = _client("0-2", reads=tuple(w + MS for w in writes), end=110 * MS)
    o = analyse([held], [_up("0-1", writes=writes, end_ns=100 * MS)], boot_id=BOOT)
    assert o.block["buffering"]["flag"] is True and o.block["buffering"]["streams_buffered"] == 1
    assert any("buffers the stream" in w for w in o.warnings)
    # the delays grow toward the flush: the first event waited longest
    assert o.values[("chat", "event_delay")] == [81 * MS, 61 * MS, 41 * MS, 21 * MS, 1 * MS]
    o2 = analyse([passed], [_up("0-2", writes=writes, end_ns=100 * MS)], boot_id=BOOT)
    assert o2.block["buffering"]["flag"] is False


def test_analyse_a_few_stalled_streams_do_not_flag_the_run() -> None:
    writes = tuple(i * 20 * MS for i in range(1, 6))
    held = [_client(f"0-{i}", reads=(101 * MS,) * 5, end=110 * MS) for i in range(1)]
    passed = [_client(f"0-{i}", reads=tuple(w + MS for w in writes), end=110 * MS) for i in range(1, 4)]
    ups = [_up(f"0-{i}", writes=writes, end_ns=100 * MS) for i in range(4)]
    b = analyse(held + passed, ups, boot_id=BOOT).block["buffering"]
    assert b["streams_buffered"] == 1 and b["streams_multi_event"] == 4 and b["flag"] is False


def test_analyse_one_late_read_is_not_a_buffer() -> None:
    writes = tuple(i * 20 * MS for i in range(1, 11))
    reads = list(w + MS for w in writes)
    reads[3] = reads[4]  # events 3 and 4 (20 ms apart) came in one late read: 2 of 10 events
    o = analyse([_client("0-1", reads=tuple(reads), end=230 * MS)], [_up("0-1", writes=writes, end_ns=220 * MS)],
                boot_id=BOOT)
    assert o.block["buffering"]["flag"] is False


def test_analyse_buffer_threshold_grows_with_the_clients_own_lag() -> None:
    writes = (20 * MS, 20 * MS + BUFFER_SPAN_NS + MS)
    late = _client("0-1", reads=(writes[1] + MS,) * 2, lag=BUFFER_SPAN_NS)
    o = analyse([late], [_up("0-1", writes=writes)], boot_id=BOOT)
    assert o.block["buffering"]["flag"] is False


def test_analyse_counts_negative_differences_and_usage_and_keepalives() -> None:
    c = _client("0-1", sent=2 * MS, output_tokens=None, keepalives=3)  # sent after the upstream received
    o = analyse([c], [_up("0-1", keepalives=1)], boot_id=BOOT)
    assert o.block["negative"] == {"request_delay": 1}
    assert ("chat", "request_delay") not in o.values
    assert o.block["usage"] == {"same": 0, "differs": 0, "dropped": 1, "not_seen_after_cancel": 0}
    assert o.block["keepalives_injected"] == {"streams": 1, "comments": 2}
    assert any("negative differences" in w for w in o.warnings)


def test_records_parse_to_absolute_stamps() -> None:
    line = {"id": "0-1", "scenario": "chat", "outcome": "completed", "detail": None, "status": 200,
            "start_ns": 5, "sent_ns": 10, "end_ns": 100, "first_read_ns": 40,
            "content_read_ns": [50, 60], "content_chars": [2, 3], "keepalives": 1, "client_lag_ns": 7}
    c = client_from_line(line, 1000, warmup_ns=6)
    assert c is not None
    assert (c.sent_ns, c.first_read_ns, tuple(c.content_read_ns), c.end_ns) == (1010, 1040, (1050, 1060), 1100)
    assert c.measured is False and list(c.content_chars) == [2, 3]
    assert client_from_line({"id": "x"}, 0) is None
    rec = {"request_id": "0-1", "marker_id": "0-1", "boot_id": BOOT, "t0_mono_ns": 1000, "ttft_ns": 30,
           "gaps_ns": [5, 7], "first_write_ns": 2, "final_write_ns": 50, "duration_ns": 60, "status": 200,
           "end": "completed", "event_chars": [1, 1, 1]}
    u = upstream_from_record(rec)
    assert u is not None
    assert list(u.event_write_ns) == [1030, 1035, 1042] and u.first_write_ns == 1002 and u.end_ns == 1050
    assert u.wire_received_ns is None and u.arrived_ns == 1000  # no wire stamp: the app's
    u = upstream_from_record({**rec, "t0_wire_mono_ns": 990, "t0_wire_error_ns": 3})
    assert u is not None and (u.wire_received_ns, u.wire_error_ns, u.arrived_ns) == (990, 3, 990)
    assert upstream_from_record({"request_id": "0-1"}) is None  # an emulator without absolute stamps


def test_overhead_lines_show_match_retries_buffering_and_the_fault_matrix() -> None:
    clients = [_client("0-1"), _client("0-2", outcome="http_error", detail="503")]
    ups = [_up("0-1", fault="http_500", status=500, end="http_error", writes=()), _up("0-1", received=3 * MS),
           _up("0-2", fault="http_503", status=503, end="http_error", writes=())]
    lines = overhead_lines(analyse(clients, ups, boot_id=BOOT).block)
    assert lines[0].startswith("gateway overhead (same host): matched 2/2 (100.0%)") and "retried 1" in lines[0]
    assert "  retries triggered by: http_500 1" in lines
    assert "  upstream http_500 -> completed after 2 upstream requests 1" in lines
    assert "  upstream http_503 -> http_error 503 1" in lines
    assert any(x.startswith("  events: 2 upstream") and "buffering no" in x for x in lines)
    assert overhead_lines({}) == []


def test_analyse_event_delay_over_time() -> None:
    # stream 2 is sent 1.5 s after stream 1; its events wait 10 ms instead of 1 ms
    s = 1_000 * MS
    a = _client("0-1", sent=0, reads=(101 * MS, 201 * MS), end=300 * MS)
    b = _client("0-2", sent=s + 500 * MS, reads=(s + 610 * MS, s + 710 * MS), end=s + 800 * MS)
    ups = [_up("0-1", received=MS, writes=(100 * MS, 200 * MS), end_ns=250 * MS),
           _up("0-2", received=s + 501 * MS, writes=(s + 600 * MS, s + 700 * MS), end_ns=s + 750 * MS)]
    series = analyse([a, b], ups, boot_id=BOOT).block["event_delay_over_time"]
    assert [p["t_s"] for p in series] == [0.0, 1.0]
    assert [p["events"] for p in series] == [2, 2]
    assert [p["p50_ms"] for p in series] == [1.0, 10.0]
    assert series[1]["max_ms"] == 10.0


@pytest.mark.parametrize("protocol,events", [
    ("chat", [b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
              b'{"choices":[{"index":0,"delta":{"reasoning_content":"th"}}]}',
              b'{"choices":[{"index":0,"delta":{"content":"h\\u00e9"}}]}',
              b'{"choices":[{"index":0,"delta":{"content":"llo"}}]}']),
    ("messages", [b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"th"}}',
                  b'{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"h\\u00e9"}}',
                  b'{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"llo"}}']),
])
def test_meter_fingerprints_each_content_events_text(protocol: str, events: list[bytes]) -> None:
    """The client's per-event text fingerprints (streams.jsonl content_crc) are the CRC-32 of
    the same texts the upstream's record cuts from its text (upstream_from_record)."""
    from hopbench.measure._meter import StreamMeter
    from hopbench.measure._lines import overhead_line
    from hopbench.protocols import new_decoder
    from hopbench.sse import SSEEvent

    meter = StreamMeter(0, 0)
    meter.event_chars, meter.event_read_ns, meter.event_crc, meter.keepalive_read_ns = [], [], [], []
    dec = new_decoder(protocol, keep_text=True)
    kept = dec.kept_fragments()
    for t, data in enumerate(events):
        obs = dec.feed(SSEEvent("message", data))
        meter.on_observations(t, obs)
        meter.on_event_texts(obs, kept)
    line = overhead_line(meter, 0)
    assert line["content_chars"] == [2, 2, 3]
    assert line["content_crc"] == _crc("th", "hé", "llo")
    rec = {"t0_mono_ns": 1, "ttft_ns": 1, "gaps_ns": [1, 1], "event_chars": [2, 2, 3], "text": "héllo",
           "reasoning_text": "th", "status": 200, "end": "completed"}
    u = upstream_from_record(rec)
    assert u is not None and list(u.event_crc) == line["content_crc"]


def test_silences_count_any_client_read_not_only_content_and_keepalives() -> None:
    # a gateway that keeps the connection alive with events that carry no content
    c, u = _sil_streams((), ())
    quiet = tuple(i * 400 * MS for i in range(1, 5))
    c = ClientStream(c.id, c.scenario, c.outcome, c.detail, c.status, True, c.sent_ns, c.first_read_ns,
                     c.content_read_ns, c.content_chars, c.end_ns, quiet_read_ns=quiet)
    sil = silences(c, u)
    assert sil.injected == 0 and sil.client_silence_ns == [400 * MS]


def test_meter_quiet_reads_are_the_reads_without_content() -> None:
    from hopbench.measure._meter import StreamMeter
    from hopbench.measure._lines import overhead_line
    from hopbench.protocols import ContentDelta, Keepalive

    m = StreamMeter(0, 0)
    m.event_chars, m.event_read_ns, m.event_crc, m.keepalive_read_ns = [], [], [], []
    m.quiet_read_ns = []
    m.on_headers(1)
    for t, obs in ((10, [Keepalive(b": x")]), (20, []), (30, [ContentDelta("text", 2)]),
                   (40, [ContentDelta("text", 1), ContentDelta("text", 1)])):
        m.on_read(t)
        m.on_observations(t, obs)
    line = overhead_line(m, 0)
    assert line["quiet_read_ns"] == [10, 20] and line["keepalive_read_ns"] == [10]
    assert line["content_read_ns"] == [30, 40, 40]


def test_error_bound_warning_names_the_upstream_stamp_for_request_delay() -> None:
    """A request_delay tail too wide to read comes from the emulator's missing receive stamp,
    not from the client's lateness: the warning says so (the other figures keep theirs)."""
    from hopbench.measure._error_bound import error_bound_warnings

    wide = {"p50": 3.0, "p90": 3.0, "p99": 3.0, "p999": 3.0,
            "error_bound_ms": {"p50": 3.0, "p90": 3.0, "p99": 3.0, "p999": 3.0}}
    (rd,) = error_bound_warnings({"request_delay": wide})
    assert "the upstream's receive was its app's stamp" in rd and "client_read_lag" not in rd
    (ttft,) = error_bound_warnings({"added_ttft": wide})  # it ends on an upstream write too
    assert "the client read late or the upstream emulator wrote late: see client_read_lag" in ttft
    (itl,) = error_bound_warnings({"itl": wide})
    assert "(the client read late: see client_read_lag)" in itl
