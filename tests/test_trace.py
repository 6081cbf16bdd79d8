"""Trace replay (issue 17 item 4): reading and checking a trace, its schedule, its
prompt blocks, the runner's replay under MockClock, and the example profile on the
emulator (the cache-hit ratio the trace implies)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from hopbench import ProfileError
from hopbench.engine import _runner
from hopbench.config._profile import load_profile
from hopbench.measure._recorder import ALL, Recorder
from hopbench.driver._results import cache_of
from hopbench.workload._trace import replay_plan
from hopbench.workload._trace_bodies import TraceBodies
from hopbench.workload._trace_cache import implied_hits, window
from hopbench.workload._trace_file import TraceEntry, read_trace
from hopbench.emulator._prefix import PrefixCache

from _fake_transport import Plan, fake_transport

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
PINNED_BLOCK = b" two use say now one low"  # _words("hopbench-trace-block:0:1", 6)


def _trace(tmp_path: Path, content: str | bytes, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _profile(tmp_path: Path, trace: str, load: str = "", run: str = "", scenarios: str = "") -> Path:
    prof = tmp_path / "p.toml"
    prof.write_text(f'[run]\n{run}\n[load]\nmode = "trace"\ntrace = "{trace}"\n{load}\n'
                    '[target]\nurl = "http://127.0.0.1:9"\n'
                    + (scenarios or '[[scenario]]\nname = "a"\nprotocol = "chat"\nmodel = "m"\n'),
                    encoding="utf-8")
    return prof


GOOD = ('{"timestamp_ms": 0, "input_tokens": 10, "output_tokens": 5, "hash_ids": [1]}\n'
        '\n'
        '{"timestamp": 250.5, "input_length": 20, "output_length": 6}\n'  # Mooncake's names
        '{"timestamp_ms": 250.5, "input_tokens": 30, "output_tokens": 7, "scenario": "a"}\n')


def test_trace_reads_fields_and_mooncake_names(tmp_path: Path) -> None:
    entries = read_trace(_trace(tmp_path, GOOD))
    assert [(e.t_ms, e.input_tokens, e.output_tokens, e.hash_ids, e.scenario, e.line) for e in entries] == [
        (0.0, 10, 5, (1,), None, 1), (250.5, 20, 6, (), None, 3), (250.5, 30, 7, (), "a", 4)]


@pytest.mark.parametrize(("content", "line", "message"), [
    (None, None, "cannot read the trace"),
    ("", None, "is empty"),
    ("\n  \n", None, "is empty"),
    (b'{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n{"x": "\xff"}\n', 2, "not UTF-8"),
    # the offset is counted within the line (byte 8 of line 2, 1-based), and of the file
    (b'{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n{"x": "\xff"}\n', 2,
     "(byte 8 of the line, 67 of the file)"),
    # lengths above hopbench's limit (docs/workloads.md, "Length limits"): refused, not built
    ('{"timestamp_ms": 5, "input_tokens": 10000000000, "output_tokens": 5}\n', 1,
     '"input_tokens": expected at most 2,000,000 tokens'),
    ('{"timestamp": 5, "input_length": 2000001, "output_length": 5}\n', 1,
     '"input_length": expected at most 2,000,000 tokens'),
    ('{"timestamp_ms": 5, "input_tokens": 5, "output_tokens": 10000000000}\n', 1,
     '"output_tokens": expected at most 2,000,000 tokens'),
    # a field under both its names: which one was meant cannot be told (one would go unread)
    ('{"timestamp_ms": 5, "timestamp": 9, "input_tokens": 5, "output_tokens": 5}\n', 1,
     'both "timestamp_ms" and its Mooncake name "timestamp": keep one'),
    ('{"timestamp_ms": 5, "input_tokens": 5, "input_length": 7, "output_tokens": 5}\n', 1,
     'both "input_tokens" and its Mooncake name "input_length"'),
    # more hash ids than ceil(input_tokens / block_tokens) blocks
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n'
     '{"timestamp_ms": 0, "input_tokens": 10, "output_tokens": 5, "hash_ids": [1, 2, 3, 4]}\n', 2,
     '"hash_ids" has 4 ids, more than the 1 block of "input_tokens" = 10 with load.block_tokens = 512'),
    ('{"timestamp_ms": 0, "input_tokens": 1025, "output_tokens": 5, "hash_ids": [1, 2, 3, 4]}\n', 1,
     '"hash_ids" has 4 ids, more than the 3 blocks'),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n{oops\n', 2, "broken JSON line"),
    ('[1, 2]\n', 1, "expected a JSON object"),
    ('{"input_tokens": 1, "output_tokens": 1}\n', 1, 'missing field "timestamp_ms"'),
    ('{"timestamp_ms": 0, "output_tokens": 1}\n', 1, 'missing field "input_tokens"'),
    ('{"timestamp_ms": 0, "input_tokens": 1}\n', 1, 'missing field "output_tokens"'),
    ('{"timestamp_ms": 0, "input_tokens": -1, "output_tokens": 1}\n', 1, '"input_tokens": expected an integer >= 0'),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 2.5}\n', 1, '"output_tokens": expected an integer >= 0'),
    ('{"timestamp_ms": -1, "input_tokens": 1, "output_tokens": 1}\n', 1, "expected a number of ms >= 0"),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1, "hash_ids": [1, "2"]}\n', 1, "hash_ids"),
    ('{"timestamp_ms": 5, "input_tokens": 1, "output_tokens": 1}\n'
     '{"timestamp_ms": 4, "input_tokens": 1, "output_tokens": 1}\n', 2, "timestamps out of order: 4 after 5"),
    # a raw U+2028 in a string is valid JSON: it neither breaks its line nor shifts the next ones'
    ('{"timestamp_ms": 5, "input_tokens": 1, "output_tokens": 1, "note": "a\u2028b\x85c"}\n'
     '{"timestamp_ms": 4, "input_tokens": 1, "output_tokens": 1}\n', 2, "timestamps out of order: 4 after 5"),
    # json.loads's other failures (RecursionError, the 4,300-digit integer limit): file:line, no traceback
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n{"x": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
     2, "broken JSON line: arrays or objects nested too deeply to parse"),
    ('{"timestamp_ms": 0, "input_tokens": 1' + "0" * 5000 + ', "output_tokens": 1}\n', 1,
     "broken JSON line: an integer of more than 4,300 digits"),
    # a timestamp past a float's range (an uncaught OverflowError, exit 3), or past the offsets'
    # int64 ns (292 years; a timestamp in ns given as ms), with or without the fast parser
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n{"timestamp_ms": 1' + "0" * 400
     + ', "input_tokens": 1, "output_tokens": 1}\n', 2, '"timestamp_ms": expected ms under 9.22e+12'),
    ('{"timestamp": 1764633600000000000, "input_length": 1, "output_length": 1}\n', 1,
     '"timestamp": expected ms under 9.22e+12'),
    ('{"timestamp_ms": 1e300, "input_tokens": 1, "output_tokens": 1}\n', 1,
     '"timestamp_ms": expected ms under 9.22e+12'),
])
def test_trace_bad_input_names_file_and_line(tmp_path: Path, content: str | bytes | None, line: int | None,
                                             message: str) -> None:
    path = tmp_path / "t.jsonl" if content is None else _trace(tmp_path, content)
    with pytest.raises(ProfileError) as info:
        load_profile(_profile(tmp_path, "t.jsonl"))
    text = str(info.value)
    assert message in text
    if content is None:  # a file that cannot be opened: the profile's line and key
        assert text.startswith(f"{tmp_path / 'p.toml'}:") and ": load.trace: " in text, text
    else:
        assert text.startswith(f"{path}:{line}: " if line is not None else f"{path}")


def test_trace_hash_ids_up_to_the_block_count_are_accepted(tmp_path: Path) -> None:
    """ceil(input_tokens / block_tokens) ids (Mooncake's) or fewer (the rest unique) pass."""
    _trace(tmp_path, '{"timestamp_ms": 0, "input_tokens": 1025, "output_tokens": 5, "hash_ids": [1, 2, 3]}\n'
                     '{"timestamp_ms": 1, "input_tokens": 1024, "output_tokens": 5, "hash_ids": [1, 2]}\n'
                     '{"timestamp_ms": 2, "input_tokens": 1024, "output_tokens": 5, "hash_ids": [1]}\n')
    spec = load_profile(_profile(tmp_path, "t.jsonl")).load.trace
    assert spec is not None and [len(e.hash_ids) for e in spec.entries] == [3, 2, 1]


@pytest.mark.parametrize(("trace", "load", "scenarios", "message"), [
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1, "scenario": "zz"}\n', "", "",
     "no scenario named 'zz'"),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n', "start_ms = 10", "", "falls in the window"),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n', "start_ms = 10\nend_ms = 5", "",
     "expected end_ms > start_ms"),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n', "rate_rps = 3", "", "not used with"),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n', "speedup = 0", "", "speedup"),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n', "", '[[scenario]]\nprotocol = "chat"\n'
     'model = "m"\ninput_tokens = 5\n', r"scenario\[0\]\.input_tokens: not used with load.mode = \"trace\""),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n', "loop = true", "",
     "expected run.duration_s or run.requests"),
    # a replay of more than a year: the run would idle for ever (a tiny speedup, us read as ms)
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n{"timestamp_ms": 1900, "input_tokens": 1, '
     '"output_tokens": 1}\n', "speedup = 1e-12", "", r"load.speedup: replaying 1,900 ms of trace \(lines 1 to 2 "
     r".* at speedup 1e-12 takes 2.2e\+07 days, more than hopbench's limit of 365 days"),
    ('{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n{"timestamp_ms": 1e12, "input_tokens": 1, '
     '"output_tokens": 1}\n', "", "", "check that the timestamps are ms"),
])
def test_trace_bad_profile_keys(tmp_path: Path, trace: str, load: str, scenarios: str, message: str) -> None:
    _trace(tmp_path, trace)
    with pytest.raises(ProfileError, match=message):
        load_profile(_profile(tmp_path, "t.jsonl", load, scenarios=scenarios))


