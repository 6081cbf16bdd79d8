"""Replaying real published traces (docs/workloads.md, "Trace replay"): a slice of
Azure's public conversation trace replayed on the embedded emulator, rows with 0
tokens (an arrival all the same, sent with 1 token, and counted), and requests of one
timestamp kept in file order: scheduled, written (the fake transport's write point,
the dispatcher's thread handing a due time back) and received (a raw server's kernel
receive stamps, which say when each request reached its socket, whatever order the
server then read them in)."""

from __future__ import annotations

import datetime
import json
import selectors
import shutil
import socket
import struct
import threading
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from hopbench import ProfileError
from hopbench.engine import _open_loop, _runner
from hopbench.engine._open_loop import Tuning
from hopbench.config._profile import load_profile
from hopbench.measure._recorder import Recorder
from hopbench.workload._trace import replay_plan
from hopbench.workload._trace_file import read_trace
from hopbench.emulator._rx_stamp import ANC_SIZE as _ANC_SIZE, SCM_TIMESTAMPNS as _SCM_TIMESTAMPNS, SO_TIMESTAMPNS as _SO_TIMESTAMPNS, keep_kernel_stamps
from hopbench._run_command import validate_command

from _fake_transport import CHUNK, LAST, Plan, fake_transport

DATA = Path(__file__).resolve().parent / "data" / "workloads"
#: the first 200 rows of AzureLLMInferenceTrace_conv.csv (tests/data/workloads/README.md)
AZURE_CONV = DATA / "azure_llm_conv_2023_first200.csv"
MS = 1_000_000


def _profile(tmp_path: Path, trace: str, *, load: str = "", run: str = "", target: str = "http://127.0.0.1:9",
             emulator: str = "") -> Path:
    prof = tmp_path / "p.toml"
    prof.write_text(f'[run]\nname = "real"\n{run}\n[load]\nmode = "trace"\ntrace = "{trace}"\n{load}\n'
                    f'[target]\nurl = "{target}"\n{emulator}\n'
                    '[[scenario]]\nname = "a"\nprotocol = "chat"\nmodel = "m"\nextra = { ignore_eos = true }\n',
                    encoding="utf-8")
    return prof


def _azure_rows(path: Path) -> list[tuple[int, int, int, int]]:
    """(UTC ns since the epoch, ContextTokens, GeneratedTokens, line) of each row, read here
    with the standard library alone (not by the code under test)."""
    rows = []
    for line, text in enumerate(path.read_text(encoding="utf-8").splitlines()[1:], start=2):
        stamp, inp, out = text.split(",")
        whole, _, frac = stamp.partition(".")
        dt = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
        rows.append((int(dt.timestamp()) * 10**9 + int(frac.ljust(9, "0")), int(inp), int(out), line))
    return rows


