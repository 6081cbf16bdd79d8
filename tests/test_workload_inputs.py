"""Workload inputs as users bring them: files shaped like the public ShareGPT_V3 dump, OpenAI
chat and Anthropic Messages JSONL, the Mooncake traces (tests/data/workloads/README.md), and
what such files hold in the field: consecutive turns of one speaker, refusal parts, keys named
twice, gzip-compressed files, one-line JSON arrays, multi-turn records replayed as sessions
(docs/workloads.md, "Datasets", "Trace replay", "Multi-turn sessions")."""

from __future__ import annotations

import gzip
import json
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
from hopbench.workload import _trace_file
from hopbench.workload._lengths import estimate_tokens
from hopbench.config._profile import load_profile
from hopbench.measure._recorder import Recorder
from hopbench.workload._trace_file import read_trace
from hopbench.emulator import input_tokens_of

from _fake_transport import Plan, fake_transport

DATA = Path(__file__).resolve().parent / "data" / "workloads"
SHAREGPT = DATA / "sharegpt_v3_shape.json"


def _profile(tmp_path: Path, dataset: str, extra: str = "", proto: str = "chat", head: str = "") -> Path:
    path = tmp_path / "p.toml"
    path.write_text(head + "[run]\nrequests = 10\nseed = 5\n[load]\nconcurrency = 1\n"
                    f"[[scenario]]\nname = 's'\nprotocol = '{proto}'\nmodel = 'm'\n"
                    f"dataset = {{ path = '{dataset}' }}\n" + extra, encoding="utf-8")
    return path


def _sent(path: Path) -> list[tuple[list[dict[str, Any]], int]]:
    """(messages, max_tokens) of each pool entry's body, sorted."""
    out = [(b["messages"], b["max_tokens"]) for b in map(json.loads, load_profile(path).scenarios[0].bodies)]
    return sorted(out, key=json.dumps)


def test_inputs_sharegpt_v3_shape_sends_each_records_first_user_turn(tmp_path: Path) -> None:
    """Speakers human/user and gpt/chatgpt/bing/bard/assistant; two human turns in a row are
    one prompt (the reply answers both: it was dropped as "no reply", and with it the
    record under max_tokens = "dataset"); empty and gpt-first conversations are skipped,
    and the note names them by position and id."""
    shutil.copy(SHAREGPT, tmp_path / "s.json")
    path = _profile(tmp_path, "s.json", "max_tokens = 'dataset'\n")

    def user(text: str) -> dict[str, str]:
        return {"role": "user", "content": text}

    assert _sent(path) == sorted([
        ([user("Summarize the plot of Hamlet in two sentences.")],
         estimate_tokens("Prince Hamlet seeks revenge on his uncle, who murdered his father. The quest ends in "
                         "tragedy.")),
        ([{"role": "system", "content": "You are terse."}, user("What is 2+2?")], 1),
        ([user("Name three primes.")], estimate_tokens("2, 3 and 5.")),
        ([user("Is it raining in Oslo?")], estimate_tokens("I cannot check the weather.")),
        ([user("Capital of France?")], estimate_tokens("Paris.")),
        ([user("First part of my question.\nSecond part: what is a monad?")],
         estimate_tokens("A monoid in the category of endofunctors.\n(A joke, mostly.)")),
    ], key=json.dumps)
    note = load_profile(path).scenarios[0].dataset_note
    assert note == ('s.json: 8 records, 2 skipped (no user turn first: record 2 (id "i6IyJda_0"), line 31 '
                    "and 1 more)"), note


def test_inputs_sharegpt_record_error_names_its_position_and_id_in_a_one_line_array(tmp_path: Path) -> None:
    """json.dump's default writes a whole dump on line 1: "s.json:1" alone did not say which
    of 90,000 records was wrong."""
    recs = [{"id": "ok_0", "conversations": [{"from": "human", "value": "q"}]},
            {"id": "bad_1", "conversations": [{"from": "human", "value": 42}]}]
    (tmp_path / "s.json").write_text(json.dumps(recs), encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, "s.json", "max_tokens = 8\n"))
    assert str(err.value).startswith(f"{tmp_path / 's.json'}:1: sharegpt record 2 (id \"bad_1\"): "
                                     'conversations[0]: expected an object with a string "value", got 42'), \
        str(err.value)
    # {"role", "content"} turns under "conversations": the message says whose shape that is
    (tmp_path / "s.json").write_text(json.dumps([{"conversations": [{"role": "user", "content": "q"}]}]),
                                     encoding="utf-8")
    with pytest.raises(ProfileError, match=r'got an object with "content", "role" \(ShareGPT turns are '
                                           r'\{"from", "value"\}; \{"role", "content"\} turns are OpenAI'):
        load_profile(_profile(tmp_path, "s.json", "max_tokens = 8\n"))