def test_trace_bad_trace_cli_exit_2_no_traceback(tmp_path: Path) -> None:
    _trace(tmp_path, '{"timestamp_ms": 3, "input_tokens": 1, "output_tokens": 1}\n'
                     '{"timestamp_ms": 1, "input_tokens": 1, "output_tokens": 1}\n')
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(_profile(tmp_path, "t.jsonl"))],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 't.jsonl'}:2: " in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_trace_not_a_regular_file_is_refused_unread(tmp_path: Path, kind: str) -> None:
    """A FIFO (open waits for a writer) or /dev/zero (read never ends) as the trace: exit 2
    naming load.trace, never a hang."""
    if kind == "fifo":
        target = tmp_path / "f.jsonl"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero") if kind == "device" else tmp_path
    prof = _profile(tmp_path, str(target))
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(prof)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    name = {"fifo": "a FIFO", "device": "a character device", "directory": "a directory"}[kind]
    assert ": load.trace: " in proc.stderr and f"not a regular file ({name})" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_trace_huge_input_tokens_cli_exit_2_no_traceback(tmp_path: Path) -> None:
    _trace(tmp_path, '{"timestamp_ms":5,"input_tokens":10000000000,"output_tokens":5}\n')
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(_profile(tmp_path, "t.jsonl"))],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 't.jsonl'}:1: " in proc.stderr and "input_tokens" in proc.stderr
    assert "Traceback" not in proc.stderr


