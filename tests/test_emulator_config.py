"""EmulatorConfig validation and the pure, seeded request plans (no network)."""

from __future__ import annotations

import pytest

from hopbench._errors import ProfileError
from hopbench._toml import parse_toml
from hopbench.emulator import EmulatorConfig, VOCABULARY, input_tokens_of
from hopbench.emulator._behaviour import plan_request, request_rng

PROFILE = """\
[target]
kind = "embedded"

[emulator]
seed = 7
ttft_ms = 20
tokens_per_s = 100

[emulator.faults]
http_429 = 0.25
retry_after_s = 3

[emulator.models."claude-x"]
tokens_per_s = 5
think_time_ms = 1500

[emulator.models."claude-x".faults]
stall = 0.5
"""


def _emulator_table(text: str):  # type: ignore[no-untyped-def]
    return parse_toml(text, "profiles/x.toml").root().table("emulator")


def test_config_defaults_match_the_issue() -> None:
    c = EmulatorConfig.from_mapping({})
    b = c.default
    assert (b.ttft_ms, b.ttft_jitter_ms, b.tokens_per_s, b.output_tokens) == (200, 0, 50, 64)
    assert (b.think_time_ms, b.keepalive_interval_s, c.seed) == (0, 10, 0)
    assert all(p == 0 for _, p in b.faults.probabilities())


def test_config_per_model_tables_inherit_and_merge_faults() -> None:
    c = EmulatorConfig.from_table(_emulator_table(PROFILE))
    assert c.seed == 7
    x = c.behaviour_for("claude-x")
    assert (x.tokens_per_s, x.think_time_ms, x.ttft_ms) == (5, 1500, 20)
    assert (x.faults.stall, x.faults.http_429, x.faults.retry_after_s) == (0.5, 0.25, 3)
    other = c.behaviour_for("unknown-model")
    assert (other.tokens_per_s, other.faults.stall) == (100, 0)


def test_config_error_names_file_line_and_key() -> None:
    text = PROFILE.replace("http_429 = 0.25", "http_429 = 2")
    with pytest.raises(ProfileError) as info:
        EmulatorConfig.from_table(_emulator_table(text))
    assert str(info.value) == (
        "profiles/x.toml:10: emulator.faults.http_429: expected a number from 0 to 1, got 2")


@pytest.mark.parametrize("text, key", [
    ("[emulator]\nttft_msec = 3\n", "emulator.ttft_msec"),
    ('[emulator.models."m"]\nseed = 3\n', 'emulator.models.m.seed'),
    ("[emulator.faults]\nexplode = 0.1\n", "emulator.faults.explode"),
])
def test_config_rejects_unknown_keys(text: str, key: str) -> None:
    with pytest.raises(ProfileError, match="unknown key") as info:
        EmulatorConfig.from_table(_emulator_table(text))
    assert info.value.key == key


def test_config_rejects_fault_probabilities_over_one() -> None:
    with pytest.raises(ProfileError, match="sum to at most 1, got 1.2"):
        EmulatorConfig.from_mapping({"faults": {"http_500": 0.6, "disconnect": 0.6}})


def test_config_to_mapping_round_trips() -> None:
    c = EmulatorConfig.from_table(_emulator_table(PROFILE.replace("seed = 7", 'seed = 7\napi_key = "k"')))
    again = EmulatorConfig.from_mapping(c.to_mapping())
    assert again == c
    assert again.api_key == "k"


def test_plan_same_seed_and_order_gives_same_plan() -> None:
    b = EmulatorConfig.from_mapping({"ttft_jitter_ms": 50, "token_jitter_ms": 5,
                                     "faults": {"midstream_error": 0.3, "stall": 0.3}}).default
    kw = dict(protocol="chat", stream=True, max_tokens=None, tool_name=None)
    first = [plan_request(b, request_rng(1, i), **kw) for i in range(20)]  # type: ignore[arg-type]
    second = [plan_request(b, request_rng(1, i), **kw) for i in range(20)]  # type: ignore[arg-type]
    other = [plan_request(b, request_rng(2, i), **kw) for i in range(20)]  # type: ignore[arg-type]
    assert first == second
    assert first != other


def test_plan_max_tokens_caps_output_with_length_finish() -> None:
    b = EmulatorConfig.from_mapping({"output_tokens": 30, "reasoning_tokens": 4}).default
    p = plan_request(b, request_rng(0, 0), protocol="messages", stream=True, max_tokens=10,
                     tool_name=None)
    assert (p.n_tokens, len(p.reasoning), len(p.text), p.finish) == (10, 4, 6, "length")
    assert len(p.gaps_ns) == 9
    q = plan_request(b, request_rng(0, 0), protocol="messages", stream=True, max_tokens=30,
                     tool_name=None)
    assert (q.n_tokens, q.finish) == (30, "stop")


def test_plan_tool_call_arguments_join_to_json() -> None:
    b = EmulatorConfig.from_mapping({"tool_call_probability": 1, "output_tokens": 12,
                                     "tool_call_tokens": 5}).default
    p = plan_request(b, request_rng(0, 0), protocol="chat", stream=True, max_tokens=None,
                     tool_name="search")
    import json
    assert (len(p.tool_args), p.finish, p.tool_name, len(p.text)) == (5, "tool_calls", "search", 7)
    assert json.loads("".join(p.tool_args))["limit"] == 10
    none = plan_request(b, request_rng(0, 0), protocol="chat", stream=True, max_tokens=None,
                        tool_name=None)
    assert (none.tool_args, none.finish) == ((), "stop")


def test_plan_fault_frequency_follows_probability_and_applicability() -> None:
    b = EmulatorConfig.from_mapping({"faults": {"http_429": 0.2, "omit_done": 0.3}}).default
    n = 2000
    chat = [plan_request(b, request_rng(5, i), protocol="chat", stream=True, max_tokens=None,
                         tool_name=None).fault for i in range(n)]
    assert 0.17 < chat.count("http_429") / n < 0.23
    assert 0.27 < chat.count("omit_done") / n < 0.33
    msgs = [plan_request(b, request_rng(5, i), protocol="messages", stream=True, max_tokens=None,
                         tool_name=None).fault for i in range(n)]
    assert "omit_done" not in msgs  # chat only: draws as no fault elsewhere
    assert msgs.count("http_429") == chat.count("http_429")


def test_plan_ttft_distribution_and_think_time() -> None:
    b = EmulatorConfig.from_mapping({"ttft_ms": 100, "ttft_jitter_ms": 20,
                                     "ttft_distribution": "normal", "think_time_ms": 50}).default
    firsts = [plan_request(b, request_rng(0, i), protocol="chat", stream=True, max_tokens=None,
                           tool_name=None).first_ns for i in range(400)]
    mean_ms = sum(firsts) / len(firsts) / 1e6
    assert 145 < mean_ms < 155
    assert min(firsts) != max(firsts)


def test_vocabulary_mixes_ascii_and_multibyte() -> None:
    assert any(t.isascii() for t in VOCABULARY)
    assert any(len(t.encode()) > len(t) for t in VOCABULARY)


def test_input_tokens_counts_prompt_chars_over_four() -> None:
    assert input_tokens_of({"messages": [{"role": "user", "content": "x" * 9}]}) == 3
    assert input_tokens_of({"input": "abcd"}) == 1
    assert input_tokens_of({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "y" * 8}]}], "instructions": "zzzz"}) == 3
    assert input_tokens_of({"system": "s" * 4, "messages": []}) == 1
    assert input_tokens_of({}) == 1