def test_inputs_openai_chat_shape_sends_text_parts_developer_and_refusals(tmp_path: Path) -> None:
    """An assistant's refusal part (OpenAI "Create chat completion": text parts or one
    refusal part) is what the assistant said: it was refused as "blocks of type refusal and
    no text", the whole dataset with it."""
    shutil.copy(DATA / "openai_chat_shape.jsonl", tmp_path / "o.jsonl")
    path = _profile(tmp_path, "o.jsonl", "max_tokens = 8\n")
    assert _sent(path) == sorted([
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is in this image?"}], 8),
        ([{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello"}], 8),
        ([{"role": "user", "content": "Tell me how to pick a lock."},
          {"role": "assistant", "content": "I can't help with that."},
          {"role": "user", "content": "Then how do locks work?"}], 8),
    ], key=json.dumps)
    assert load_profile(path).scenarios[0].dataset_note == (
        "o.jsonl: 3 records, 1 with content blocks sent as their text only (image_url left out: record 1, line 1)")


def test_inputs_anthropic_messages_shape_sends_the_scenarios_model_and_max_tokens(tmp_path: Path) -> None:
    """System text blocks (with cache_control) are the system text; a record's own model and
    max_tokens are not sent: the scenario's are (docs/workloads.md, "Datasets")."""
    shutil.copy(DATA / "anthropic_messages_shape.jsonl", tmp_path / "a.jsonl")
    bodies = [json.loads(b) for b in load_profile(_profile(tmp_path, "a.jsonl", "max_tokens = 8\n",
                                                           proto="messages")).scenarios[0].bodies]
    got = sorted((b["system"], b["messages"], b["max_tokens"], b["model"]) for b in bodies)
    assert got == [("Plain system prompt.", [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"},
                                             {"role": "user", "content": "how are you?"}], 8, "m"),
                   ("You are a poet.", [{"role": "user", "content": "Write a haiku about this."}], 8, "m")]


@pytest.mark.parametrize(("name", "content", "where"), [
    ("d.jsonl", '{"prompt": "a"}\n{"prompt": "a", "prompt": "b"}\n', "d.jsonl:2"),
    ("d.jsonl", '{"messages": [{"role": "user", "content": "a", "content": "b"}]}\n', "d.jsonl:1"),
    ("d.json", '[\n {"conversations": [{"from": "human", "value": "a"}]},\n'
               ' {"conversations": [{"from": "human", "from": "gpt", "value": "a"}]}\n]\n', "d.json:3"),
])
def test_inputs_dataset_key_named_twice_is_refused_at_its_line(tmp_path: Path, name: str, content: str,
                                                               where: str) -> None:
    """The parser kept the last value and dropped the other unread: which was meant cannot be told."""
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, name, "max_tokens = 8\n"))
    assert str(err.value).startswith(f"{tmp_path / where}: broken JSON") and "appears twice in one object" in str(
        err.value), str(err.value)


@pytest.mark.parametrize("parser", ["orjson", "standard library"])
def test_inputs_trace_key_named_twice_is_refused_at_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             parser: str) -> None:
    if parser != "orjson":
        monkeypatch.setattr(_trace_file, "_fast_loads", None)
    ok = '{"timestamp": 1, "input_length": 5, "output_length": 2}\n'
    path = tmp_path / "t.jsonl"
    for line in ('{"timestamp": 9, "timestamp": 1, "input_length": 5, "output_length": 2}',
                 '{"timestamp": 1, "input_length": 5, "output_length": 2, "scenario": "a", "scenario": "b"}',
                 '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": [1], "hash_ids": [2]}'):
        path.write_text(ok + line + "\n", encoding="utf-8")
        with pytest.raises(ProfileError) as err:
            read_trace(path)
        assert str(err.value).startswith(f"{path}:2: broken JSON line: the key ") and "appears twice" in str(
            err.value), str(err.value)
    # string fields beside the trace's own, also with escaped quotes, are read as before
    path.write_text(ok + '{"timestamp": 2, "input_length": 5, "output_length": 2, "model": "x", '
                         '"note": "a \\"quoted\\" word"}\n', encoding="utf-8")
    assert [e.t_ms for e in read_trace(path)] == [1.0, 2.0]