def _entry(t_ms: float, inp: int = 10, hashes: tuple[int, ...] = ()) -> TraceEntry:
    return TraceEntry(t_ms, inp, 4, hashes, None, 1)


def test_trace_window_speedup_loop_and_parts(tmp_path: Path) -> None:
    entries = [_entry(t) for t in (100, 200, 300, 500, 900)]
    kept, start, period = window(entries, 200, 600)
    assert [e.t_ms for e in kept] == [200, 300, 500] and (start, period) == (200, 400)
    kept, start, period = window(entries, None, None)
    assert start == 100 and period == 800 + 200  # span + the mean gap
    _trace(tmp_path, "".join(json.dumps({"timestamp_ms": e.t_ms, "input_tokens": 1, "output_tokens": 1}) + "\n"
                             for e in entries))
    spec = load_profile(_profile(tmp_path, "t.jsonl", "speedup = 2\nloop = true\nstart_ms = 200\nend_ms = 600",
                                 run="requests = 10")).load.trace
    sched = spec.arrivals()
    got = [next(sched) for _ in range(7)]
    assert got == [(0, 0, 0), (50 * MS, 1, 0), (150 * MS, 2, 0), (200 * MS, 0, 1), (250 * MS, 1, 1),
                   (350 * MS, 2, 1), (400 * MS, 0, 2)]
    assert spec.rate_rps == 3 / 0.4 * 2
    # two workers: every other entry, at its own time; together the whole schedule
    a, b = list(_take(spec.arrivals(0, 2), 4)), list(_take(spec.arrivals(1, 2), 2))
    assert a[:2] == [(0, 0, 0), (150 * MS, 2, 0)] and b == [(50 * MS, 1, 0), (250 * MS, 1, 1)]
    assert replay_plan(spec, None, 10)[0] == ("trace replay: 3 requests from t.jsonl, 0.2 s a pass at speedup 2 "
                                              "(mean 15 requests/s), looped")
    assert spec.scheduled_between(0, 200 * MS) == 3 and spec.scheduled_between(100 * MS, 400 * MS) == 4
    assert spec.scheduled_between(0, 400 * MS, 0, 2) + spec.scheduled_between(0, 400 * MS, 1, 2) == 6