@pytest.mark.slow
def test_trace_real_azure_slice_replays_on_the_emulator(tmp_path: Path) -> None:
    """200 rows of Azure's public conversation trace (61 s of trace time) at speedup 40:
    every row is one arrival, at its offset, with its own input and output lengths."""
    from hopbench.driver._single import run_profile

    rows = _azure_rows(AZURE_CONV)
    assert len(rows) == 200
    shutil.copy(AZURE_CONV, tmp_path / "azure.csv")
    speedup = 40.0
    # bounded: 200 requests, and a minute at most (the replay takes ~1.5 s); ignore_eos: the
    # emulator sends exactly max_tokens, and no text of its own beyond that
    prof = _profile(tmp_path, "azure.csv", load=f"speedup = {speedup}\nmax_in_flight = 1000",
                    run="requests = 200\nduration_s = 60\nseed = 7", target="embedded",
                    emulator="[emulator]\nttft_ms = 1\ntokens_per_s = 0\noutput_tokens = 1")
    outcome = run_profile(load_profile(prof), out_dir=tmp_path / "run")
    s = outcome.summary
    assert outcome.complete and s["scopes"]["all"]["counters"]["completed"] == 200, s["scopes"]["all"]["counters"]
    assert s["load"]["trace"]["entries"] == 200 and s["load"]["trace"]["scheduled"] == 200
    streams = [json.loads(x) for x in (tmp_path / "run" / "streams.jsonl").read_text(encoding="utf-8").splitlines()]
    truth = {r["request_id"]: r for r in map(json.loads, (tmp_path / "run" / "ground_truth.jsonl")
                                              .read_text(encoding="utf-8").splitlines())}
    assert len(streams) == 200 and len(truth) == 200
    by_line = {x["trace_line"]: x for x in streams}
    assert sorted(by_line) == [r[3] for r in rows]  # one arrival per row, each row once
    first_ns = rows[0][0]
    for ns, inp, out, line in rows:
        x = by_line[line]
        gt = truth[x["id"]]
        assert x["outcome"] == "completed" and x["trace_pass"] == 0
        # the lengths the row gives: sent (prompt words, max_tokens) and as the emulator counted them
        assert (x["requested_input_tokens"], x["requested_max_tokens"]) == (inp, out), (line, x)
        assert (gt["input_tokens"], gt["output_tokens_sent"]) == (inp, out), (line, gt)
        assert x["output_tokens"] == out
        # the schedule: the row's time after the first row's, divided by the speedup (to 1 ns of
        # rounding), and never sent before it
        assert abs(x["start_ns"] - round((ns - first_ns) / speedup)) <= 1, (line, x["start_ns"])
        assert x["sent_ns"] >= x["start_ns"]


def _zero_traces(tmp_path: Path) -> tuple[Path, Path]:
    """One trace of each format with the same rows: two of them with a length of 0."""
    (tmp_path / "z.jsonl").write_text(
        '{"timestamp_ms": 0, "input_tokens": 12, "output_tokens": 3}\n'
        '{"timestamp_ms": 100, "input_tokens": 9, "output_tokens": 0}\n'  # refused before it generated
        '{"timestamp": 200, "input_length": 0, "output_length": 0}\n'  # Mooncake's names, both at 0
        '{"timestamp_ms": 300, "input_tokens": 5, "output_tokens": 2}\n', encoding="utf-8")
    (tmp_path / "z.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.0000000,12,3\n"
        "2023-11-16 18:15:46.1000000,9,0\n"
        "2023-11-16 18:15:46.2000000,0,0\n"
        "2023-11-16 18:15:46.3000000,5,2\n", encoding="utf-8")
    return tmp_path / "z.jsonl", tmp_path / "z.csv"


def test_trace_zero_token_rows_are_arrivals_with_one_token_and_counted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A row with 0 input or output tokens stopped the whole load ("expected an integer
    >= 1"): it is an arrival all the same, replayed with 1 token, and said (the plan line
    before the load, ``hopbench validate``), alike for JSON lines and Azure's CSV."""
    for path, first in zip(_zero_traces(tmp_path), (2, 3)):
        entries = read_trace(path)
        assert [(e.input_tokens, e.output_tokens, e.line) for e in entries] == [
            (12, 3, first - 1), (9, 1, first), (1, 1, first + 1), (5, 2, first + 2)]
        assert entries.zero_rows() == (2, 1, 2, first)
        assert entries[2:].zero_rows() == (1, 1, 1, first + 1) and entries[3:].zero_rows() == (0, 0, 0, None)
        prof = _profile(tmp_path, path.name)
        spec = load_profile(prof).load.trace
        note = (f"2 rows of {path.name} have 0 tokens (1 with 0 input tokens, 2 with 0 output tokens; "
                f"first at line {first}): each is replayed as an arrival with 1 token instead (an empty "
                "prompt cannot be sent; max_tokens is at least 1)")
        assert spec.zero_note == note
        assert replay_plan(spec, None, None)[0].endswith(f"; {note}")
        assert validate_command([prof]) == 0
        out, err = capsys.readouterr()
        assert out == f"{prof}: ok\n" and err == f"hopbench: trace: {note}\n"
        # the window counts only its own rows
        later = load_profile(_profile(tmp_path, path.name, load="start_ms = 250")).load.trace
        assert later.zero_note is None and "0 tokens" not in replay_plan(later, None, None)[0]
        assert validate_command([prof]) == 0 and capsys.readouterr().err == ""