def test_inputs_gzip_dataset_and_trace_read_as_their_text(tmp_path: Path) -> None:
    """A .jsonl.gz / .json.gz file (how many datasets are shipped) was refused as "not UTF-8
    text (byte 2 of the line)": it is read as the text it holds; a damaged one says so."""
    (tmp_path / "s.json.gz").write_bytes(gzip.compress(SHAREGPT.read_bytes()))
    shutil.copy(SHAREGPT, tmp_path / "s.json")
    assert _sent(_profile(tmp_path, "s.json.gz", "max_tokens = 8\n")) == _sent(
        _profile(tmp_path, "s.json", "max_tokens = 8\n"))
    trace = (DATA / "mooncake_trace_shape.jsonl").read_bytes()
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(trace))
    got = [(e.t_ms, e.input_tokens, e.output_tokens, e.hash_ids, e.line) for e in read_trace(tmp_path / "t.jsonl.gz")]
    assert got == [(e.t_ms, e.input_tokens, e.output_tokens, e.hash_ids, e.line)
                   for e in read_trace(DATA / "mooncake_trace_shape.jsonl")]
    assert [e.line for e in read_trace(tmp_path / "t.jsonl.gz")] == [1, 2, 3, 4]
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(trace)[:40])
    with pytest.raises(ProfileError, match=r"cut\.jsonl\.gz: cannot read the trace .*a damaged or truncated gzip"):
        read_trace(tmp_path / "cut.jsonl.gz")
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(SHAREGPT.read_bytes())[:40])
    with pytest.raises(ProfileError, match=r"cut\.json\.gz: cannot read the dataset .*a damaged or truncated gzip"):
        load_profile(_profile(tmp_path, "cut.json.gz", "max_tokens = 8\n"))
    (tmp_path / "u.jsonl.gz").write_bytes(gzip.compress(b'"ok"\n"ab\xe9"\n'))
    with pytest.raises(ProfileError, match=r"u\.jsonl\.gz:2: the dataset is not UTF-8 text \(byte 4 of the line, "
                                           r"9 of the file \(decompressed\)\)"):
        load_profile(_profile(tmp_path, "u.jsonl.gz", "max_tokens = 8\n"))


def test_inputs_bad_dataset_cli_exit_2_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "prompt": "b"}\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate",
                           str(_profile(tmp_path, "d.jsonl", "max_tokens = 8\n"))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{tmp_path / 'd.jsonl'}:1: broken JSON line: the key \"prompt\" appears twice" in proc.stderr