def test_trace_scheduled_between_counts_whole_passes_without_walking_them(tmp_path: Path) -> None:
    # a looped trace of 3 requests at one instant has a 1 s period: at speedup 1e8 that is
    # 10 ns, so the first second holds 1e8 passes; the count walked them one by one and the
    # run hung before its first request (spare connections sized from the first second)
    _trace(tmp_path, "".join(json.dumps({"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}) + "\n"
                             for _ in range(3)))
    spec = load_profile(_profile(tmp_path, "t.jsonl", "speedup = 1e8\nloop = true", run="duration_s = 1")).load.trace
    assert spec.scheduled_between(0, 10**9) == 3 * 10**8
    assert spec.scheduled_between(0, 3600 * 10**9, 1, 2) == 3600 * 10**8
    # against the schedule itself: every arrival of [a, b), over passes that straddle both ends
    spec = load_profile(_profile(tmp_path, "t.jsonl", "speedup = 3\nloop = true", run="duration_s = 1")).load.trace
    sched = spec.arrivals()
    times = [next(sched)[0] for _ in range(3000)]
    for a_ns, b_ns in ((0, 1), (5, 99 * MS), (MS // 7, 200 * MS + 3), (333_333, 333_334)):
        assert spec.scheduled_between(a_ns, b_ns) == sum(a_ns <= t < b_ns for t in times)

def test_trace_scheduled_between_reads_a_few_offsets_of_a_long_trace(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner sizes its spare connections with scheduled_between as its clock starts: it
    made a list of every offset (0.3-0.6 s for 500,000 lines, the first second's arrivals
    that late). Now it reads O(log n) offsets per pass it bisects."""
    from hopbench.workload._trace import TraceSpec

    n = 50_000
    _trace(tmp_path, "".join(json.dumps({"timestamp_ms": i, "input_tokens": 1, "output_tokens": 1}) + "\n"
                             for i in range(n)))
    spec = load_profile(_profile(tmp_path, "t.jsonl")).load.trace
    calls = [0]
    offset_ns = TraceSpec.offset_ns

    def counting(self: TraceSpec, i: int, rep: int) -> int:
        calls[0] += 1
        return offset_ns(self, i, rep)

    monkeypatch.setattr(TraceSpec, "offset_ns", counting)
    assert spec.scheduled_between(0, 1000 * MS) == 1000
    assert spec.scheduled_between(0, 50 * MS, 1, 2) == 25
    assert calls[0] < 100, calls


def _take(it: Any, n: int) -> list[Any]:
    return [next(it) for _ in range(n)]


def test_trace_implied_hits_follow_shared_leading_blocks() -> None:
    entries = [_entry(0, 40, (1, 2, 3)),      # 2 full blocks of 16 (+8): nothing seen yet
               _entry(1, 48, (1, 2, 9)),      # 1, 2 seen: 32 tokens
               _entry(2, 20, (1, 2)),         # only block 1 is full: 16
               _entry(3, 64, (5, 1, 2)),      # another first block: no hit
               _entry(4, 40, (1, 2, 3))]      # block 3 was never full: 32
    assert implied_hits(entries, ["m"] * 5, 16) == ((0, 32), (32, 48), (16, 16), (0, 48), (32, 32))
    # another model shares nothing
    assert implied_hits(entries[:2], ["m", "n"], 16)[1] == (0, 48)


def test_trace_bodies_share_blocks_exactly_and_the_emulator_cache_agrees(tmp_path: Path) -> None:
    lines = [{"timestamp_ms": i, "input_tokens": n, "output_tokens": 2, "hash_ids": h}
             for i, (n, h) in enumerate([(40, [1, 2, 3]), (48, [1, 2, 9]), (20, [1, 2]), (64, [5, 1, 2]),
                                         (40, [1, 2, 3]), (70, [7]), (70, [7])])]
    _trace(tmp_path, "".join(json.dumps(x) + "\n" for x in lines))
    spec = load_profile(_profile(tmp_path, "t.jsonl", "block_tokens = 16")).load.trace
    bodies = TraceBodies(spec, seed=0)
    prompts = [bodies.prompt(i).decode("ascii") for i in range(len(lines))]
    assert [len(p) for p in prompts] == [4 * x["input_tokens"] for x in lines]
    assert prompts[0][:128] == prompts[1][:128] and prompts[0][128:] != prompts[1][128:160]
    assert prompts[5][64:] != prompts[6][64:]  # past the hash ids: words unique to each request
    assert set(bodies._blocks) == {1, 2, 3, 7}  # only blocks that several requests send are kept
    cache = PrefixCache(1000, 16)
    hits = [cache.lookup("m", [p]).hit_tokens for p in prompts]
    assert hits == [first for first, _ in spec.implied]
    # every worker builds the same text for a hash id
    assert TraceBodies(spec, seed=0).prompt(1) == bodies.prompt(1) != TraceBodies(spec, seed=1).prompt(1)


def test_block_words_depend_on_the_key_alone_and_on_no_machine() -> None:
    from hopbench.workload._lengths import WORDS
    from hopbench.workload._trace_bodies import _words

    text = _words("hopbench-trace-block:0:1", 6)
    # pinned: workers on other machines (other byte orders, other Pythons) send the same block
    assert text == PINNED_BLOCK
    assert _words("hopbench-trace-block:0:1", 6) == text != _words("hopbench-trace-block:0:2", 6)
    long = _words("k", 5000).decode("ascii")
    words = [long[i:i + 4] for i in range(0, len(long), 4)]
    assert len(words) == 5000 and set(words) <= set(WORDS)
    assert len(set(words)) == len(WORDS)  # every word is drawn
    assert _words("k", 0) == b"" and _words("k", 3) == long[:12].encode("ascii")


# a usage chunk whose prompt count is not hopbench's (llm-mock-api 0.1.2 reports 10 for any prompt)
USAGE_10 = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":'
            b'{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}}}'
            b'\n\n')


async def test_trace_implied_hit_ratio_is_over_the_prompt_tokens_hopbench_sent(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    """The implied ratio divides what the trace implies (hopbench's tokens) by what hopbench sent,
    not by the server's count: against llm-mock-api (10 prompt tokens for any prompt) it read
    "the trace implies 4679.4%"."""
    from _fake_transport import CHUNK, LAST

    _trace(tmp_path, "".join(json.dumps({"timestamp_ms": 10 * i, "input_tokens": 64, "output_tokens": 4,
                                         "hash_ids": [7]}) + "\n" for i in range(4)))
    profile = load_profile(_profile(tmp_path, "t.jsonl", "block_tokens = 32"))
    base = fake_transport(Plan(gaps_s=(0.01,), last_s=0.01))

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            for chunk in (CHUNK, USAGE_10, LAST):
                await trio.sleep(0.01)
                yield chunk

    class Transport(base):  # type: ignore[misc,valid-type]
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            await super().handle_async_request(request)
            body = Body()
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body,
                                  request=request, extensions={"hopbench.body": body})

    transport = Transport
    rec = Recorder(["a"])
    await _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["a"]), transport_factory=transport).run()
    cache = cache_of(rec.snapshot().scopes["a"].counters)
    # 4 requests of 64 tokens, each a 32-token block of hash id 7 then 32 unique: the first
    # sends block 7, the 3 others hit it (32 tokens each): 96 of 256 tokens sent
    assert cache is not None and cache["prompt_tokens"] == 40 and cache["hit_ratio"] == 0.0
    assert cache["implied_tokens"] == 96 and cache["implied_prompt_tokens"] == 256
    assert cache["implied_hit_ratio"] == 96 / 256


async def test_trace_replay_latency_counts_from_the_scheduled_time(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    # the fake target takes 1 s to answer each stream; arrivals every 0.1 s of replay time
    _trace(tmp_path, "".join(json.dumps({"timestamp_ms": 200 * i, "input_tokens": 8, "output_tokens": 4,
                                         "hash_ids": [i % 2]}) + "\n" for i in range(6)))
    profile = load_profile(_profile(tmp_path, "t.jsonl", "speedup = 2\nblock_tokens = 4"))
    transport = fake_transport(Plan(head_s=1.0, gaps_s=(0.5,), last_s=0.5))
    rec = Recorder(["a"])
    lines: list[dict[str, Any]] = []
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["a"]), on_stream=lines.append,
                                transport_factory=transport)
    stats = await runner.run()
    assert sorted(x["start_ns"] for x in lines) == [100 * MS * i for i in range(6)]
    assert all(x["ttft_ns"] == 1_500 * MS and x["trace_pass"] == 0 for x in lines)  # from the schedule
    assert sorted(x["trace_line"] for x in lines) == [1, 2, 3, 4, 5, 6]
    assert sorted(x["requested_input_tokens"] for x in lines) == [8] * 6
    assert stats.arrivals == 6 and rec.snapshot().histogram(ALL, "schedule_lag").count == 6
    assert rec.snapshot().histogram(ALL, "schedule_lag").max <= 1  # MockClock: on time (0 is kept as 1 ns)


@pytest.mark.slow
def test_trace_example_profile_on_the_emulator_hits_the_implied_ratio(tmp_path: Path) -> None:
    from hopbench.driver._single import run_profile

    text = (ROOT / "profiles" / "trace.toml").read_text(encoding="utf-8")
    assert "speedup = 2.0" in text
    text = text.replace("speedup = 2.0", "speedup = 8.0").replace("tokens_per_s = 1000", "tokens_per_s = 0")
    shutil.copytree(ROOT / "profiles" / "data", tmp_path / "data")
    prof = tmp_path / "trace.toml"
    prof.write_text(text, encoding="utf-8")
    outcome = run_profile(load_profile(prof), out_dir=tmp_path / "run")
    s = outcome.summary
    assert s["scopes"]["all"]["counters"]["completed"] == 400
    for scope in ("chat", "claude", "all"):
        cache = s["scopes"][scope]["cache"]
        assert cache["streams"] > 0 and cache["hit_ratio"] > 0.3
        # one emulator, one client in schedule order: exactly the hits the trace implies
        assert cache["cached_tokens"] == cache["implied_tokens"], (scope, cache)
    assert s["load"]["trace"]["scheduled"] == 400 and s["load"]["mode"] == "trace"
    assert s["load"]["requested_rate_rps"] > 0 and "schedule_lag_p99_ms" in s["load"]


async def test_trace_loop_replays_the_window_until_the_request_budget(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    _trace(tmp_path, '{"timestamp_ms": 1000, "input_tokens": 8, "output_tokens": 4}\n'
                     '{"timestamp_ms": 1500, "input_tokens": 8, "output_tokens": 4}\n')
    profile = load_profile(_profile(tmp_path, "t.jsonl", "loop = true\nend_ms = 3000", run="requests = 5"))
    transport = fake_transport(Plan(head_s=0.1, gaps_s=(0.1,), last_s=0.1))
    lines: list[dict[str, Any]] = []
    await _runner.LoadRunner(profile, "http://127.0.0.1:9", Recorder(["a"]), Recorder(["a"]),
                             on_stream=lines.append, transport_factory=transport).run()
    got = sorted((x["start_ns"], x["trace_line"], x["trace_pass"]) for x in lines)
    # the window starts at the first timestamp (1000 ms) and lasts end_ms - start = 2000 ms
    assert got == [(0, 1, 0), (500 * MS, 2, 0), (2000 * MS, 1, 1), (2500 * MS, 2, 1), (4000 * MS, 1, 2)]


@pytest.mark.parametrize(("extra", "message"), [
    ('[[arm]]\nname = "x"\nurl = "embedded"\n[[arm]]\nname = "y"\nurl = "embedded"\n', "not supported with"),
    ("[[stage]]\nconcurrency = 2\nduration_s = 1\n", "set their own load"),
])
def test_trace_refuses_arms_and_stages(tmp_path: Path, extra: str, message: str) -> None:
    _trace(tmp_path, '{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n')
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\n[load]\nmode = "trace"\ntrace = "t.jsonl"\n' + extra
                    + '[[scenario]]\nname = "a"\nprotocol = "chat"\nmodel = "m"\n', encoding="utf-8")
    with pytest.raises(ProfileError, match=message):
        load_profile(prof)


def test_trace_replay_plan_says_its_length_and_warns_of_a_stretched_or_cut_replay(tmp_path: Path) -> None:
    _trace(tmp_path, "".join(json.dumps({"timestamp_ms": t, "input_tokens": 1, "output_tokens": 1}) + "\n"
                             for t in (0, 2000, 4000, 10000)))
    spec = load_profile(_profile(tmp_path, "t.jsonl", "speedup = 2")).load.trace
    line, warning = replay_plan(spec, None, None)
    assert line.startswith("trace replay: 4 requests from t.jsonl, 5.0 s a pass at speedup 2") and warning is None
    # a speedup far below 1: 10 s of trace over 116 days, with nothing to end it
    slow = load_profile(_profile(tmp_path, "t.jsonl", "speedup = 1e-6")).load.trace
    line, warning = replay_plan(slow, None, None)
    assert "116 days" in line and warning is not None and "load.speedup = 1e-06" in warning
    assert replay_plan(slow, 60 * 10**9, None)[1] == (
        "run.duration_s = 60 ends the replay after 1 of its 4 requests (the window takes 116 days at speedup 1e-06)")
    # run.duration_s shorter than the replay: how many requests it leaves
    assert replay_plan(spec, 3 * 10**9, None)[1] == (
        "run.duration_s = 3 ends the replay after 3 of its 4 requests (the window takes 5.0 s at speedup 2)")


@pytest.mark.slow
def test_trace_stretched_replay_warns_on_the_command_line(tmp_path: Path) -> None:
    _trace(tmp_path, '{"timestamp_ms": 0, "input_tokens": 1, "output_tokens": 1}\n'
                     '{"timestamp_ms": 1000, "input_tokens": 1, "output_tokens": 1}\n')
    prof = _profile(tmp_path, "t.jsonl", "speedup = 1e-4", run="duration_s = 0.5")
    # the target refuses: the run stops at once (one request, then the deadline); the warning came first
    proc = subprocess.run([sys.executable, "-m", "hopbench", "run", str(prof), "--out", str(tmp_path / "r"),
                           "--no-progress"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "hopbench: warning: run.duration_s = 0.5 ends the replay after 1 of its 2 requests" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_looped_trace_at_one_instant_repeats_once_a_second_whatever_its_rows(tmp_path: Path) -> None:
    """No gap to repeat by: a single row and rows all at one timestamp loop every
    1 s alike (two rows looped every 1 ms before: 2,000 requests/s)."""
    for rows in (1, 2, 10):
        _trace(tmp_path, "".join(json.dumps({"timestamp_ms": 5, "input_tokens": 5, "output_tokens": 3}) + "\n"
                                 for _ in range(rows)))
        spec = load_profile(_profile(tmp_path, "t.jsonl", "loop = true", run="duration_s = 1")).load.trace
        assert spec.period_ms == 1000.0 and spec.rate_rps == rows
        assert spec.scheduled_between(0, 3 * 10**9) == 3 * rows
