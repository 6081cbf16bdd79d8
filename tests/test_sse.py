"""Tests for hopbench.sse: the WHATWG event-stream scanner.

Every rule of WHATWG HTML §9.2.6 (interpreting an event stream) that the scanner
implements has a test here, plus the spec's own examples, every split point of
multi-event streams, byte-by-byte feeding with empty reads between, the seed
streams of all three protocols, and a hypothesis property test checked against
a deliberately naive reference parser written straight from the spec.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hopbench import sse
from hopbench._errors import HopbenchError, UsageError
from hopbench.sse import (
    SSEComment,
    SSEError,
    SSEEvent,
    SSEItem,
    SSEScanner,
    _new_comment,
    _new_event,
)

DATA_DIR = Path(__file__).parent / "data"
SEEDS_DIR = Path(__file__).resolve().parent / "data" / "seeds"
BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------- helpers


def scan(chunks: Iterable[bytes | bytearray | memoryview], max_event_bytes: int = 4 * 1024 * 1024) -> tuple[list[SSEItem], bool, int | None]:
    """Feed ``chunks`` to a fresh scanner; return (items, close() result, retry_ms)."""
    scanner = SSEScanner(max_event_bytes=max_event_bytes)
    items: list[SSEItem] = []
    for chunk in chunks:
        items.extend(scanner.feed(chunk))
    discarded = scanner.close()
    return items, discarded, scanner.retry_ms


def whole(stream: bytes) -> list[SSEItem]:
    return scan([stream])[0]


def pieces(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def reference(stream: bytes) -> tuple[list[SSEItem], bool, int | None]:
    """A slow, literal reading of WHATWG HTML §9.2.6, used as the oracle.

    Splits the whole body at once (so no chunking logic at all), then walks the
    lines with the spec's buffers. Deliberately shares no code with the scanner.
    """
    if stream.startswith(BOM):
        stream = stream[3:]
    lines = re.split(rb"\r\n|\r|\n", stream)
    tail = lines.pop()  # not terminated: never processed
    items: list[SSEItem] = []
    data_buf = b""
    type_buf: bytes | None = None
    last_id = b""
    retry: int | None = None
    for line in lines:
        if line == b"":
            if data_buf == b"":
                type_buf = None
                continue
            if data_buf.endswith(b"\n"):
                data_buf = data_buf[:-1]
            name = type_buf.decode("utf-8", "replace") if type_buf else "message"
            items.append(SSEEvent(name, data_buf, last_id.decode("utf-8", "replace")))
            data_buf = b""
            type_buf = None
            continue
        if line.startswith(b":"):
            items.append(SSEComment(line[1:]))
            continue
        if b":" in line:
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
        else:
            field, value = line, b""
        if field == b"data":
            data_buf += value + b"\n"
        elif field == b"event":
            type_buf = value
        elif field == b"id":
            if b"\x00" not in value:
                last_id = value
        elif field == b"retry":
            if value and all(48 <= c <= 57 for c in value):
                retry = int(value)
    return items, bool(tail) or data_buf != b"" or type_buf is not None, retry


# --------------------------------------------------------------------------- API shape


def test_sse_error_is_a_hopbench_error() -> None:
    assert issubclass(SSEError, HopbenchError)


def test_scanner_rejects_a_non_positive_bound() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UsageError, match="max_event_bytes"):
            SSEScanner(max_event_bytes=bad)  # type: ignore[arg-type]


def test_scanner_fast_constructors_equal_the_records() -> None:
    event = _new_event("message", b"x", "7")
    comment = _new_comment(b" ka")
    assert event == SSEEvent("message", b"x", "7") and type(event) is SSEEvent
    assert hash(event) == hash(SSEEvent("message", b"x", "7"))
    assert repr(event) == repr(SSEEvent("message", b"x", "7"))
    assert comment == SSEComment(b" ka") and type(comment) is SSEComment
    assert hash(comment) == hash(SSEComment(b" ka"))
    with pytest.raises(AttributeError):
        event.data = b"y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        comment.text = b"y"  # type: ignore[misc]
    match event:
        case SSEEvent(event="message", data=b"x", id="7"):
            pass
        case _:
            pytest.fail("fast-built event does not match its class pattern")


def test_scanner_fast_constructors_skip_nothing_the_records_define() -> None:
    # The fast constructors fill the slots directly: they are only right while
    # the records have exactly these fields and nothing runs after __init__.
    assert SSEEvent.__slots__ == sse._EventShape.__slots__ == ("event", "data", "id")
    assert SSEComment.__slots__ == sse._CommentShape.__slots__ == ("text",)
    for record in (SSEEvent, SSEComment):
        assert not hasattr(record, "__post_init__")
    assert [f.name for f in dataclasses.fields(SSEEvent)] == ["event", "data", "id"]
    assert [f.name for f in dataclasses.fields(SSEComment)] == ["text"]


def test_scanner_returns_a_new_list_each_time() -> None:
    scanner = SSEScanner()
    first = scanner.feed(b"data: a")
    first.append(SSEComment(b"caller's"))
    assert scanner.feed(b"bc") == []
    second = scanner.feed(b"\n\n")
    assert second == [SSEEvent("message", b"abc")] and second is not first


def test_scanner_max_event_bytes_is_read_only() -> None:
    scanner = SSEScanner(max_event_bytes=64)
    assert scanner.max_event_bytes == 64
    with pytest.raises(AttributeError):
        scanner.max_event_bytes = 128  # type: ignore[misc]


def test_scanner_accepts_bytearray_and_memoryview() -> None:
    stream = b"data: a\n\ndata: b\n\n"
    buf = bytearray(stream[:5])
    items, _, _ = scan([buf, memoryview(stream)[5:]])
    assert items == [SSEEvent("message", b"a"), SSEEvent("message", b"b")]


def test_scanner_copies_reused_bytearray_input() -> None:
    scanner = SSEScanner()
    buf = bytearray(b"data: abc")
    assert scanner.feed(buf) == []
    buf[:] = b"XXXXXXXXX"
    assert scanner.feed(b"\n\n") == [SSEEvent("message", b"abc")]


def test_scanner_empty_reads_return_nothing() -> None:
    scanner = SSEScanner()
    assert scanner.feed(b"") == []
    assert scanner.feed(bytearray()) == []
    assert scanner.feed(memoryview(b"")) == []
    assert scanner.close() is False


def test_scanner_feed_after_close_is_a_usage_error() -> None:
    scanner = SSEScanner()
    scanner.close()
    assert scanner.close() is False
    with pytest.raises(UsageError):
        scanner.feed(b"data: x\n\n")


# --------------------------------------------------------------------------- line ends


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_scanner_line_ends_lf_crlf_and_lone_cr(eol: bytes) -> None:
    stream = b"event: a" + eol + b"data: 1" + eol + b"data: 2" + eol + eol + b": c" + eol
    assert whole(stream) == [SSEEvent("a", b"1\n2"), SSEComment(b" c")]


def test_scanner_mixed_line_ends_in_one_stream() -> None:
    stream = b"data: 1\rdata: 2\r\ndata: 3\n\r\ndata: 4\r\r"
    assert whole(stream) == [SSEEvent("message", b"1\n2\n3"), SSEEvent("message", b"4")]


def test_scanner_crlf_split_across_reads_is_one_line_end() -> None:
    items, discarded, _ = scan([b"data: x\r", b"\n", b"\r", b"\n"])
    assert items == [SSEEvent("message", b"x")]
    assert discarded is False


def test_scanner_cr_at_read_end_then_other_bytes() -> None:
    # The CR ends the line at once; the next read does not start with LF.
    scanner = SSEScanner()
    assert scanner.feed(b"data: x\r") == []
    assert scanner.feed(b"\r") == [SSEEvent("message", b"x")]
    assert scanner.feed(b"data: y\r") == []
    assert scanner.feed(b"") == []  # an empty read keeps the pending CR state
    assert scanner.feed(b"\n\n") == [SSEEvent("message", b"y")]


def test_scanner_cr_lf_split_with_empty_reads_between() -> None:
    items, _, _ = scan([b"data: x\r", b"", b"", b"\n", b"", b"\r\n"])
    assert items == [SSEEvent("message", b"x")]


def test_scanner_unicode_line_separators_are_not_line_ends() -> None:
    payload = "a\u2028b\u2029c\u0085d\x0be\x0cf\x1cg".encode()
    assert whole(b"data: " + payload + b"\n\n") == [SSEEvent("message", payload)]


# --------------------------------------------------------------------------- BOM


def test_scanner_drops_one_leading_bom() -> None:
    assert whole(BOM + b"data: first\n\n") == [SSEEvent("message", b"first")]


def test_scanner_drops_bom_split_over_reads() -> None:
    stream = BOM + b"data: first\n\n"
    for cut1 in range(4):
        for cut2 in range(cut1, 5):
            chunks = [stream[:cut1], stream[cut1:cut2], stream[cut2:]]
            assert scan(chunks)[0] == [SSEEvent("message", b"first")], chunks


def test_scanner_keeps_a_second_bom() -> None:
    # Only the first BOM is a BOM; the second makes the field name "\ufeffdata".
    assert whole(BOM + BOM + b"data: x\n\n") == []
    assert whole(BOM + b"data: x\n\n" + BOM + b"data: y\n\n") == [SSEEvent("message", b"x")]


def test_scanner_bom_prefix_that_is_not_a_bom() -> None:
    items, discarded, _ = scan([b"\xef", b"\xbbdata: x\n\n"])
    assert items == []  # field name b"\xef\xbbdata" is unknown
    assert discarded is False
    assert scan([b"\xef\xbb"])[1] is True  # a partial line was left over


# --------------------------------------------------------------------------- fields


def test_scanner_field_name_is_before_the_first_colon() -> None:
    assert whole(b"data:a:b: c\n\n") == [SSEEvent("message", b"a:b: c")]


def test_scanner_drops_only_one_space_after_colon() -> None:
    assert whole(b"data:  two\n\ndata:none\n\ndata:\ttab\n\n") == [
        SSEEvent("message", b" two"),
        SSEEvent("message", b"none"),
        SSEEvent("message", b"\ttab"),
    ]


def test_scanner_line_without_colon_is_field_with_empty_value() -> None:
    assert whole(b"data\n\n") == [SSEEvent("message", b"")]
    assert whole(b"data\ndata\n\n") == [SSEEvent("message", b"\n")]
    assert whole(b"event\ndata: x\n\n") == [SSEEvent("message", b"x")]


def test_scanner_field_names_are_case_sensitive_and_exact() -> None:
    assert whole(b"Data: x\n\ndata : y\n\n data: z\n\n") == []


def test_scanner_unknown_fields_are_ignored() -> None:
    assert whole(b"foo: bar\ndata: x\nbaz\n\n") == [SSEEvent("message", b"x")]


def test_scanner_event_type_defaults_to_message() -> None:
    assert whole(b"event:\ndata: x\n\ndata: y\n\n") == [SSEEvent("message", b"x"), SSEEvent("message", b"y")]


def test_scanner_event_type_resets_after_dispatch() -> None:
    assert whole(b"event: a\ndata: 1\n\ndata: 2\n\n") == [SSEEvent("a", b"1"), SSEEvent("message", b"2")]


def test_scanner_last_event_type_line_wins() -> None:
    assert whole(b"event: a\nevent: b\ndata: 1\n\n") == [SSEEvent("b", b"1")]


def test_scanner_event_without_data_dispatches_nothing_and_clears_type() -> None:
    # The peers' bug: dispatching `event:` blocks with no data.
    assert whole(b"event: ping\n\ndata: x\n\n") == [SSEEvent("message", b"x")]


def test_scanner_id_alone_dispatches_nothing_but_persists() -> None:
    # The peers' bug: a phantom empty event after an `id:` line.
    assert whole(b"id: 1\n\ndata: x\n\ndata: y\nid: 2\n\ndata: z\n\n") == [
        SSEEvent("message", b"x", "1"),
        SSEEvent("message", b"y", "2"),
        SSEEvent("message", b"z", "2"),
    ]


def test_scanner_empty_id_resets_last_event_id() -> None:
    assert whole(b"id: 1\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\n") == [
        SSEEvent("message", b"a", "1"),
        SSEEvent("message", b"b", ""),
        SSEEvent("message", b"c", ""),
    ]


def test_scanner_id_with_nul_is_ignored() -> None:
    assert whole(b"id: 1\n\nid: 2\x003\ndata: x\n\n") == [SSEEvent("message", b"x", "1")]


def test_scanner_retry_counts_only_all_digits() -> None:
    assert scan([b"retry: 1500\n"])[2] == 1500
    assert scan([b"retry: 1500\nretry: 15x\nretry: -1\nretry:\nretry: 1.5\nretry:  7\n"])[2] == 1500
    assert scan([b"retry: 0\n"])[2] == 0
    assert scan([b"retry: \xd9\xa1\n"])[2] is None  # ARABIC-INDIC DIGIT ONE is not ASCII


def test_scanner_retry_with_absurd_digit_count_does_not_raise() -> None:
    assert scan([b"retry: 5\nretry: " + b"9" * 10_000 + b"\n"])[2] == 5


def test_scanner_retry_is_not_part_of_an_event() -> None:
    assert whole(b"retry: 10\n\ndata: x\n\n") == [SSEEvent("message", b"x")]


def test_scanner_invalid_utf8_never_raises() -> None:
    stream = b"event: \xff\xfe\nid: \xc3\ndata: \x80\xff\n\n"
    assert whole(stream) == [SSEEvent("\ufffd\ufffd", b"\x80\xff", "\ufffd")]


def test_scanner_utf8_event_type_and_id() -> None:
    assert whole("event: 事件\nid: 編號\ndata: 你好\n\n".encode()) == [SSEEvent("事件", "你好".encode(), "編號")]


# --------------------------------------------------------------------------- comments


def test_scanner_comments_are_items_verbatim() -> None:
    assert whole(b": hopbase-keepalive\n:\n::x\n:  two\n") == [
        SSEComment(b" hopbase-keepalive"),
        SSEComment(b""),
        SSEComment(b":x"),
        SSEComment(b"  two"),
    ]


def test_scanner_comment_inside_an_event_keeps_order() -> None:
    assert whole(b"data: a\n: ping\ndata: b\n\n") == [SSEComment(b" ping"), SSEEvent("message", b"a\nb")]


# --------------------------------------------------------------------------- end of body


def test_scanner_close_discards_partial_event() -> None:
    items, discarded, _ = scan([b"data: a\n\ndata: b\n"])
    assert items == [SSEEvent("message", b"a")]
    assert discarded is True


def test_scanner_close_discards_partial_line() -> None:
    items, discarded, _ = scan([b"data: a\n\ndata: b"])
    assert items == [SSEEvent("message", b"a")]
    assert discarded is True


def test_scanner_close_discards_unterminated_comment_and_id() -> None:
    assert scan([b": ka"]) == ([], True, None)
    assert scan([b"retry: 5"]) == ([], True, None)


def test_scanner_close_clean_end() -> None:
    assert scan([b"data: a\n\n"])[1] is False
    assert scan([b"data: a\r\n\r"])[1] is False
    assert scan([b": ka\n"])[1] is False
    assert scan([b"id: 3\n"])[1] is False  # the id took effect; no event was pending
    assert scan([b"event: x\n"])[1] is True  # an event had begun


# --------------------------------------------------------------------------- memory bound


def test_scanner_line_over_bound_raises() -> None:
    with pytest.raises(SSEError, match=r"max_event_bytes=16.*saw 17 bytes"):
        scan([b"data: " + b"x" * 11 + b"\n\n"], max_event_bytes=16)


def test_scanner_line_at_bound_is_accepted() -> None:
    assert scan([b"data: " + b"x" * 10 + b"\n\n"], max_event_bytes=16)[0] == [SSEEvent("message", b"x" * 10)]


def test_scanner_pending_line_over_bound_raises_before_its_end() -> None:
    scanner = SSEScanner(max_event_bytes=100)
    scanner.feed(b"data: ")
    with pytest.raises(SSEError, match="line"):
        for _ in range(1000):
            scanner.feed(b"x" * 10)
    assert len(scanner._pending) <= 110


def test_scanner_event_data_over_bound_raises() -> None:
    stream = b"data: 12345\n" * 4 + b"\n"  # joined data: 4 * 5 + 3 = 23 bytes
    assert scan([stream], max_event_bytes=23)[0] == [SSEEvent("message", b"\n".join([b"12345"] * 4))]
    with pytest.raises(SSEError, match=r"event data.*max_event_bytes=22.*saw 23"):
        scan([stream], max_event_bytes=22)


def test_scanner_bound_raises_whatever_the_split() -> None:
    stream = b"data: ok\n\n" + b"data: " + b"x" * 50 + b"\n\n"
    for size in (1, 3, 7, len(stream)):
        with pytest.raises(SSEError):
            scan(pieces(stream, size), max_event_bytes=40)


def test_scanner_many_small_events_are_not_bounded_together() -> None:
    stream = b"data: 0123456789\n\n" * 1000
    assert len(scan([stream], max_event_bytes=16)[0]) == 1000


# --------------------------------------------------------------------------- WHATWG examples


def test_scanner_whatwg_example_messages() -> None:
    stream = (
        b"data: This is the first message.\n\n"
        b"data: This is the second message, it\n"
        b"data: has two lines.\n\n"
        b"data: This is the third message.\n\n"
    )
    assert whole(stream) == [
        SSEEvent("message", b"This is the first message."),
        SSEEvent("message", b"This is the second message, it\nhas two lines."),
        SSEEvent("message", b"This is the third message."),
    ]


def test_scanner_whatwg_example_event_types() -> None:
    stream = b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n"
    assert whole(stream) == [SSEEvent("add", b"73857293"), SSEEvent("remove", b"2153"), SSEEvent("add", b"113411")]


def test_scanner_whatwg_example_four_blocks() -> None:
    stream = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n"
    expected: list[SSEItem] = [
        SSEComment(b" test stream"),
        SSEEvent("message", b"first event", "1"),
        SSEEvent("message", b"second event", ""),
    ]
    # "the last still has to end with a blank line, the end of the stream is not enough"
    assert scan([stream]) == (expected, True, None)
    assert whole(stream + b"\n") == [*expected, SSEEvent("message", b" third event", "")]


def test_scanner_whatwg_example_empty_data() -> None:
    assert scan([b"data\n\ndata\ndata\n\ndata:"]) == (
        [SSEEvent("message", b""), SSEEvent("message", b"\n")],
        True,
        None,
    )


def test_scanner_whatwg_example_space_after_colon() -> None:
    assert whole(b"data:test\n\ndata: test\n\n") == [SSEEvent("message", b"test")] * 2


# --------------------------------------------------------------------------- splitting

MULTI = (
    BOM
    + b": hopbase-keepalive\r\n\r\n"
    + b'data: {"a":"\xe4\xbd\xa0\xe5\xa5\xbd"}\n\n'
    + b"event: response.output_text.delta\r\ndata: {\"delta\":\"x\"}\r\n\r\n"
    + b"id: 42\rdata: line1\rdata: line2\r\r"
    + b"event: ping\n\n"
    + b"retry: 3000\n"
    + b"data: last\n\n"
    + b"data: partial"
)
MULTI_ITEMS: list[SSEItem] = [
    SSEComment(b" hopbase-keepalive"),
    SSEEvent("message", '{"a":"你好"}'.encode()),
    SSEEvent("response.output_text.delta", b'{"delta":"x"}'),
    SSEEvent("message", b"line1\nline2", "42"),
    SSEEvent("message", b"last", "42"),
]


def test_scanner_multi_stream_whole() -> None:
    assert scan([MULTI]) == (MULTI_ITEMS, True, 3000)
    assert reference(MULTI) == (MULTI_ITEMS, True, 3000)


def test_scanner_every_single_split_point() -> None:
    for cut in range(len(MULTI) + 1):
        assert scan([MULTI[:cut], MULTI[cut:]]) == (MULTI_ITEMS, True, 3000), cut


def test_scanner_every_pair_of_split_points() -> None:
    n = len(MULTI)
    for a in range(0, n + 1, 3):
        for b in range(a, n + 1):
            assert scan([MULTI[:a], MULTI[a:b], MULTI[b:]]) == (MULTI_ITEMS, True, 3000), (a, b)


def test_scanner_byte_by_byte_with_empty_reads_between() -> None:
    chunks: list[bytes] = []
    for i in range(len(MULTI)):
        chunks += [MULTI[i : i + 1], b""]
    assert scan(chunks) == (MULTI_ITEMS, True, 3000)


@pytest.mark.parametrize("size", [1, 2, 5, 97, 10_000])
def test_scanner_fragment_sizes(size: int) -> None:
    assert scan(pieces(MULTI, size)) == (MULTI_ITEMS, True, 3000)


def test_scanner_items_come_out_as_soon_as_complete() -> None:
    scanner = SSEScanner()
    assert scanner.feed(b"data: a\n") == []
    assert scanner.feed(b"\ndata: b\n\nda") == [SSEEvent("message", b"a"), SSEEvent("message", b"b")]
    assert scanner.feed(b"ta: c\n\n") == [SSEEvent("message", b"c")]


# --------------------------------------------------------------------------- captured and seed streams


def load_golden(name: str) -> list[SSEItem]:
    items: list[SSEItem] = []
    for entry in json.loads((DATA_DIR / name).read_text(encoding="utf-8")):
        if "comment" in entry:
            items.append(SSEComment(entry["comment"].encode()))
        else:
            items.append(SSEEvent(entry["event"], entry["data"].encode(), entry["id"]))
    return items


@pytest.mark.parametrize("name", ["chat_completions", "responses", "anthropic_messages_crlf"])
def test_scanner_captured_streams_match_golden(name: str) -> None:
    stream = (DATA_DIR / f"{name}.sse").read_bytes()
    expected = load_golden(f"{name}.golden.json")
    for size in (1, 7, 97, len(stream)):
        assert scan(pieces(stream, size)) == (expected, False, None), size
    assert reference(stream) == (expected, False, None)


def seed_streams() -> list[tuple[str, bytes]]:
    """The example streams in tests/data/seeds/*.txt: runs of SSE blocks between prose."""
    streams: list[tuple[str, bytes]] = []
    for path in sorted(SEEDS_DIR.glob("*.txt")):
        run: list[str] = []
        lines = path.read_text(encoding="utf-8").splitlines() + ["(end)"]
        for line in lines:
            if line.startswith(("data:", "event:")) or (line == "" and run):
                run.append(line)
                continue
            while run and run[-1] == "":
                run.pop()
            if run:
                streams.append((f"{path.name}:{len(streams)}", ("\n".join(run) + "\n\n").encode()))
            run = []
    return streams


def test_scanner_seed_streams_are_found() -> None:
    # the seeds are part of the repo (tests/data/seeds): their absence is a broken checkout
    names = [name for name, _ in seed_streams()]
    assert len(names) >= 5, names


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_scanner_seed_streams_all_protocols(eol: bytes) -> None:
    kinds: set[str] = set()
    for name, stream in seed_streams():
        stream = stream.replace(b"\n", eol)
        items, discarded, _ = scan([stream])
        assert not discarded and items, name
        for size in (1, 97):
            assert scan(pieces(stream, size)) == (items, False, None), (name, size)
        assert all(isinstance(item, SSEEvent) for item in items), name
        for event in items:
            assert isinstance(event, SSEEvent)
            if event.data == b"[DONE]":
                kinds.add("chat")
                continue
            body = json.loads(event.data)
            if event.event == "message":
                assert body.get("object") == "chat.completion.chunk", name
                kinds.add("chat")
            else:
                # Responses and Anthropic: the event name equals the JSON type.
                assert body["type"] == event.event, name
                kinds.add("responses" if event.event.startswith("response.") else "anthropic")
    assert kinds == {"chat", "responses", "anthropic"}


# --------------------------------------------------------------------------- properties

_LINES = st.sampled_from(
    [
        b"",
        b"data: x",
        b"data:y",
        b"data",
        b"data:",
        b"data:  two spaces",
        "data: 你好".encode(),
        b"data: \xff\xe4\xbd",
        b"event: ping",
        b"event:",
        b"event: \xc3",
        b"id: 7",
        b"id",
        b"id: a\x00b",
        b"retry: 250",
        b"retry: 2x",
        b": hopbase-keepalive",
        b":",
        b"foo: bar",
        b"\xef\xbb\xbfdata: bom-in-the-middle",
        "data: a\u2028b\u0085c".encode(),
    ]
)
_EOLS = st.sampled_from([b"\n", b"\r\n", b"\r"])
_FREE = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = [draw(st.sampled_from([b"", BOM, b"\xef\xbb"]))]
    for _ in range(draw(st.integers(0, 25))):
        line = draw(st.one_of(_LINES, _LINES, _LINES, _FREE, _FREE.map(lambda b: b"data: " + b)))
        parts.append(line + draw(_EOLS))
    parts.append(draw(st.sampled_from([b"", b"data: tail", b"\r", b"\n"])))
    return b"".join(parts)


def split_at(stream: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(stream)) for c in cuts})
    chunks: list[bytes] = []
    start = 0
    for point in points:
        chunks.append(stream[start:point])
        start = point
    chunks.append(stream[start:])
    return chunks


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=sse_streams(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_scanner_any_split_equals_one_read_and_the_reference(stream: bytes, cuts: list[int]) -> None:
    one_read = scan([stream])
    assert one_read == reference(stream)
    assert scan(split_at(stream, cuts)) == one_read


@settings(max_examples=60, deadline=None)
@given(stream=sse_streams())
def test_scanner_byte_by_byte_equals_one_read(stream: bytes) -> None:
    assert scan(pieces(stream, 1)) == scan([stream])


@settings(max_examples=200, deadline=None)
@given(stream=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=6))
def test_scanner_arbitrary_bytes_never_raise(stream: bytes, cuts: list[int]) -> None:
    assert scan(split_at(stream, cuts)) == reference(stream)


def test_scanner_fast_paths_keep_id_and_default_type() -> None:
    # The one-line and two-line fast paths must honour the same state as the slow path.
    stream = b"id: 5\n\nevent: a\ndata: b\n\nevent: \ndata: c\n\ndata: d\n\nevent: e\ndata: f\ndata: g\n\n"
    expected = [
        SSEEvent("a", b"b", "5"),
        SSEEvent("message", b"c", "5"),
        SSEEvent("message", b"d", "5"),
        SSEEvent("e", b"f\ng", "5"),
    ]
    assert whole(stream) == expected
    assert scan(pieces(stream, 1))[0] == expected


def test_scanner_fast_path_event_line_bound() -> None:
    with pytest.raises(SSEError):
        scan([b"event: a\ndata: " + b"x" * 40 + b"\n\n"], max_event_bytes=40)


# --------------------------------------------------------------------------- fast paths
# The scanner cuts whole "event: X\ndata: Y" and "data: Y" blocks out of a read
# with one split and holds a lone trailing "event: X" line back unprocessed.
# These tests aim at the edges of those shortcuts: every split point inside the
# patterns, look-alikes that must take the general path, and the bounds.

FAST = (
    b"event: content_block_delta\ndata: {\"a\":1}\n\n"
    + b"data: {\"b\":2}\n\n"
    + b"event: \ndata: empty-type\n\n"
    + b"event: a:b\ndata: colon in type\n\n"
    + b"event:  two\ndata: one space dropped\n\n"
    + b"event: \xff\xe4\ndata: bad utf-8 type\n\n"
    + b"event: x\ndata: \n\n"
    + b"event: x\ndata:\n\n"
    + b"event: x\ndata:no-space\n\n"
    + b"event: x\nid: 9\ndata: id inside\n\n"
    + b"id: 10\nevent: x\ndata: id first\n\n"
    + b"event: x\nevent: y\ndata: last type wins\n\n"
    + b"event: x\ndata: a\ndata: b\n\n"
    + b"event: data: x\ndata: type holds the pattern\n\n"
    + b"data: a data: b\n\n"
    + b"xdata: ignored field\n\n"
    + b"event: x data: y\n\n"
    + b": c\nevent: x\ndata: comment first\n\n"
    + b"event: x\n: c\ndata: comment inside\n\n"
    + b"event: x\nretry: 7\ndata: retry inside\n\n"
    + b"event: x\ndata: three LFs\n\n\n"
    + b"event: x\ndata: four LFs\n\n\n\n"
    + b"event: only-type\n\n"
    + b"event: x\ndata: \xe4\xbd\xa0\n\n"
)
FAST_ITEMS: list[SSEItem] = [
    SSEEvent("content_block_delta", b'{"a":1}'),
    SSEEvent("message", b'{"b":2}'),
    SSEEvent("message", b"empty-type"),
    SSEEvent("a:b", b"colon in type"),
    SSEEvent(" two", b"one space dropped"),
    SSEEvent("\ufffd\ufffd", b"bad utf-8 type"),
    SSEEvent("x", b""),
    SSEEvent("x", b""),
    SSEEvent("x", b"no-space"),
    SSEEvent("x", b"id inside", "9"),
    SSEEvent("x", b"id first", "10"),
    SSEEvent("y", b"last type wins", "10"),
    SSEEvent("x", b"a\nb", "10"),
    SSEEvent("data: x", b"type holds the pattern", "10"),
    SSEEvent("message", b"a data: b", "10"),
    SSEComment(b" c"),
    SSEEvent("x", b"comment first", "10"),
    SSEComment(b" c"),
    SSEEvent("x", b"comment inside", "10"),
    SSEEvent("x", b"retry inside", "10"),
    SSEEvent("x", b"three LFs", "10"),
    SSEEvent("x", b"four LFs", "10"),
    SSEEvent("x", "你".encode(), "10"),
]


def test_scanner_fast_path_look_alikes_follow_the_spec() -> None:
    assert reference(FAST) == (FAST_ITEMS, False, 7)
    assert scan([FAST]) == (FAST_ITEMS, False, 7)


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_scanner_fast_path_look_alikes_at_every_split_point(eol: bytes) -> None:
    stream = FAST.replace(b"\n", eol)
    assert reference(stream) == (FAST_ITEMS, False, 7)
    for cut in range(len(stream) + 1):
        assert scan([stream[:cut], stream[cut:]]) == (FAST_ITEMS, False, 7), cut


def test_scanner_fast_path_look_alikes_in_small_reads_with_a_bom() -> None:
    for size in (1, 2, 3, 5, 8, 13, 64):
        assert scan(pieces(BOM + FAST, size)) == (FAST_ITEMS, False, 7), size


def test_scanner_items_per_read_for_every_pair_of_split_points_in_an_event() -> None:
    # Each read must return exactly what it completes: nothing early, nothing late.
    stream = b"event: ping\ndata: {}\n\nevent: ab\ndata: xy\n\n"
    first, second = SSEEvent("ping", b"{}"), SSEEvent("ab", b"xy")
    end_first = stream.index(b"\n\n") + 2
    end_second = len(stream)
    for a in range(len(stream) + 1):
        for b in range(a, len(stream) + 1):
            scanner = SSEScanner()
            got = [scanner.feed(stream[:a]), scanner.feed(stream[a:b]), scanner.feed(stream[b:])]
            ends = [a, b, len(stream)]
            want = [[e for e, end in ((first, end_first), (second, end_second)) if lo < end <= hi] for lo, hi in zip([-1, *ends], ends)]
            assert got == want, (a, b)
            assert scanner.close() is False


def test_scanner_held_event_line_counts_as_discarded_at_close() -> None:
    scanner = SSEScanner()
    assert scanner.feed(b"data: a\n\nevent: x\n") == [SSEEvent("message", b"a")]
    assert scanner.close() is True
    scanner = SSEScanner()
    assert scanner.feed(b"event: x\n") == []
    assert scanner.feed(b"\n") == []  # the type is cleared, nothing dispatched
    assert scanner.close() is False


def test_scanner_held_event_line_then_other_fields() -> None:
    # A held "event:" line must take effect before whatever follows it.
    stream = b"event: x\nid: 4\nretry: 9\n: c\ndata: d\n\n"
    for cut in range(len(stream) + 1):
        scanner = SSEScanner()
        items = scanner.feed(stream[:cut]) + scanner.feed(stream[cut:])
        assert items == [SSEComment(b" c"), SSEEvent("x", b"d", "4")], cut
        assert scanner.retry_ms == 9


def test_scanner_held_event_line_with_cr_split_from_its_lf() -> None:
    assert scan([b"event: x\r", b"\ndata: y\r\n\r\n"]) == ([SSEEvent("x", b"y")], False, None)
    assert scan([b"event: x\r", b"", b"\n", b"data: y\r", b"\r"]) == ([SSEEvent("x", b"y")], False, None)


def test_scanner_held_event_line_does_not_count_against_the_line_bound() -> None:
    # max 20: "event: " + 13 = 20 bytes may be held, and the next line may be 20 bytes too.
    event_line = b"event: " + b"e" * 13 + b"\n"
    data_line = b"data: " + b"d" * 14
    scanner = SSEScanner(max_event_bytes=20)
    assert scanner.feed(event_line) == []
    assert scanner.feed(data_line) == []
    assert scanner.feed(b"\n\n") == [SSEEvent("e" * 13, b"d" * 14)]
    scanner = SSEScanner(max_event_bytes=20)
    scanner.feed(event_line + data_line)
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scanner.feed(b"d")


def test_scanner_event_line_over_the_bound_is_never_held() -> None:
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scan([b"event: " + b"e" * 14 + b"\n"], max_event_bytes=20)
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scan([b"data: a\n\nevent: " + b"e" * 14 + b"\ndata: b"], max_event_bytes=20)


def test_scanner_fast_path_bound_per_block_in_a_read_larger_than_the_bound() -> None:
    ok = b"event: e\ndata: " + b"d" * 14 + b"\n\n"  # lines of 8 and 20 bytes
    assert len(scan([ok * 50], max_event_bytes=20)[0]) == 50
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scan([ok * 5 + b"event: e\ndata: " + b"d" * 15 + b"\n\n" + ok], max_event_bytes=20)
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scan([ok * 5 + b"data: " + b"d" * 15 + b"\n\n" + ok], max_event_bytes=20)


def test_scanner_event_name_cache_is_bounded_and_exact() -> None:
    names = [f"ev{i}" for i in range(sse._EVENT_NAMES_MAX + 50)]
    stream = b"".join(f"event: {name}\ndata: {i}\n\n".encode() for i, name in enumerate(names))
    items = whole(stream)
    assert items == [SSEEvent(name, str(i).encode()) for i, name in enumerate(names)]
    assert len(sse._EVENT_NAMES) <= sse._EVENT_NAMES_MAX
    assert all(key.startswith(b"event: ") and b"\n" not in key for key in sse._EVENT_NAMES)


def test_scanner_dirty_state_across_reads_then_fast_blocks() -> None:
    # An event left unfinished by one read is finished line by line, then the
    # rest of the read goes back to the block path.
    scanner = SSEScanner()
    assert scanner.feed(b"event: a\ndata: 1\n") == []
    assert scanner.feed(b"data: 2\n\nevent: b\ndata: 3\n\ndata: 4\n\n") == [
        SSEEvent("a", b"1\n2"),
        SSEEvent("b", b"3"),
        SSEEvent("message", b"4"),
    ]
    assert scanner.feed(b"data: 5\n") == []
    assert scanner.feed(b"\n\n\ndata: 6\n\n") == [SSEEvent("message", b"5"), SSEEvent("message", b"6")]
    assert scanner.close() is False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=sse_streams(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_scanner_each_read_returns_what_the_reference_completes(stream: bytes, cuts: list[int]) -> None:
    # Stronger than comparing totals: after every read, the items so far and
    # retry_ms equal the reference's for that prefix of the body.
    scanner = SSEScanner()
    items: list[SSEItem] = []
    prefix = b""
    for chunk in split_at(stream, cuts):
        items += scanner.feed(chunk)
        prefix += chunk
        ref_items, _, ref_retry = reference(prefix)
        assert items == ref_items
        assert scanner.retry_ms == ref_retry


_FAST_LINES = st.sampled_from(
    [b"", b"", b"event: x", b"event: ", b"event:", b"data: y", b"data: ", b"data:", b"id: 1", b": c", b"retry: 5", b"event: data: z", b"data: a data: b"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.tuples(_FAST_LINES, _EOLS), max_size=30),
    cuts=st.lists(st.integers(0, 300), max_size=10),
    bound=st.integers(1, 40),
)
def test_scanner_fast_path_shapes_equal_the_reference(lines: list[tuple[bytes, bytes]], cuts: list[int], bound: int) -> None:
    stream = b"".join(line + eol for line, eol in lines)
    try:
        expected: tuple[list[SSEItem], bool, int | None] | None = scan([stream], max_event_bytes=bound)
    except SSEError:
        expected = None
    if expected is not None:
        assert scan(split_at(stream, cuts), max_event_bytes=bound) == expected
        if bound == 40:
            assert expected == reference(stream)
    else:
        with pytest.raises(SSEError):
            scan(split_at(stream, cuts), max_event_bytes=bound)


def test_scanner_event_line_over_the_bound_in_a_group_raises() -> None:
    # The read is longer than the bound, so each line of a group is checked.
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scan([b"event: " + b"e" * 14 + b"\ndata: x\n\n"], max_event_bytes=20)
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scan([b"data: " + b"d" * 15 + b"\n\n"], max_event_bytes=20)


def test_scanner_released_held_line_no_longer_widens_the_bound() -> None:
    scanner = SSEScanner(max_event_bytes=20)
    assert scanner.feed(b"event: e\n") == []
    assert scanner.feed(b"data: x\n\n") == [SSEEvent("e", b"x")]
    assert scanner.feed(b"d" * 20) == []
    with pytest.raises(SSEError, match="saw 21 bytes"):
        scanner.feed(b"d")
