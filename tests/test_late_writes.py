"""The emulator's late writes (ground truth ``late_writes``, ``first_write_end_ns``,
``final_write_end_ns``) and what gateway overhead does with them (issue 36: a busy machine
descheduled the upstream emulator between an event's stamp and its write, and event_delay's p99
read 3.4 ms above the packet capture's with no bound saying so).

The emulator's clock is ``hopbench.emulator._app.now_ns``; here it is a counter the test moves
(a send() that "took" 300 us, as a process descheduled inside it would), so nothing is timed."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from hopbench.driver._overhead import analyse, client_from_line, upstream_from_record
from hopbench.emulator import EmulatorConfig
from hopbench.emulator import _app
from hopbench.emulator._app import LATE_WRITE_NS, EmulatorApp
from hopbench.emulator._record import GroundTruth

US = 1_000
MS = 1_000_000
BOOT = "boot-1"


class _Records:
    def __init__(self) -> None:
        self.lines: list[GroundTruth] = []

    def write(self, record: GroundTruth) -> None:
        self.lines.append(record)


class _Clock:
    """``now_ns`` for the emulator: 1 us a call; a send() of a body chunk adds ``send_ns[k]``."""

    def __init__(self, send_ns: list[int]) -> None:
        self.t = 10 * MS
        self.send_ns = send_ns
        self.sends = 0

    def __call__(self) -> int:
        self.t += US
        return self.t


async def _stream(app: EmulatorApp, clock: _Clock) -> list[bytes]:
    sent: list[bytes] = []
    done = trio.Event()
    request = [{"type": "http.request", "more_body": False, "body": json.dumps(
        {"model": "m", "stream": True, "max_tokens": 6, "messages": [{"role": "user", "content": "hi"}]}).encode()}]

    async def receive() -> dict[str, Any]:
        if request:
            return request.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            k = clock.sends
            clock.sends += 1
            clock.t += clock.send_ns[k] if k < len(clock.send_ns) else 0
            sent.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST",
             "headers": [(b"x-hopbench-request-id", b"0-1")]}
    await app(scope, receive, send)
    return sent


def _run(monkeypatch: pytest.MonkeyPatch, send_ns: list[int]) -> GroundTruth:
    clock = _Clock(send_ns)
    monkeypatch.setattr(_app, "now_ns", clock)
    records = _Records()
    # unpaced: every event is due at once and the stream goes out in one body write (then the end)
    app = EmulatorApp(EmulatorConfig.from_mapping({"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 6}),
                      writer=records)  # type: ignore[arg-type]
    trio.run(_stream, app, clock)
    (rec,) = records.lines
    return rec


def test_a_slow_send_is_recorded_with_its_own_stamps(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _run(monkeypatch, [300 * US])
    assert rec.content_events == 6 and rec.first_write_ns is not None and rec.first_write_end_ns is not None
    # the one body write took the 300 us the send "took" (and the clock's own call)
    assert rec.first_write_end_ns - rec.first_write_ns == 300 * US + US
    ((i, j, start, end),) = rec.late_writes
    assert (i, j) == (0, 6) and (start, end) == (rec.first_write_ns, rec.first_write_end_ns)
    # each event was stamped when queued, before the write began
    assert rec.ttft_ns is not None and rec.ttft_ns < start
    # one write carried the whole body: it is the first and the final one
    assert (rec.final_write_ns, rec.final_write_end_ns) == (rec.first_write_ns, rec.first_write_end_ns)


def test_a_prompt_send_records_no_late_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Written within LATE_WRITE_NS of the stamps: nothing listed (the record stays small)."""
    rec = _run(monkeypatch, [LATE_WRITE_NS // 4])
    assert rec.late_writes == []
    assert rec.first_write_end_ns is not None and rec.first_write_ns is not None
    assert rec.first_write_end_ns - rec.first_write_ns == LATE_WRITE_NS // 4 + US


def _record(late: list[list[int]]) -> dict[str, Any]:
    return {"request_id": "0-1", "boot_id": BOOT, "t0_mono_ns": 1_000 * MS, "ttft_ns": 50 * MS,
            "gaps_ns": [10 * MS, 10 * MS], "first_write_ns": 1 * MS, "first_write_end_ns": 3 * MS,
            "final_write_ns": 75 * MS, "final_write_end_ns": 76 * MS, "duration_ns": 76 * MS, "status": 200,
            "end": "completed", "event_chars": [1, 1, 1], "late_writes": late}


#: the client's stream of ``_record``: its three content events read at 52, 71 and 72 ms
_LINE = {"id": "0-1", "scenario": "chat", "outcome": "completed", "sent_ns": 0, "start_ns": 0,
         "request_sent_ns": 0, "end_ns": 80 * MS, "body_end_ns": 80 * MS, "first_read_ns": 5 * MS,
         "content_read_ns": [52 * MS, 71 * MS, 72 * MS], "content_chars": [1, 1, 1]}


def test_upstream_takes_a_late_write_from_its_send_and_bounds_it() -> None:
    t0 = 1_000 * MS
    # event 1 (due at 60 ms) went out in a send() from 64 to 70 ms: descheduled in between
    u = upstream_from_record(_record([[1, 2, 64 * MS, 70 * MS]]))
    assert u is not None
    assert list(u.event_write_ns) == [t0 + 50 * MS, t0 + 64 * MS, t0 + 70 * MS]
    assert u.event_write_bound_ns == {t0 + 64 * MS: 6 * MS}
    assert (u.first_write_bound_ns, u.end_bound_ns) == (2 * MS, 1 * MS)
    # an older emulator (no such fields) and malformed entries: stamps as they were, no bound
    old = upstream_from_record({k: v for k, v in _record([]).items() if "end_ns" not in k and k != "late_writes"})
    assert old is not None and old.event_write_bound_ns == {} and old.first_write_bound_ns == 0
    odd = upstream_from_record(_record([[1, 2, 64 * MS], "x", [5, 9, 1, 2]]))  # type: ignore[list-item]
    assert odd is not None and list(odd.event_write_ns) == [t0 + 50 * MS, t0 + 60 * MS, t0 + 70 * MS]


def test_overhead_figures_carry_the_upstream_write_bounds() -> None:
    """event_delay of the late event starts at its send()'s start (64 ms, not the 60 ms it was due)
    with the send's 6 ms below; first_event_delay and added_e2e carry the first and final sends'."""
    t0 = 1_000 * MS
    u = upstream_from_record(_record([[1, 2, 64 * MS, 70 * MS]]))
    c = client_from_line(_LINE, t0)
    assert u is not None and c is not None
    o = analyse([c], [u], boot_id=BOOT)
    assert o.values[("chat", "event_delay")] == [2 * MS, 7 * MS, 2 * MS]
    assert o.bounds[("chat", "event_delay")] == [(7 * MS, 6 * MS, 0)]
    assert o.bounds[("chat", "first_event_delay")] == [(4 * MS, 2 * MS, 0)]
    assert o.bounds[("chat", "added_e2e")] == [(o.values[("chat", "added_e2e")][0], 1 * MS, 0)]


def test_the_block_counts_late_written_events_and_the_warning_names_both_ends() -> None:
    """gateway_overhead.events.written_late counts the events timed from a late write, and an
    uncertain event_delay names the upstream's lateness beside the client's (request_delay keeps
    its own cause; a client figure names the client only)."""
    from hopbench.measure._error_bound import error_bound_warnings

    t0 = 1_000 * MS
    u = upstream_from_record(_record([[1, 3, 64 * MS, 70 * MS]]))
    c = client_from_line(_LINE, t0)
    assert u is not None and c is not None
    assert analyse([c], [u], boot_id=BOOT).block["events"]["written_late"] == 2
    wide = {"p50": 10.0, "p99": 20.0, "error_bound_ms": {"p50": 0.0, "p99": 6.0}}
    got = error_bound_warnings({"event_delay": wide, "ttft": wide, "request_delay": wide})
    assert len(got) == 3
    assert "(the client read late or the upstream emulator wrote late: see client_read_lag and " \
           "gateway_overhead.events.written_late)" in got[0]
    assert "(the client read late: see client_read_lag)" in got[1]
    assert "the client's write of the request took long, or the upstream's receive was its app's stamp" in got[2]