@pytest.mark.parametrize(("content", "message"), [
    ('{"timestamp_ms": 0, "input_tokens": -1, "output_tokens": 1}\n',
     '"input_tokens": expected an integer >= 0, got -1'),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 0.0}\n',
     '"output_tokens": expected an integer >= 0, got 0.0'),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": "0"}\n',
     '"output_tokens": expected an integer >= 0, got "0"'),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 2000001}\n', '"output_tokens": expected at most'),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-0,4\n",
     "ContextTokens: expected an integer >= 0, got '-0'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,0.0\n",
     "GeneratedTokens: expected an integer >= 0, got '0.0'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,2000001,0\n", "ContextTokens: expected at most"),
])
def test_trace_zero_rule_still_refuses_negative_fractional_and_huge_lengths(tmp_path: Path, content: str,
                                                                           message: str) -> None:
    path = tmp_path / ("t.csv" if content.startswith("TIMESTAMP") else "t.jsonl")
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        read_trace(path)
    line = 2 if content.startswith("TIMESTAMP") else 1
    assert str(err.value).startswith(f"{path}:{line}: ") and message in str(err.value), str(err.value)


@pytest.mark.slow
async def test_trace_zero_token_rows_are_sent_with_one_token(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    """The rows read as 1 are sent: a one-word prompt, ``max_tokens`` 1, at their own times."""
    jsonl, _ = _zero_traces(tmp_path)
    profile = load_profile(_profile(tmp_path, jsonl.name))
    seen: list[tuple[str, bytes, httpx.Headers]] = []
    transport = fake_transport(Plan(gaps_s=(0.01,), last_s=0.01), seen)
    lines: list[dict[str, Any]] = []
    await _runner.LoadRunner(profile, "http://127.0.0.1:9", Recorder(["a"]), Recorder(["a"]),
                             on_stream=lines.append, transport_factory=transport).run()
    got = sorted((x["trace_line"], x["start_ns"], x["requested_input_tokens"], x["requested_max_tokens"])
                 for x in lines)
    assert got == [(1, 0, 12, 3), (2, 100 * MS, 9, 1), (3, 200 * MS, 1, 1), (4, 300 * MS, 5, 2)]
    bodies = {h["x-hopbench-request-id"]: json.loads(body) for _, body, h in seen}
    line_of = {x["id"]: x["trace_line"] for x in lines}
    zero = next(b for i, b in bodies.items() if line_of[i] == 3)
    assert zero["max_tokens"] == 1 and len(zero["messages"][-1]["content"].split()) == 1


def _same_time_trace(tmp_path: Path, groups: int = 5, per: int = 4) -> Path:
    """``groups`` timestamps 10 ms apart, ``per`` lines at each (Azure stamps to 100 ns,
    Mooncake to 1 ms: real traces repeat timestamps)."""
    path = tmp_path / "same.jsonl"
    path.write_text("".join(json.dumps({"timestamp_ms": 10 * g, "input_tokens": 8, "output_tokens": 2}) + "\n"
                            for g in range(groups) for _ in range(per)), encoding="utf-8")
    return path


def test_trace_equal_timestamps_are_scheduled_in_file_order(tmp_path: Path) -> None:
    """The schedule the runner follows (``TraceSpec.arrivals``) gives the entries of one
    timestamp in file order: with a speedup, a window, a loop, and in each worker's part."""
    _same_time_trace(tmp_path)
    for load, passes in [("", 1), ("speedup = 3", 1), ("start_ms = 10\nend_ms = 40", 1),
                         ("loop = true\nspeedup = 0.5", 3), ("loop = true\nstart_ms = 20\nend_ms = 30", 3)]:
        spec = load_profile(_profile(tmp_path, "same.jsonl", load=load, run="requests = 100")).load.trace
        for part, parts in [(0, 1), (0, 2), (1, 2), (2, 3)]:
            got = []
            for offset_ns, i, rep in spec.arrivals(part, parts):
                if rep == passes:
                    break
                got.append((offset_ns, rep, spec.entries.line(i)))
            # time order first, then the pass, then the line: the file's order within a time
            assert got == sorted(got) and len({g[2] for g in got}) == len(got) // passes, (load, part, got)
            assert all((g[2] - spec.entries.line(0)) % parts == part for g in got)  # (the window has no gaps)


def _writes_in_order(plan: Plan, written: list[str]) -> type[httpx.AsyncBaseTransport]:
    """The fake transport, keeping each request's id as its write begins: when the
    runner's ``send_request_headers.started`` trace returns (a real transport writes
    right after it, with no checkpoint between), not when the transport is called."""
    base = fake_transport(plan)

    class Recording(base):  # type: ignore[valid-type,misc]
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            trace = request.extensions["trace"]

            async def recorded(name: str, info: dict[str, Any]) -> None:
                await trace(name, info)
                if name.endswith("send_request_headers.started"):
                    written.append(request.headers["x-hopbench-request-id"])

            request.extensions["trace"] = recorded
            response: httpx.Response = await super().handle_async_request(request)
            return response

    return Recording


@pytest.mark.slow
@pytest.mark.parametrize("connect_s", [0.0, 0.005])
async def test_trace_equal_timestamps_are_sent_in_file_order(
        autojump_clock: trio.testing.MockClock, tmp_path: Path,
        connect_s: float) -> None:
    """Requests of one timestamp leave in the trace's order, though each is its own
    trio task (run in either order in a batch) and may have to connect first: the
    order their writes begin in is the file's (under a fake clock the loop writes
    every request itself: no dispatcher thread)."""
    _same_time_trace(tmp_path)
    profile = load_profile(_profile(tmp_path, "same.jsonl"))
    written: list[str] = []
    transport = _writes_in_order(Plan(connect_s=connect_s, gaps_s=(0.01,), last_s=0.01), written)
    lines: list[dict[str, Any]] = []
    await _runner.LoadRunner(profile, "http://127.0.0.1:9", Recorder(["a"]), Recorder(["a"]),
                             on_stream=lines.append, transport_factory=transport).run()
    line_of = {x["id"]: x["trace_line"] for x in lines}
    order = [line_of[i] for i in written]
    assert len(order) == 20 and order == sorted(order), order


class _StampedServer:
    """A raw HTTP/1.1 server on 127.0.0.1, in a thread of its own (not on the runner's
    loop): it answers every request with a short chat stream and keeps, for each, its
    ``x-hopbench-request-id`` and the kernel's receive stamp of its first byte
    (SO_TIMESTAMPNS, CLOCK_REALTIME ns): the order the requests reached their sockets,
    whatever order the server then reads them in (the embedded emulator's own stamps
    are taken when its loop gets to a request: on connections it accepts late, in the
    order it accepts them). ``close = True``: each connection is closed after one
    response, so the client never has an idle one."""

    def __init__(self, close: bool = False) -> None:
        self.close_after = close
        self.got: list[tuple[int, str]] = []  # (receive stamp ns, request id), as read
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)  # (inherited when accepted)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(512)
        self._sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _StampedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join()
        self._sock.close()

    def order(self) -> list[str]:
        """The request ids by their first byte's arrival."""
        return [i for _, i in sorted(self.got)]

    def _run(self) -> None:
        body = CHUNK + LAST
        head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\n%s\r\n" % (len(body), b"connection: close\r\n" if self.close_after else b""))
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ)
        state: dict[socket.socket, list[Any]] = {}  # connection -> [bytes read, first byte's stamp]
        while not self._stop:
            for key, _ in sel.select(0.05):
                if key.fileobj is self._sock:
                    while True:
                        try:
                            conn, _ = self._sock.accept()
                        except BlockingIOError:
                            break
                        conn.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                        conn.setblocking(False)
                        state[conn] = [b"", 0]
                        sel.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj  # type: ignore[assignment]
                st = state[conn]
                try:  # a request's first byte alone: its segment's stamp is the request's arrival
                    data, anc, _, _ = conn.recvmsg(1 if not st[0] else 1 << 20, _ANC_SIZE)
                except BlockingIOError:
                    continue
                except OSError:
                    data, anc = b"", []
                if not data:
                    sel.unregister(conn)
                    del state[conn]
                    conn.close()
                    continue
                if not st[0]:
                    st[1] = next((sec * 10**9 + nsec for level, kind, raw in anc
                                  if level == socket.SOL_SOCKET and kind == _SCM_TIMESTAMPNS
                                  for sec, nsec in [struct.unpack("@qq", raw[:16])]), 0)
                st[0] += data
                if b"\r\n\r\n" not in st[0]:
                    continue
                rhead, _, rest = st[0].partition(b"\r\n\r\n")
                fields = dict(line.split(b":", 1) for line in rhead.split(b"\r\n")[1:])
                fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
                if len(rest) < int(fields.get(b"content-length", b"0")):
                    continue
                self.got.append((st[1], fields[b"x-hopbench-request-id"].decode()))
                st[0] = b""  # (hopbench sends the next request only after this response)
                conn.setblocking(True)
                conn.sendall(head + body)
                conn.setblocking(False)
                if self.close_after:
                    sel.unregister(conn)
                    del state[conn]
                    conn.close()
        for conn in state:
            conn.close()
        sel.close()