async def test_inputs_sharegpt_record_replayed_as_a_session_sends_its_user_turns(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    """turns = "dataset" with a ShareGPT record: each of its human turns, one per turn, the
    target's streamed text in place of the record's gpt turns (ShareGPT records gave one-turn
    sessions: only their first human turn was read)."""
    recs = json.loads(SHAREGPT.read_text(encoding="utf-8"))
    (tmp_path / "s.json").write_text(json.dumps(recs[:1]), encoding="utf-8")
    prof = _profile(tmp_path, "s.json", "max_tokens = 8\nsession = { turns = 'dataset' }\n")
    prof.write_text(prof.read_text(encoding="utf-8").replace("[load]", '[target]\nurl = "http://127.0.0.1:9"\n[load]'),
                    encoding="utf-8")
    prof.write_text(prof.read_text(encoding="utf-8").replace("requests = 10", "requests = 3"), encoding="utf-8")
    seen: list[tuple[str, bytes, httpx.Headers]] = []  # (URL, body, headers) of each request
    transport = fake_transport(Plan(head_s=0.5, gaps_s=(0.25, 0.25)), seen)
    lines: list[dict[str, Any]] = []
    await _runner.LoadRunner(load_profile(prof), "http://127.0.0.1:9", Recorder(["s"]), Recorder(["s"]),
                             on_stream=lines.append, transport_factory=transport).run()
    assert [(x["session"], x["turn"]) for x in lines] == [("0-s-0", 1), ("0-s-0", 2), ("0-s-0", 3)]
    msgs = [json.loads(body)["messages"] for _, body, _ in seen]
    users = [t["value"] for t in recs[0]["conversations"] if t["from"] == "human"]
    assert msgs[2] == [{"role": "user", "content": users[0]}, {"role": "assistant", "content": "hihi"},
                       {"role": "user", "content": users[1]}, {"role": "assistant", "content": "hihi"},
                       {"role": "user", "content": users[2]}]
    assert [len(m) for m in msgs] == [1, 3, 5]


@pytest.mark.slow
def test_inputs_sharegpt_sessions_on_the_emulator_carry_the_streamed_text(tmp_path: Path) -> None:
    """On the embedded emulator: every record with a human turn first is a session of its
    human turns; each turn's prompt, as the emulator counted it, is the record's human
    turns so far with the text the emulator streamed for the earlier turns between them."""
    from hopbench.driver._single import run_profile

    shutil.copy(SHAREGPT, tmp_path / "s.json")
    prof = _profile(tmp_path, "s.json", "max_tokens = 16\nsession = { turns = 'dataset' }\n",
                    head="")
    text = prof.read_text(encoding="utf-8").replace("requests = 10", "requests = 8")
    prof.write_text(text + "[target]\nembedded = true\n[emulator]\nttft_ms = 1\ntokens_per_s = 5000\n"
                           "output_tokens = 6\nseed = 2\n", encoding="utf-8")
    outcome = run_profile(load_profile(prof), out_dir=tmp_path / "run")
    assert outcome.summary["scopes"]["s"]["counters"]["completed"] == 8, outcome.summary["scopes"]["s"]["counters"]
    streams = [json.loads(x) for x in (tmp_path / "run" / "streams.jsonl").read_text().splitlines()]
    truth = {r["request_id"]: r for r in map(json.loads, (tmp_path / "run" / "ground_truth.jsonl")
                                              .read_text().splitlines())}
    by_session: dict[str, list[dict[str, Any]]] = {}
    for x in sorted(streams, key=lambda x: (x["session"], x["turn"])):
        by_session.setdefault(x["session"], []).append(x)
    # each record with a human turn first: (system text, its human turns; two in a row are one)
    records = [("", ["Summarize the plot of Hamlet in two sentences.", "Now in one sentence.",
                     "And in three words?"]),
               ("You are terse.", ["What is 2+2?"]), ("", ["Name three primes."]), ("", ["Is it raining in Oslo?"]),
               ("", ["Capital of France?"]), ("", ["First part of my question.\nSecond part: what is a monad?"])]

    def replays(session: list[dict[str, Any]], system: str, turns: list[str]) -> bool:
        """The emulator's count of each turn's prompt is that of the record's human turns so
        far with the text it streamed for the earlier turns between them."""
        if len(turns) != len(session):
            return False
        msgs: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        for k, x in enumerate(session):
            msgs.append({"role": "user", "content": turns[k]})
            if truth[x["id"]]["input_tokens"] != input_tokens_of({"messages": msgs}):
                return False
            msgs.append({"role": "assistant", "content": truth[x["id"]]["text"]})
        return True

    assert sorted(len(s) for s in by_session.values()) == [1, 1, 1, 1, 1, 3]
    for session in by_session.values():
        assert all(truth[x["id"]]["end"] == "completed" and truth[x["id"]]["text"] for x in session)
        assert any(replays(session, system, turns) for system, turns in records), session


def test_inputs_azure_csv_trace_is_read_relative_to_its_first_row(tmp_path: Path) -> None:
    """Azure's LLM inference trace (CSV) read as a trace said only "Expecting value (column 1)":
    it is read (times after the first row's, ContextTokens in, GeneratedTokens out), plain or
    gzip-compressed; a bad row names its line; another CSV says what a trace is."""
    path = DATA / "azure_llm_trace_shape.csv"
    want = [(0.0, 374, 44, (), 2, None), (4314.579, 396, 109, (), 3, None), (4314.579, 879, 31, (), 4, None),
            (5319.41, 91, 2, (), 5, None)]
    assert [(e.t_ms, e.input_tokens, e.output_tokens, e.hash_ids, e.line, e.scenario)
            for e in read_trace(path)] == want
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(path.read_bytes()))
    assert [(e.t_ms, e.input_tokens, e.output_tokens, e.hash_ids, e.line, e.scenario)
            for e in read_trace(tmp_path / "a.csv.gz")] == want
    head = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.004676+00:00,10,4\n"
    for row, words in [("2024-05-10T00:00:01Z,10,4", None),
                       ("2024-05-10 00:00:00,10,4", "timestamps out of order: 2024-05-10 00:00:00 after "
                                                    "2024-05-10 00:00:00.004676+00:00 (line 2)"),
                       ("2024-05-10 00:00:01,-3,4", "ContextTokens: expected an integer >= 0, got '-3'"),
                       ("2024-05-10 00:00:01,10,4.5", "GeneratedTokens: expected an integer >= 0, got '4.5'"),
                       ("2024-05-10 00:00:01,2000001,4", "ContextTokens: expected at most 2,000,000 tokens"),
                       ("5/10/2024 00:00,10,4", "TIMESTAMP: expected a date and time such as"),
                       (",10,4", "TIMESTAMP: expected a date and time such as"),
                       ("2024-05-10 00:00:01.²,10,4", "TIMESTAMP: expected a date and time such as"),
                       ("2024-05-10 00:00:01,²,4", "ContextTokens: expected an integer >= 0, got '²'"),
                       ("2024-05-10 00:00:01,10", "expected 3 cells (TIMESTAMP,ContextTokens,GeneratedTokens)")]:
        (tmp_path / "b.csv").write_text(head + row + "\n", encoding="utf-8")
        if words is None:
            assert [e.t_ms for e in read_trace(tmp_path / "b.csv")] == [0.0, 995.324]
            continue
        with pytest.raises(ProfileError) as err:
            read_trace(tmp_path / "b.csv")
        assert str(err.value).startswith(f"{tmp_path / 'b.csv'}:3: Azure trace row: ") and words in str(err.value), \
            str(err.value)
    (tmp_path / "c.csv").write_text("ts,in,out\n1,2,3\n", encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        read_trace(tmp_path / "c.csv")
    assert str(err.value).startswith(f"{tmp_path / 'c.csv'}:1: broken JSON line: ") and \
        "or a CSV file whose first line is Azure's header TIMESTAMP,ContextTokens,GeneratedTokens" in str(err.value)


@pytest.mark.parametrize(("data", "words"), [
    ({"data": [{"conversations": [{"from": "human", "value": "a"}]}] * 3},
     'lines: its key "data" holds an array of 3 objects: make that array the file'),
    ({"conversations": [{"from": "human", "value": "a"}]}, "lines: write it on one line (JSONL), or as a JSON array"),
])
def test_inputs_pretty_printed_json_object_says_what_a_dataset_is(tmp_path: Path, data: dict[str, Any],
                                                                   words: str) -> None:
    """A pretty-printed object (one record, or records under a key, as some exports write them)
    was "broken JSON line: Expecting property name enclosed in double quotes (column 2)"."""
    text = json.dumps(data, indent=2)
    (tmp_path / "d.json").write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, "d.json", "max_tokens = 8\n"))
    assert str(err.value).startswith(f"{tmp_path / 'd.json'}:1: expected a JSON array of records, or one record per "
                                     f"line (JSONL); the file is one JSON object over {text.count(chr(10)) + 1} ") \
        and words in str(err.value), \
        str(err.value)


