"""Request bodies pinned to the byte: one golden file per request encoder and protocol.

Two roads lead from a profile to a request body: a scenario's plain prompts
(``prompts`` / ``prompts_file``, each line sent as written) and a scenario with
workload keys (its pool: ``replacement``, ``prompt_pool``, a dataset, ...),
whose conversations are typed (system, user and assistant text). The same
prompts file goes down both roads here, for each protocol, and every body is
compared byte for byte (key order, separators, non-ASCII) with
``tests/data/request_bodies/<road>.<protocol>.golden.json``.

Where the roads differ the goldens say so; the API references decide what is
right (OpenAI "Create chat completion" and "Create a model response",
Anthropic "Messages"). Two bodies of the plain road changed when the two
encoders became one (``protocols._requests.encode_body``), both wrong by the
reference: a Messages body carried a ``system`` message inside ``messages``
(now the top-level ``system``), a Responses body a ``"text"`` content part
(now ``"input_text"``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopbench.config._profile import load_profile
from hopbench.protocols._requests import DEFAULT_PATHS, Message, asks_usage, auth_style, encode_body

DATA = Path(__file__).parent / "data" / "request_bodies"
PROTOCOLS = ("chat", "responses", "messages")
ROADS = ("prompts", "pool")

#: one prompts_file: a string, {"prompt"}, one user message, a conversation with a system
#: prompt and history, text blocks (the roads' conversions differ on the last three)
LINES = [
    "Say hi in wörds.",
    {"prompt": "two"},
    {"messages": [{"role": "user", "content": "3"}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "u1"},
                  {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "blocks"}]}]},
]


def _bodies(tmp_path: Path, protocol: str, road: str, usage: str = "") -> list[str]:
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in LINES),
                                      encoding="utf-8")
    pool = "replacement = true\n" if road == "pool" else ""  # a workload key: the pool's road
    (tmp_path / "p.toml").write_text(
        "[run]\nrequests = 1\n[load]\nconcurrency = 1\n[target]\nembedded = true\n[[scenario]]\n"
        f'protocol = "{protocol}"\nmodel = "m"\nmax_tokens = 7\nprompts_file = "p.jsonl"\n'
        f"extra = {{ temperature = 0 }}\n{usage}{pool}", encoding="utf-8")
    return [b.decode("utf-8") for b in load_profile(tmp_path / "p.toml").scenarios[0].bodies]


def _golden(road: str, protocol: str) -> dict[str, list[str]]:
    return json.loads((DATA / f"{road}.{protocol}.golden.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("road", ROADS)
def test_request_bodies_match_the_goldens(tmp_path: Path, road: str, protocol: str) -> None:
    golden = _golden(road, protocol)
    assert _bodies(tmp_path, protocol, road) == golden["include_usage"]
    if protocol == "chat":
        assert _bodies(tmp_path, protocol, road, "include_usage = false\n") == golden["no_usage"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_bodies_roads_agree_on_plain_prompts(protocol: str) -> None:
    # a string, {"prompt"}: one user turn of text, the same bytes on either road
    prompts, pool = _golden("prompts", protocol), _golden("pool", protocol)
    assert prompts["include_usage"][:2] == pool["include_usage"][:2]


def test_request_bodies_verbatim_system_blocks_are_lifted_for_messages() -> None:
    conv = [{"role": "developer", "content": [{"type": "text", "text": "d"}]}, {"role": "system", "content": "s"},
            {"role": "user", "content": "u"}, "not an object"]
    body = json.loads(encode_body("messages", "m", conv, 3, True, {}))
    assert body["system"] == [{"type": "text", "text": "d"}, {"type": "text", "text": "s"}]
    assert body["messages"] == [{"role": "user", "content": "u"}, "not an object"]
    assert json.loads(encode_body("chat", "m", conv, 3, True, {}))["messages"] == conv  # chat: as written


def test_request_bodies_verbatim_assistant_parts_are_output_text_for_responses() -> None:
    conv = [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "r"}]}]
    (item,) = json.loads(encode_body("responses", "m", conv, 3, False, {}))["input"]
    assert item["content"] == [{"type": "output_text", "text": "a"}, {"type": "refusal", "refusal": "r"}]
    assert conv[0]["content"][0]["type"] == "text"  # the profile's own data is left alone


def test_request_bodies_extra_is_merged_last() -> None:
    body = encode_body("chat", "m", (Message("user", "u"),), 3, True, {"max_tokens": 9, "stream": False})
    assert body == (b'{"model":"m","messages":[{"role":"user","content":"u"}],"stream":false,"max_tokens":9,'
                    b'"stream_options":{"include_usage":true}}')


def test_request_bodies_asks_usage_only_chat_with_include_usage() -> None:
    on = encode_body("chat", "m", (Message("user", "u"),), 3, True, {})
    off = encode_body("chat", "m", (Message("user", "u"),), 3, False, {})
    assert asks_usage("chat", on) and not asks_usage("chat", off)
    assert not asks_usage("responses", on) and not asks_usage("messages", on)
    assert not asks_usage("chat", b"not json") and not asks_usage("chat", b"[1]")
    assert not asks_usage("chat", b'{"stream_options": {"include_usage": 1}}')
    assert not asks_usage("nope", on)


def test_request_bodies_auth_style_per_protocol() -> None:
    assert [auth_style(p, "auto") for p in PROTOCOLS] == ["bearer", "bearer", "x-api-key"]
    assert auth_style("messages", "bearer") == "bearer" and auth_style("chat", "x-api-key") == "x-api-key"
    assert auth_style("chat", "none") is None
    assert list(DEFAULT_PATHS) == list(PROTOCOLS)