def _stamps_or_skip() -> None:
    if _SO_TIMESTAMPNS is None or not keep_kernel_stamps():
        pytest.skip("no kernel receive stamps on this platform (SO_TIMESTAMPNS)")


def _received_lines(tmp_path: Path, server: _StampedServer, n: int,
                    tuning: Tuning | None = None) -> tuple[list[int], dict[str, Any]]:
    """Replay ``tmp_path``'s same.jsonl against ``server`` (hopbench run in this process,
    the dispatcher's thread on: plain http, the real clock; ``tuning``: the open loop's
    knobs): the trace lines in the order their requests reached the server, and summary.json."""
    from hopbench.driver._single import run_profile

    prof = _profile(tmp_path, "same.jsonl", load="max_in_flight = 1000",
                    run=f"requests = {n}\nduration_s = 60", target=server.url)
    outcome = run_profile(load_profile(prof), out_dir=tmp_path / "run", tuning=tuning)
    assert outcome.summary["scopes"]["all"]["counters"]["completed"] == n, outcome.summary["scopes"]["all"]
    streams = [json.loads(x) for x in (tmp_path / "run" / "streams.jsonl").read_text(encoding="utf-8").splitlines()]
    line_of = {x["id"]: x["trace_line"] for x in streams}
    got = [line_of[i] for i in server.order()]
    assert len(got) == n and all(stamp > 0 for stamp, _ in server.got)
    return got, outcome.summary