def test_inputs_dataset_note_of_one_record_is_singular(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text((DATA / "anthropic_messages_shape.jsonl").read_text().splitlines()[0] + "\n",
                                      encoding="utf-8")
    note = load_profile(_profile(tmp_path, "a.jsonl", "max_tokens = 8\n", proto="messages")).scenarios[0].dataset_note
    assert note == "a.jsonl: 1 record, 1 with content blocks sent as their text only (image left out: record 1, line 1)"


@pytest.mark.parametrize(("record", "keys"), [
    # the shape of lmsys-chat-1m's records, and of Alpaca's
    ({"conversation_id": "c1", "model": "vicuna-13b", "conversation": [{"role": "user", "content": "hi"}], "turn": 1},
     '"conversation", "conversation_id", "model", "turn"'),
    ({"instruction": "Give three tips.", "input": "", "output": "1. Sleep."}, '"input", "instruction", "output"'),
])
def test_inputs_record_of_another_shape_names_its_keys(tmp_path: Path, record: dict[str, Any], keys: str) -> None:
    """A record that format = "auto" took for a plain prompt (no "conversations", no "messages")
    said only 'expected a JSON string or an object with a string "prompt"'."""
    (tmp_path / "d.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, "d.jsonl", "max_tokens = 8\n"))
    assert str(err.value).startswith(f"{tmp_path / 'd.jsonl'}:1: prompts record 1: ") and \
        f"the record's keys are {keys} (a ShareGPT record has \"conversations\"" in str(err.value), str(err.value)


def test_inputs_azure_csv_trace_profile_plans_its_replay(tmp_path: Path) -> None:
    shutil.copy(DATA / "azure_llm_trace_shape.csv", tmp_path / "a.csv")
    (tmp_path / "p.toml").write_text('[run]\nseed = 1\n[load]\nmode = "trace"\ntrace = "a.csv"\nspeedup = 2\n'
                                     '[target]\nurl = "http://127.0.0.1:9"\n[[scenario]]\nname = "s"\n'
                                     'protocol = "chat"\nmodel = "m"\n', encoding="utf-8")
    spec = load_profile(tmp_path / "p.toml").load.trace
    assert spec is not None and len(spec.entries) == 4
    assert [off for off, _, _ in spec.arrivals()][:4] == [0, 2_157_289_500, 2_157_289_500, 2_659_705_000]


@pytest.mark.parametrize(("head", "kind"), [
    (b"PAR1\x15\x04\x15\x00\xff\xfe", "a Parquet file (export it as JSON lines"),  # how HF hubs ship datasets
    (b"BZh91AY&SY\xff\xfe", "a bzip2 file (bunzip2 it)"),
    (b"\x28\xb5\x2f\xfd\xff\xfe", "a zstd file (unzstd it)"),
])
def test_inputs_binary_file_says_what_it_is(tmp_path: Path, head: bytes, kind: str) -> None:
    """A Parquet or otherwise compressed file said only "not UTF-8 text (byte 9 of the line)"."""
    (tmp_path / "d.bin").write_bytes(head + b"\x00" * 16)
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, "d.bin", "max_tokens = 8\n"))
    assert "the dataset is not UTF-8 text (byte" in str(err.value) and f": it is {kind}" in str(err.value), \
        str(err.value)
    with pytest.raises(ProfileError) as err:
        read_trace(tmp_path / "d.bin")
    assert "the trace is not UTF-8 text (byte" in str(err.value) and f": it is {kind}" in str(err.value) and \
        "hopbench reads JSON lines or Azure's CSV" in str(err.value), str(err.value)


@pytest.mark.parametrize("indent", [None, 2])
def test_inputs_trace_written_as_a_json_array_says_what_a_trace_is(tmp_path: Path, indent: int | None) -> None:
    """json.dump(list_of_requests) said "expected a JSON object, got list" or "Expecting value"."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"timestamp_ms": 1, "input_tokens": 5, "output_tokens": 5}] * 2, indent=indent),
                    encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}:1: ") and str(err.value).endswith(
        "; a trace is one JSON object per line (JSONL), not a JSON array: write each request on its own line"), \
        str(err.value)


def test_inputs_validate_says_what_each_dataset_gave(tmp_path: Path) -> None:
    """`hopbench validate` (the command to check inputs without sending) said only "ok": the
    records a dataset skipped showed only at `run`."""
    shutil.copy(SHAREGPT, tmp_path / "s.json")
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate",
                           str(_profile(tmp_path, "s.json", "max_tokens = 8\n"))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == f"{tmp_path / 'p.toml'}: ok\n", (proc.stdout, proc.stderr)
    assert proc.stderr == ('hopbench: scenario s: dataset s.json: 8 records, 2 skipped (no user turn first: '
                           'record 2 (id "i6IyJda_0"), line 31 and 1 more)\n'), proc.stderr
