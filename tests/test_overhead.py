"""Gateway overhead's pure core (hopbench._overhead, hopbench._marker): no sockets, no clock."""

from __future__ import annotations

import json

import pytest

from hopbench._marker import find_marker, marked_template, marker_text
from hopbench._overhead import (
    BUFFER_SPAN_NS,
    ClientStream,
    UpstreamRequest,
    align_events,
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


# -- matching and subtraction -------------------------------------------------------------------

def _client(id: str, sent: int = 0, reads: tuple[int, ...] = (60 * MS, 70 * MS), scenario: str = "chat",
            outcome: str = "completed", detail: str | None = None, measured: bool = True, end: int = 80 * MS,
            chars: tuple[int, ...] | None = None, lag: int = 0, output_tokens: int | None = 2,
            keepalives: int = 0) -> ClientStream:
    return ClientStream(id, scenario, outcome, detail, 200, measured, sent, reads[0] - MS if reads else None,
                        reads, chars if chars is not None else (1,) * len(reads), end, output_tokens,
                        keepalives, lag)


def _up(id: str | None, received: int = 1 * MS, writes: tuple[int, ...] = (58 * MS, 68 * MS), *,
        marker: str | None = None, boot: str = BOOT, status: int = 200, end: str = "completed",
        fault: str | None = None, end_ns: int = 75 * MS, output_tokens: int | None = 2,
        keepalives: int = 0) -> UpstreamRequest:
    return UpstreamRequest(id, marker, boot, received, writes[0] - MS if writes else None, writes,
                           (1,) * len(writes), end_ns, status, end, fault, None, output_tokens, keepalives)


def test_analyse_subtracts_per_stream_and_per_event() -> None:
    o = analyse([_client("0-1")], [_up("0-1")], boot_id=BOOT)
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
    assert o.block["usage"] == {"same": 0, "differs": 0, "dropped": 1}
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
