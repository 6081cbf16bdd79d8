"""benchmarks/bench_wire_capture.py: hopbench's gateway-overhead figures against a packet capture.

The pcap side (reassembly by sequence number, HTTP and chunked framing, SSE events stamped by
the segment carrying their last byte) is checked on hand-made segments; the whole comparison
runs as a slow test through the tests' delaying proxy and nginx under ``tcpdump -i lo`` (skipped,
saying why, without tcpdump, nginx, dpkt or the permission to capture).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from _gateways import binary


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_wire_capture.py"
    spec = importlib.util.spec_from_file_location("bench_wire_capture", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


B = _bench()
ISN = 2**32 - 5  # the sequence numbers wrap inside the stream


def _segs(chunks: list[tuple[int, bytes]]) -> list[tuple[int, int, bool, bytes]]:
    """Segments (stamp, seq, syn, payload) carrying ``chunks`` (stamp, bytes) in order after a SYN."""
    out, seq = [(0, ISN, True, b"")], ISN + 1
    for ts, data in chunks:
        out.append((ts, seq % 2**32, False, data))
        seq += len(data)
    return out


def test_reassemble_orders_by_sequence_and_keeps_the_first_capture() -> None:
    segs = _segs([(10, b"abc"), (20, b"def"), (30, b"ghi")])
    shuffled = [segs[0], segs[2], segs[1], (40, segs[2][1], False, b"def"), segs[3]]  # out of order, retransmitted
    d = B.reassemble(shuffled)
    assert bytes(d.data) == b"abcdefghi" and d.gaps == 0
    assert [d.stamp_of(i) for i in (0, 2, 3, 5, 6, 8)] == [10, 10, 20, 20, 30, 30]


def test_reassemble_stops_at_a_hole_and_counts_it() -> None:
    segs = _segs([(10, b"abc"), (20, b"def"), (30, b"ghi")])
    d = B.reassemble([segs[0], segs[1], segs[3]])
    assert bytes(d.data) == b"abc" and d.gaps == 3


def test_connections_cut_a_reused_four_tuple_at_each_syn() -> None:
    first = _segs([(10, b"abc")])
    again = [(50, 7, True, b""), (50, 7, True, b""), (60, 8, False, b"xyz")]  # its SYN sent twice
    conns = B.connections(first + again)
    assert len(conns) == 2
    assert [bytes(B.reassemble(c).data) for c in conns] == [b"abc", b"xyz"]
    assert B.reassemble(first + again).gaps > 0  # one stream of both: a hole, the answer lost


def _chat(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


def test_responses_dechunk_and_stamp_each_event_by_its_last_byte() -> None:
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    e1, e2 = _chat("Hel"), _chat("lo")
    body = [role, e1, e2, b"data: [DONE]\n\n"]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(x), x) for x in body) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    raw = head + chunked
    cut1 = len(head) + 5  # the first body byte's segment
    cut2 = raw.index(e2) + len(e2) - 1  # e2's last byte starts the next segment
    d = B.reassemble(_segs([(100, raw[:cut1]), (200, raw[cut1:cut2]), (300, raw[cut2:])]))
    (msg,) = B.responses(d)
    assert msg.status == 200 and msg.complete
    assert msg.first_body_ns == 100
    assert msg.events == [(200, "Hel"), (300, "lo")]  # the role chunk and [DONE] carry no content
    assert msg.last_ns == 300


def test_requests_take_the_header_id_else_the_body_marker() -> None:
    b1 = b'{"messages":[{"role":"user","content":"hi [hb:0-7]"}]}'
    b2 = b'{"messages":[{"role":"user","content":"hi [hb:0-8]"}]}'
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nx-hopbench-request-id: 0-7\r\ncontent-length: %d\r\n\r\n%s"
           % (len(b1), b1)
           + b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(b2), b2))
    half = raw.index(b"POST", 5)
    d = B.reassemble(_segs([(5, raw[:half - 3]), (6, raw[half - 3:half]), (9, raw[half:])]))
    r1, r2 = B.requests(d)
    assert (r1.request_id, r1.last_ns) == ("0-7", 6)
    assert (r2.request_id, r2.last_ns) == ("0-8", 9)


def test_wire_figures_subtract_the_legs() -> None:
    M, L = B.Message, B.Leg
    client = L(M(last_ns=1_000), M(last_ns=9_500, status=200, first_body_ns=5_000, events=[(6_000, "a"), (9_000, "b")],
                                   complete=True))
    up = L(M(last_ns=1_300), M(last_ns=8_200, status=200, first_body_ns=4_800, events=[(5_700, "a"), (8_000, "x")],
                               complete=True))
    fig, differ = B.wire_figures(client, [up])
    assert fig["added_e2e"] == [(9_500 - 1_000) - (8_200 - 1_300)]  # from the requests' last segments, both legs
    assert fig["request_delay"] == [300]
    assert fig["first_event_delay"] == [200]
    assert fig["added_ttft"] == [(6_000 - 1_000) - (5_700 - 1_300)]
    assert fig["event_delay"] == [300] and differ == 1  # "b" against "x": counted, not timed


@pytest.mark.slow
@pytest.mark.parametrize("gw", ["delay", "nginx"])
def test_capture_agrees_with_hopbench_where_it_reads_the_wire(gw: str, tmp_path: Path) -> None:
    """A short run under tcpdump: the legs pair up by request id, hopbench's client read stamps are the
    wire's, and first_event_delay and event_delay meet issue 36's target or are flagged by name.

    request_delay and added_ttft are not asserted: their request-side stamps (the client's send, the
    emulator's receipt) are still taken by the loops (docs/gateway-overhead.md, "Checked against
    packet captures")."""
    pytest.importorskip("dpkt", reason="dpkt is not installed (pip install 'hopbench[bench]')")
    if gw == "nginx" and binary("nginx") is None:
        pytest.skip("nginx is not installed (apt-get install -y nginx-light; .ci/run tries that)")
    try:
        r = B.capture_run(gw, tmp_path, streams=8, duration_s=4, warmup_s=1, delay_ms=5)
    except B.CaptureUnavailable as exc:
        pytest.skip(f"cannot capture on lo: {exc}")
    report = "\n".join(B.report(r))
    c = r.counts
    assert c["measured"] > 0 and c["on_both_legs"] == c["measured"], report
    assert c["event_text_differs"] == 0 and c["bytes_missing_from_capture"] == 0, report
    for stamp in ("client: first body read", "client: content event read"):
        v = r.stamps[stamp]
        assert v and abs(B.pct(v, 50)) <= B.TARGET_P50_MS, (stamp, report)
    rows = {row.figure: row for row in r.rows}
    for fig in ("first_event_delay", "event_delay"):
        assert rows[fig].verdict in ("met", "flagged (named)"), (fig, report)
