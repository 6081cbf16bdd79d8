"""Multi-turn sessions (issue 17 item 5): the conversation's bodies, the profile keys,
the runner's turns under MockClock (think time, the streamed text sent back) and the
example profile on the emulator (TTFT rising with the turn)."""

from __future__ import annotations

import json
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
from hopbench.protocols._requests import Message, encode_body
from hopbench.config._profile import load_profile
from hopbench.measure._recorder import Recorder
from hopbench.driver._results import summary_scopes
from hopbench.workload._sessions import Conversation, turns_of
from hopbench.workload._pool import PoolEntry

from _fake_transport import Plan, fake_transport

ROOT = Path(__file__).resolve().parents[1]
S = 1_000_000_000


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
@pytest.mark.parametrize("system", ["", "Be brief. 串流"])
def test_session_body_is_the_whole_conversation_encoded_once(protocol: str, system: str) -> None:
    first = PoolEntry(((Message("system", system),) if system else ()) + (Message("user", "q1 \"x\""),), 3, 16)
    extra = {"ignore_eos": True}
    conv = Conversation(protocol, "m", True, extra, first)
    r1 = conv.request(None)
    msgs = list(first.messages)
    assert r1.body == encode_body(protocol, "m", msgs, 16, True, extra) or (
        protocol == "responses" and json.loads(r1.body)["input"] == [{"role": "user", "content": "q1 \"x\""}])
    conv.answer("a1 答")
    r2 = conv.request(PoolEntry((Message("user", "q2"),), 2, 32))
    msgs += [Message("assistant", "a1 答"), Message("user", "q2")]
    assert r2.body == encode_body(protocol, "m", msgs, 32, True, extra)
    assert r2.shape == (-(-sum(len(m.text) for m in msgs) // 4), 32)
    assert r2.expect_usage == (protocol == "chat")


def _profile(tmp_path: Path, session: str, load: str = "concurrency = 1", run: str = "requests = 6") -> Path:
    prof = tmp_path / "p.toml"
    prof.write_text(f'[run]\n{run}\n[load]\n{load}\n[target]\nurl = "http://127.0.0.1:9"\n'
                    '[[scenario]]\nname = "s"\nprotocol = "chat"\nmodel = "m"\nprompts = ["p1", "p2"]\n'
                    f'max_tokens = 8\nsession = {session}\n', encoding="utf-8")
    return prof


@pytest.mark.parametrize(("session", "message"), [
    ("{ turns = 0 }", "expected a session of at least 1 turn, got 0"),
    ("{ think_time_s = 1 }", "expected the number of turns"),
    ("{ turns = 2, think_time_s = -1 }", "think_time_s"),
    ("{ turns = 2, wait = 1 }", "unknown key"),
    ("{ turns = { dist = \"uniform\", min = 0, max = 3 } }", "min >= 1"),
    ("{ turns = 5000 }", "at most 1000 turns"),
    ("3", "expected a table"),
])
def test_session_bad_keys_are_profile_errors(tmp_path: Path, session: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message) as info:
        load_profile(_profile(tmp_path, session))
    assert str(info.value).startswith(f"{tmp_path / 'p.toml'}:")


@pytest.mark.parametrize(("body", "message"), [
    # 1,000 turns of 1,000,000-token prompts: turn 1,000 alone would be a 4 GB body
    ("input_tokens = 1000000\nprompt_pool = 2\nsession = { turns = 1000 }",
     "scenario[0].session.turns: sessions of up to 1,000 turns of 1,000,000-token user messages (the prompts' mean) "
     "send about 1,000,000,000 prompt tokens by their last turn, above hopbench's limit of 2,000,000: at most 2 "
     "turns of these prompts, or shorter prompts"),
    ("input_tokens = 3000\nsession = { turns = { dist = 'uniform', min = 1, max = 999 } }", "at most 666 turns"),
])
def test_session_conversation_above_the_length_limit_is_refused(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[run]\nrequests = 6\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:9"\n'
                    f'[[scenario]]\nprotocol = "chat"\nmodel = "m"\n{body}\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if x.startswith("session"))
    assert f"{path}:{line}: " in proc.stderr
    # at the limit: accepted
    path.write_text(path.read_text().replace("turns = 1000", "turns = 2").replace("max = 999", "max = 666"))
    assert load_profile(path).scenarios[0].session is not None


def test_session_zero_turns_cli_exit_2_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(_profile(tmp_path, "{ turns = 0 }"))],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "at least 1 turn" in proc.stderr and "Traceback" not in proc.stderr


async def _run(prof: Path) -> tuple[Recorder, list[dict[str, Any]], list[bytes]]:
    seen: list[tuple[str, bytes, httpx.Headers]] = []  # (URL, body, headers) of each request
    transport = fake_transport(Plan(head_s=0.5, gaps_s=(0.25, 0.25)), seen)
    rec = Recorder(["s"])
    lines: list[dict[str, Any]] = []
    await _runner.LoadRunner(load_profile(prof), "http://127.0.0.1:9", rec, Recorder(["s"]),
                             on_stream=lines.append, transport_factory=transport).run()
    return rec, lines, [body for _, body, _ in seen]


@pytest.mark.slow
async def test_session_turns_send_the_streamed_text_back_after_the_think_time(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    rec, lines, bodies = await _run(_profile(tmp_path, "{ turns = 3, think_time_s = 2 }"))
    assert [x["turn"] for x in lines] == [1, 2, 3, 1, 2, 3]
    assert [x["session"] for x in lines] == ["0-s-0"] * 3 + ["0-s-1"] * 3
    msgs = [json.loads(b)["messages"] for b in bodies]
    assert [len(m) for m in msgs] == [1, 3, 5, 1, 3, 5]
    # the fake target streams "hi" twice: that text is the assistant's message of the next turn
    assert msgs[2] == [{"role": "user", "content": "p1"}, {"role": "assistant", "content": "hihi"},
                       {"role": "user", "content": "p2"}, {"role": "assistant", "content": "hihi"},
                       {"role": "user", "content": "p1"}]
    # closed loop: each later turn starts think_time_s after the previous one ended
    for a, b in zip(lines, lines[1:]):
        if b["turn"] > 1:
            assert b["start_ns"] - a["end_ns"] == 2 * S
    turns = turns_of(rec.snapshot().scopes["s"].counters)
    assert [(t["turn"], t["streams"], t["ttft_mean_ms"]) for t in turns] == [(1, 2, 750.0), (2, 2, 750.0),
                                                                           (3, 2, 750.0)]
    assert summary_scopes(rec.snapshot())["s"]["turns"] == turns


@pytest.mark.slow
async def test_session_open_loop_later_turns_count_from_the_end_of_the_think_time(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    prof = _profile(tmp_path, "{ turns = 2, think_time_s = 1 }",
                    load='mode = "rate"\nrate_rps = 0.2\narrival = "constant"', run="requests = 4")
    _, lines, _ = await _run(prof)
    by = sorted(lines, key=lambda x: (x["session"], x["turn"]))
    assert [(x["session"], x["turn"]) for x in by] == [("0-s-0", 1), ("0-s-0", 2), ("0-s-1", 1), ("0-s-1", 2)]
    assert [x["start_ns"] for x in by if x["turn"] == 1] == [0, 5 * S]   # session arrivals
    assert by[1]["start_ns"] == by[0]["end_ns"] + 1 * S
    assert all(x["ttft_ns"] == int(0.75 * S) for x in by)


@pytest.mark.slow
def test_session_example_profile_ttft_rises_with_the_turn(tmp_path: Path) -> None:
    from hopbench.driver._single import run_profile

    text = (ROOT / "profiles" / "sessions.toml").read_text(encoding="utf-8")
    text = text.replace("requests = 480", "requests = 96").replace("think_time_s = 0.1", "think_time_s = 0")
    prof = tmp_path / "sessions.toml"
    prof.write_text(text, encoding="utf-8")
    outcome = run_profile(load_profile(prof), out_dir=tmp_path / "run")
    turns = outcome.summary["scopes"]["chat-session"]["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4, 5, 6]
    inputs = [t["input_tokens_mean"] for t in turns]
    assert inputs[0] == 200 and all(b > a + 200 for a, b in zip(inputs, inputs[1:]))  # + answer + message
    # 20,000 prompt tokens/s: each later turn adds ~14 ms of prefill (280 tokens). The emulator
    # never sends early, so every turn's mean TTFT is at least its 20 ms + its mean prefill
    # (lower bounds only: a busy machine adds to any turn), which rises with the turn
    for t in turns:
        assert t["ttft_mean_ms"] >= 20 + t["input_tokens_mean"] / 20_000 * 1000 - 0.01, t
    # The rise as the emulator made it (its ground truth, joined by request id): every
    # turn's TTFT is its 20 ms + its prefill + the emulator's lateness in handing the
    # first token over (lag_max_ns bounds it), so turn 6's mean exceeds turn 1's by the
    # prefill difference less turn 1's lateness.
    out = tmp_path / "run"
    turn_of = {x["id"]: x["turn"] for x in map(json.loads, (out / "streams.jsonl").read_text().splitlines())
               if x["scenario"] == "chat-session" and x["ttft_ns"] is not None}
    truth = [r for r in map(json.loads, (out / "ground_truth.jsonl").read_text().splitlines())
             if r["request_id"] in turn_of and r["ttft_ns"] is not None]
    ms = 1e6

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    first, last = ([r for r in truth if turn_of[r["request_id"]] == k] for k in (1, 6))
    planned_rise = (mean([r["input_tokens"] for r in last]) - mean([r["input_tokens"] for r in first])) / 20
    late_first = mean([r["lag_max_ns"] / ms for r in first])
    truth_rise = mean([r["ttft_ns"] / ms for r in last]) - mean([r["ttft_ns"] / ms for r in first])
    assert planned_rise > 60 and truth_rise >= planned_rise - late_first - 0.01, (truth_rise, planned_rise)
    # The rise as hopbench shows it: each turn's mean is the emulator's plus the client's
    # share (request write, network, loop lag), which a busy machine makes noisy; the noise
    # is bounded by what this run measured on both sides (as in test_run's timing check:
    # hopbench's loop lag, the emulator's worst lateness), never by a quiet machine's.
    lag_max = outcome.summary["scopes"]["all"]["metrics"]["loop_lag"]["max"]
    noise_ms = 10.0 + lag_max + max(r["lag_max_ns"] for r in truth) / ms
    for k, t in enumerate(turns, 1):
        rows = [r["ttft_ns"] / ms for r in truth if turn_of[r["request_id"]] == k]
        assert -1.0 <= t["ttft_mean_ms"] - mean(rows) <= noise_ms, (t, mean(rows), noise_ms)
    assert turns[-1]["ttft_mean_ms"] - turns[0]["ttft_mean_ms"] > truth_rise - noise_ms - 1.0, \
        (turns, truth_rise, noise_ms)


@pytest.mark.slow
async def test_session_replays_a_dataset_records_user_turns(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "u1"},
                                 {"role": "assistant", "content": "the record's own answer"},
                                 {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"},
                                 {"role": "user", "content": "u3"}]}) + "\n", encoding="utf-8")
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nrequests = 3\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:9"\n'
                    '[[scenario]]\nname = "s"\nprotocol = "chat"\nmodel = "m"\nmax_tokens = 8\n'
                    'dataset = { path = "d.jsonl" }\nsession = { turns = "dataset" }\n', encoding="utf-8")
    _, lines, bodies = await _run(prof)
    assert [x["turn"] for x in lines] == [1, 2, 3]
    msgs = [json.loads(b)["messages"] for b in bodies]
    assert msgs[2] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "u1"},
                       {"role": "assistant", "content": "hihi"}, {"role": "user", "content": "u2"},
                       {"role": "assistant", "content": "hihi"}, {"role": "user", "content": "u3"}]
    assert [len(m) for m in msgs] == [2, 4, 6]


def test_session_turns_from_the_dataset_need_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match='turns = "dataset" needs a dataset'):
        load_profile(_profile(tmp_path, '{ turns = "dataset" }'))