def _each_timestamp_in_file_order(got: list[int], per: int) -> None:
    """``got`` (trace lines, 1 up, ``per`` a timestamp) keeps the file's order within
    each timestamp. (Only there: a later timestamp's rows may leave before the last of
    an earlier one's, e.g. as the loop writes both in the run's first busy milliseconds.)"""
    for g in range(max(got) // per):
        rows = [line for line in got if (line - 1) // per == g]
        assert rows == sorted(rows), (g, rows, got)


@pytest.mark.slow
def test_trace_equal_timestamps_reach_the_target_in_file_order(tmp_path: Path) -> None:
    """With the dispatcher's thread on and spare connections as usual: requests of one
    timestamp reach the target in file order (the thread writes them in queue order;
    any it hands to the loop, the loop writes in order, after the thread's)."""
    _stamps_or_skip()
    _same_time_trace(tmp_path, groups=30, per=4)
    with _StampedServer() as server:
        got, _ = _received_lines(tmp_path, server, 120)
    _each_timestamp_in_file_order(got, 4)


@pytest.mark.slow
def test_trace_equal_timestamps_written_by_the_loop_reach_the_target_in_file_order(tmp_path: Path) -> None:
    """No idle connection ever (no spares, a server that closes each connection after
    one response): the thread hands every arrival to the loop, which connects and
    writes each from its own task; the connects end in any order, and trio runs a
    batch of tasks in either order, yet the requests of one timestamp reach the
    target in file order."""
    _stamps_or_skip()
    _same_time_trace(tmp_path, groups=6, per=6)
    no_spares = Tuning(spares_at_start_max=0, spares_per_miss=0, spares_reserve_max=0)
    with _StampedServer(close=True) as server:
        got, summary = _received_lines(tmp_path, server, 36, no_spares)
    assert summary["load"]["dispatched"] == 0  # (the loop wrote them all)
    _each_timestamp_in_file_order(got, 6)


@pytest.mark.slow
def test_trace_a_row_the_loop_writes_is_not_overtaken_by_later_rows_of_its_timestamp(tmp_path: Path) -> None:
    """A request too large for the dispatcher's thread to write (a body of 64 KiB or more:
    the loop writes it) comes first at its timestamp: the rows after it, which the thread
    could write at once on idle connections, are left to the loop too (none written by
    the thread: it wrote them at their time, before the large one), which writes them
    after it, in file order. (The large request's own arrival is not compared: a kernel
    stamp moves to the latest segment merged into it while unread, and its body is
    written after its head.)"""
    _stamps_or_skip()
    path = tmp_path / "same.jsonl"
    path.write_text("".join(json.dumps({"timestamp_ms": 20 * g, "input_tokens": 20_000 if i == 0 else 8,
                                        "output_tokens": 1}) + "\n" for g in range(4) for i in range(4)),
                    encoding="utf-8")
    with _StampedServer() as server:
        got, summary = _received_lines(tmp_path, server, 16)
    assert summary["load"]["dispatched"] == 0, summary["load"]
    _each_timestamp_in_file_order([line for line in got if (line - 1) % 4], 4)


async def test_write_turns_keep_the_order_and_skip_a_stream_that_ended_unwritten(
        autojump_clock: trio.testing.MockClock) -> None:
    """``_WriteTurns``: each ticket's write waits for the lower ones (which reach their
    write later: a longer connect), a stream that fails or is cancelled before its write
    holds nothing up, and a lone stream never waits."""
    turns = _open_loop._WriteTurns()
    tickets = [turns.take() for _ in range(5)]
    written: list[int] = []

    async def stream(k: int, ready_s: float, fails: bool = False, timeout_s: float = 1.0) -> None:
        try:
            with trio.move_on_after(timeout_s):  # its timeout (its scope cancelled)
                await trio.sleep(ready_s)  # its connect
                if fails:
                    raise OSError("connect failed")
                await turns.wait(k)
                turns.release(k)
                written.append(k)
        finally:
            turns.release(k)  # (LoadRunner._stream's finally)

    async def failing(k: int, ready_s: float) -> None:
        with pytest.raises(OSError):
            await stream(k, ready_s, fails=True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream, tickets[0], 0.03)
        nursery.start_soon(failing, tickets[1], 0.05)  # after 0: 2 and 3 wait for it
        nursery.start_soon(stream, tickets[2], 0.0)
        nursery.start_soon(partial(stream, tickets[3], 0.0, timeout_s=0.01))  # times out as it waits
        nursery.start_soon(stream, tickets[4], 0.0)
    assert written == [0, 2, 4] and turns.turn == 5 and not turns.done
    lone = _open_loop._WriteTurns()
    await lone.wait(lone.take())  # no wait, no checkpoint needed
    assert lone.turn == 0


@pytest.mark.slow
def test_trace_zero_token_note_reaches_summary_json(tmp_path: Path) -> None:
    """The count of 0-token rows is in the run's own record (summary.json's notes), not
    only on the terminal: in one process and in the driver of ``--workers``."""
    from hopbench.driver._single import run_profile
    from hopbench.driver._common import build_meta

    jsonl, _ = _zero_traces(tmp_path)
    prof = _profile(tmp_path, jsonl.name, load="speedup = 20", target="embedded",
                    emulator="[emulator]\nttft_ms = 1\ntokens_per_s = 5000\n")
    profile = load_profile(prof)
    note = profile.load.trace.zero_note
    assert note is not None
    assert note in build_meta(profile, "local", 2)["notes"]
    out = run_profile(profile, out_dir=tmp_path / "out")
    assert out.complete
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert note in summary["warnings"]
