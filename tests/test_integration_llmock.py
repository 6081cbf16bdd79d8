"""Integration: ``hopbench run`` against a real third-party server, llmock 0.2.2.

llmock (PyPI, see docs/real-servers.md) serves all three protocols,
with HTTP error and stream-fault injection and an admin API that queues exact
behaviours. It is installed into its own virtual environment under the test
cache (``tests/_servers.py``; first install about 35 s, then reused), started
on a free 127.0.0.1 port, health-polled, and always stopped.

What is checked, through the real entry point (``python -m hopbench run``):

- plain, all three protocols in one run: every stream completes, with usage,
  TTFT and inter-token samples;
- exact, per protocol, with queued behaviours (3 x 429, 2 x disconnect and
  2 x truncate after 3 chunks, a fixed reply): the outcome counters equal what
  was queued, and the output tokens equal completed x the reply's usage;
- random faults (``--error-rate 429=0.2 --stream-fault disconnect=0.1
  --stream-fault truncate=0.1``, a second instance): 429s and truncations are
  counted, and in every scope the outcomes add up to the streams started;
- one stream per protocol fetched with httpx and decoded with
  ``decode_stream``: text, stop reason and usage exactly.
- multi-turn sessions, per protocol: each turn's body carries the turn
  before, the text llmock streamed back and a new user message; TTFT per
  turn; llmock ignores max_tokens and the run warns of it.

If llmock cannot be installed (no registry) the tests fail, unless
``HOPBENCH_SKIP_NETWORK_INSTALL=1`` is set (then they are skipped).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _servers import LLMOCK_REQUIREMENT, ServerProcess, ensure_venv, free_port

from hopbench.protocols import decode_stream

#: a real third-party server in its own virtual environment (installed on first use): end to end
pytestmark = pytest.mark.slow

OUTCOMES = ("completed", "failed", "truncated", "timeout", "http_error", "connect_error", "cancelled")
MODELS = {"chat": "gpt-4o-mini", "responses": "gpt-4o-mini", "messages": "claude-sonnet-4-5"}
MESSAGES_PATH = "/anthropic/v1/messages"  # llmock's Anthropic prefix; /v1/messages is 404
REPLY = "Hop bench 測試 streams fine."
REPLY_OUTPUT_TOKENS = 6  # llmock's own estimate for REPLY, checked in test_llmock_decode_*
STOP_REASON = {"chat": "stop", "responses": "completed", "messages": "end_turn"}
# The 429 error code as each API spells it: OpenAI ``error.code``, Anthropic ``error.type``.
CODE_429 = {"chat": "rate_limit_exceeded", "responses": "rate_limit_exceeded",
            "messages": "rate_limit_error"}


def _start(bin_dir: Path, log: Path, *extra: str) -> ServerProcess:
    port = free_port()
    argv = [str(bin_dir / "llmock"), "serve", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--tool-mode", "off", *extra]
    server = ServerProcess(argv, f"http://127.0.0.1:{port}/health", log, start_timeout_s=30)
    server.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return server


@pytest.fixture(scope="module")
def llmock_bin() -> Path:
    return ensure_venv("llmock-0.2.2", LLMOCK_REQUIREMENT)


@pytest.fixture(scope="module")
def llmock(llmock_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain llmock; yields its base URL."""
    with _start(llmock_bin, tmp_path_factory.mktemp("llmock") / "llmock.log") as server:
        yield server.base_url  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def llmock_faulty(llmock_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An llmock with random 429s, disconnects and truncations; yields its base URL."""
    log = tmp_path_factory.mktemp("llmock-faulty") / "llmock.log"
    with _start(llmock_bin, log, "--error-rate", "429=0.2", "--stream-fault", "disconnect=0.1",
                "--stream-fault", "truncate=0.1") as server:
        yield server.base_url  # type: ignore[attr-defined]


@pytest.fixture
def admin(llmock: str) -> Iterator[httpx.Client]:
    """llmock's admin API, reset before and after the test."""
    with httpx.Client(base_url=llmock, timeout=10) as client:
        client.post("/_llmock/reset").raise_for_status()
        yield client
        client.post("/_llmock/reset").raise_for_status()


def _queue(admin: httpx.Client, *behaviors: dict[str, Any]) -> None:
    admin.post("/_llmock/scenario", json={"behaviors": list(behaviors)}).raise_for_status()


def _profile(url: str, protocols: tuple[str, ...], requests: int, concurrency: int) -> str:
    scenarios = "".join(
        f'\n[[scenario]]\nname = "{p}"\nprotocol = "{p}"\nmodel = "{MODELS[p]}"\nmax_tokens = 32\n'
        + ("include_usage = true\n" if p == "chat" else "")
        for p in protocols)
    return f"""
[run]
name = "llmock"
requests = {requests}
seed = 5
grace_s = 10
[run.timeouts]
connect_s = 5
first_byte_s = 10
idle_s = 5
total_s = 20
[load]
concurrency = {concurrency}
[target]
url = "{url}"
[target.paths]
messages = "{MESSAGES_PATH}"
{scenarios}"""


def _run(hopbench_cli: Any, tmp_path: Path, text: str) -> dict[str, Any]:
    profile = tmp_path / "profile.toml"
    profile.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    proc = hopbench_cli(["run", str(profile), "--out", str(out), "--quiet"], timeout_s=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] is True
    return summary


def _counters(summary: dict[str, Any], scope: str = "all") -> dict[str, int]:
    return summary["scopes"][scope]["counters"]


def _metric_count(summary: dict[str, Any], scope: str, metric: str) -> int:
    m = summary["scopes"][scope]["metrics"].get(metric)
    return 0 if m is None else int(m["count"])


def _assert_outcomes_add_up(summary: dict[str, Any], scopes: tuple[str, ...], requests: int) -> None:
    total = 0
    for scope in (*scopes, "all"):
        c = _counters(summary, scope)
        assert sum(c.get(k, 0) for k in OUTCOMES) == c["started"], (scope, c)
        assert c.get("cancelled", 0) == 0, (scope, c)
        for outcome in ("http_error", "truncated", "timeout", "connect_error", "failed"):
            details = sum(v for k, v in c.items() if k.startswith(outcome + ".")
                          and not k.startswith("http_error_code."))
            assert details == c.get(outcome, 0), (scope, outcome, c)
        if scope != "all":
            total += c["started"]
    assert _counters(summary)["started"] == requests
    assert total == requests


@pytest.mark.slow
def test_llmock_run_plain_all_protocols_complete(llmock: str, admin: httpx.Client,
                                                 hopbench_cli: Any, tmp_path: Path) -> None:
    protocols = ("chat", "responses", "messages")
    summary = _run(hopbench_cli, tmp_path, _profile(llmock, protocols, 180, 8))
    _assert_outcomes_add_up(summary, protocols, 180)
    for p in protocols:
        c = _counters(summary, p)
        assert c["started"] >= 30, c  # weighted pick: each protocol well represented
        assert c["completed"] == c["started"], c
        assert c.get("no_usage", 0) == 0, c
        assert c["tokens.output.completed"] >= c["completed"], c
        assert c["tokens.input.completed"] >= c["completed"], c
        assert _metric_count(summary, p, "ttft") == c["completed"]
        assert _metric_count(summary, p, "e2e") == c["completed"]
        assert _metric_count(summary, p, "itl") > 0
    # summary["saturated"] is not asserted: on a shared CI machine other jobs
    # can stall the event loop > 25 ms, which is what that flag reports.


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
def test_llmock_run_queued_faults_counted_exactly(protocol: str, llmock: str, admin: httpx.Client,
                                                  hopbench_cli: Any, tmp_path: Path) -> None:
    # A fail ends the request and leaves the other behaviours queued (llmock's
    # ScenarioQueue), so each fault hits a different stream.
    _queue(admin,
           {"type": "fail", "status": 429, "retry_after": 1, "times": 3},
           {"type": "stream_fault", "kind": "disconnect", "after_chunks": 3, "times": 2},
           # llmock's truncate ends the HTTP body cleanly with no terminator
           # ([DONE] / response.completed / message_stop): per the OpenAI and
           # Anthropic streaming references that stream is incomplete, so
           # hopbench must count it truncated, not completed.
           {"type": "stream_fault", "kind": "truncate", "after_chunks": 3, "times": 2},
           {"type": "reply", "text": REPLY, "times": None})
    requests = 60
    summary = _run(hopbench_cli, tmp_path, _profile(llmock, (protocol,), requests, 4))
    _assert_outcomes_add_up(summary, (protocol,), requests)
    c = _counters(summary, protocol)
    assert c["http_error"] == 3 and c["http_error.429"] == 3, c
    assert c[f"http_error_code.{CODE_429[protocol]}"] == 3, c
    assert c["truncated"] == 4 and c["truncated.closed"] == 4, c
    assert c["completed"] == requests - 7, c
    assert c["tokens.output.completed"] == REPLY_OUTPUT_TOKENS * c["completed"], c
    assert c.get("tokens.output.broken", 0) == 0, c  # cut before any usage arrived
    assert _metric_count(summary, protocol, "ttft") >= c["completed"]
    assert _metric_count(summary, protocol, "e2e") == c["completed"]
    assert admin.get("/_llmock/scenario").json()["pending"] == [
        {"type": "reply", "text": REPLY, "tool_calls": [], "finish_reason": None, "times": None,
         "match": {}}]


@pytest.mark.slow
def test_llmock_run_random_faults_add_up(llmock_faulty: str, hopbench_cli: Any,
                                         tmp_path: Path) -> None:
    protocols = ("chat", "responses", "messages")
    requests = 180
    summary = _run(hopbench_cli, tmp_path, _profile(llmock_faulty, protocols, requests, 12))
    _assert_outcomes_add_up(summary, protocols, requests)
    c = _counters(summary)
    # P(no 429 in 180 requests at 0.2) = 0.8**180, about 3e-18: not flaky.
    assert c["http_error.429"] > 0, c
    assert c["truncated"] > 0, c
    assert c["completed"] > 0, c
    assert c["http_error"] == c["http_error.429"], c  # no other status was injected
    assert c["completed"] + c["truncated"] + c["http_error"] == requests, c


_REQUESTS = {
    "chat": ("/v1/chat/completions",
             {"model": MODELS["chat"], "messages": [{"role": "user", "content": "hi there"}],
              "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 32}),
    "responses": ("/v1/responses",
                  {"model": MODELS["responses"], "input": "hi there", "stream": True,
                   "max_output_tokens": 32}),
    "messages": (MESSAGES_PATH,
                 {"model": MODELS["messages"], "messages": [{"role": "user", "content": "hi there"}],
                  "stream": True, "max_tokens": 32}),
}


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
def test_llmock_decode_stream_text_and_usage_exact(protocol: str, admin: httpx.Client) -> None:
    _queue(admin, {"type": "reply", "text": REPLY, "times": 1})
    path, body = _REQUESTS[protocol]
    chunks: list[bytes] = []
    with admin.stream("POST", path, json=body, headers={"anthropic-version": "2023-06-01"}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks.extend(r.iter_raw())
    result = decode_stream(protocol, chunks)
    assert result.outcome == "completed", result
    assert result.text == REPLY
    assert result.stop_reason == STOP_REASON[protocol]
    assert result.output_tokens == REPLY_OUTPUT_TOKENS
    assert result.input_tokens == 2  # llmock's estimate for "hi there"
    assert result.anomalies == {}
    # the same bytes cut one byte at a time decode the same
    one_by_one = [bytes([b]) for b in b"".join(chunks)]
    assert decode_stream(protocol, one_by_one) == result


def _turn_messages(body: dict[str, Any]) -> list[tuple[str, str]]:
    """A request body's conversation as (role, text) pairs, system first, in any of the three shapes."""
    def text(c: Any) -> str:
        return c if isinstance(c, str) else "".join(b.get("text", "") for b in c)

    out = [("system", text(body[k])) for k in ("system", "instructions") if k in body]
    items = body["messages"] if "messages" in body else body["input"]
    if isinstance(items, str):
        return [*out, ("user", items)]
    return [*out, *((m["role"], text(m["content"])) for m in items)]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
def test_llmock_sessions_send_the_streamed_text_back_and_warn_of_max_tokens_ignored(
        protocol: str, llmock: str, admin: httpx.Client, hopbench_cli: Any, tmp_path: Path) -> None:
    """Multi-turn sessions against a real server: each turn's body is the turn before's, then
    the text llmock streamed for it, then a new user message; TTFT is recorded per turn. llmock
    ignores max_tokens (its reply is 6 tokens for max_tokens = 3): the run says so."""
    _queue(admin, {"type": "reply", "text": REPLY, "times": None})
    admin.delete("/_llmock/requests").raise_for_status()
    text = _profile(llmock, (protocol,), 9, 1).replace(
        "max_tokens = 32\n", "max_tokens = 3\ninput_tokens = 20\nsession = { turns = 3 }\n")
    summary = _run(hopbench_cli, tmp_path, text)
    bodies = [r["body"] for r in admin.get("/_llmock/requests").json()["requests"]]
    assert len(bodies) == 9
    for s in range(3):  # concurrency 1: the sessions' turns in order, one session after the other
        convs = [_turn_messages(b) for b in bodies[3 * s: 3 * s + 3]]
        assert [len(c) for c in convs] == [1, 3, 5], convs
        for before, after in zip(convs, convs[1:]):
            assert after[:len(before)] == before
            assert after[len(before)] == ("assistant", REPLY)  # what llmock streamed, as decoded
            assert after[-1][0] == "user" and len(after[-1][1].split()) == 20
    turns = summary["scopes"][protocol]["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert all(t["streams"] == t["completed"] == 3 and t["ttft_mean_ms"] > 0 for t in turns), turns
    means = [t["input_tokens_mean"] for t in turns]
    assert means[0] < means[1] < means[2], means  # the context grows turn by turn
    lengths = summary["scopes"][protocol]["lengths"]["output"]
    assert lengths["over_max"] == 9 and lengths["reported_mean"] == REPLY_OUTPUT_TOKENS, lengths
    assert any(w.startswith(f"scope {protocol}: max_tokens not honoured: 9 of 9 completed streams")
               for w in summary["warnings"]), summary["warnings"]
