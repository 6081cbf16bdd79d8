"""The emulator on 127.0.0.1 against the official SDKs and raw httpx, checked against ground truth.

Each test starts its own emulator exactly as a run's embedded target does (``EmbeddedEmulator``:
a child process, uvicorn, port 0) and talks to it with blocking clients, so the SDKs run
exactly as users run them against the server hopbench really uses. The last tests cover the
in-process ``serve()`` (asyncio only).
"""

from __future__ import annotations

import asyncio
import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import openai
import pytest

from hopbench import UsageError
from hopbench.emulator import (
    STREAM_INTERRUPTED,
    EmbeddedEmulator,
    EmulatorConfig,
    read_ground_truth,
    serve,
)

PROMPT = "請用 200 字介紹串流輸出 please"  # 22 chars -> 6 input tokens


class Emulator:
    """An embedded emulator (child process) for one test; stops cleanly or fails the test."""

    def __init__(self, config: dict[str, Any], record_path: Path) -> None:
        self.config = EmulatorConfig.from_mapping(config)
        self.record_path = record_path
        self.url = ""
        self._closers: list[Any] = []
        # generous stop: a SIGKILL under a loaded CI machine would read as a failed graceful stop
        self._child = EmbeddedEmulator(self.config, record_path=record_path, stop_timeout_s=30.0)

    def __enter__(self) -> "Emulator":
        self._child.__enter__()
        self.url = self._child.base_url
        self.http = httpx.Client(trust_env=False, timeout=10)
        self.sent_mono_s = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()
        for close in self._closers:
            close()
        self._child.__exit__(None, None, None)
        assert self._child.exit_status == 0, self.log()  # SIGTERM is a graceful stop

    def log(self) -> str:
        """The child's output so far."""
        assert self._child.log_path is not None
        return self._child.log_path.read_text(encoding="utf-8", errors="replace")

    def truth(self, n: int) -> list[dict[str, Any]]:
        """The ground truth once ``n`` records are written (the last write trails the body)."""
        deadline = time.monotonic() + 30  # returns as soon as they are there
        while True:
            lines = read_ground_truth(self.record_path) if self.record_path.exists() else []
            if len(lines) >= n or time.monotonic() > deadline:
                assert len(lines) == n, lines
                return lines
            time.sleep(0.01)

    def openai(self, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "k"),
                             max_retries=0, http_client=self.http, **kw)

    def anthropic(self, **kw: Any) -> anthropic.Anthropic:
        client = anthropic.Anthropic(base_url=self.url, api_key=kw.pop("api_key", "k"),
                                     max_retries=0, **kw,
                                     http_client=anthropic.DefaultHttpxClient(trust_env=False))
        self._closers.append(client.close)
        return client

    def raw(self, path: str, body: dict[str, Any], timeout_s: float = 10
            ) -> tuple[list[tuple[float, bytes]], BaseException | None, float]:
        """POST and read the SSE body: ([(t_s since send, block)], error, headers t_s).

        The send's stamp is kept in ``sent_mono_s`` (``time.monotonic``: CLOCK_MONOTONIC,
        the clock of the ground truth's ``t0_mono_ns``, so a read joins the emulator's record)."""
        blocks: list[tuple[float, bytes]] = []
        buf = b""
        t0 = self.sent_mono_s = time.monotonic()
        err: BaseException | None = None
        t_headers = 0.0
        try:
            with self.http.stream("POST", self.url + path, json=body,
                                  timeout=httpx.Timeout(10, read=timeout_s)) as r:
                t_headers = time.monotonic() - t0
                for chunk in r.iter_raw():
                    buf += chunk
                    while b"\n\n" in buf:
                        block, buf = buf.split(b"\n\n", 1)
                        blocks.append((time.monotonic() - t0, block))
        except httpx.HTTPError as exc:
            err = exc
        return blocks, err, t_headers


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "truth.jsonl"


FAST = {"ttft_ms": 5, "tokens_per_s": 0, "output_tokens": 12}


def _chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": True,
            **extra}


def test_emulator_openai_chat_stream_text_and_usage_match_ground_truth(record: Path) -> None:
    with Emulator({**FAST, "seed": 3}, record) as emu:
        client = emu.openai()
        text, usage, finish = [], None, None
        for chunk in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": PROMPT}], stream=True,
                stream_options={"include_usage": True}, max_tokens=9):
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                            stream=True))
        gt, plain = emu.truth(2)
    assert "".join(text) == gt["text"] and gt["text"]
    assert any(len(c.encode()) > 1 for c in gt["text"]) or gt["text"].isascii()
    assert usage is not None
    assert (usage.completion_tokens, usage.prompt_tokens) == (gt["output_tokens"], 6)
    assert gt["output_tokens"] == gt["content_events"] == gt["output_tokens_sent"] == 9
    assert (finish, gt["finish_reason"], gt["end"], gt["protocol"]) == (
        "length", "length", "completed", "chat")
    assert gt["events"] == 1 + 9 + 3  # role chunk, deltas, finish chunk, usage chunk, [DONE]
    assert len(gt["gaps_ns"]) == 8
    assert plain["output_tokens"] is None and plain["output_tokens_sent"] == 12  # no include_usage


@pytest.mark.slow
def test_emulator_openai_responses_stream_matches_ground_truth(record: Path) -> None:
    with Emulator({**FAST, "reasoning_tokens": 3}, record) as emu:
        client = emu.openai()
        deltas, completed, types = [], None, []
        for event in client.responses.create(model="m", input=PROMPT, stream=True):
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            if event.type == "response.completed":
                completed = event.response
        with client.responses.stream(model="m", input=PROMPT) as stream:
            final = stream.get_final_response()
        gt, gt2 = emu.truth(2)
    assert "".join(deltas) == gt["text"]
    assert completed is not None and completed.usage is not None
    assert (completed.usage.output_tokens, completed.usage.input_tokens) == (12, 6)
    assert gt["output_tokens"] == gt["content_events"] == 12 and len(gt["reasoning_text"]) > 0
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.reasoning_text.delta") == 3
    assert final.output_text == gt2["text"]
    assert final.usage is not None and final.usage.output_tokens == 12


def test_emulator_anthropic_messages_stream_matches_ground_truth(record: Path) -> None:
    with Emulator({**FAST, "reasoning_tokens": 2}, record) as emu:
        client = emu.anthropic()
        with client.messages.stream(model="claude-x", max_tokens=100,
                                    messages=[{"role": "user", "content": PROMPT}]) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        gt = emu.truth(1)[0]
    assert streamed == gt["text"]
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == gt["reasoning_text"]  # type: ignore[union-attr]
    assert (final.usage.output_tokens, final.usage.input_tokens) == (12, 6)
    assert final.stop_reason == "end_turn" and gt["protocol"] == "messages"


def test_emulator_tool_calls_reach_each_sdk(record: Path) -> None:
    cfg = {**FAST, "tool_call_probability": 1, "tool_call_tokens": 4}
    fn = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    with Emulator(cfg, record) as emu:
        with emu.openai().chat.completions.stream(
                model="m", messages=[{"role": "user", "content": PROMPT}], tools=[fn]) as s:
            chat = s.get_final_completion()
        with emu.openai().responses.stream(model="m", input=PROMPT, tools=[
                {"type": "function", "name": "search", "parameters": {"type": "object"}}]) as s:
            resp = s.get_final_response()
        with emu.anthropic().messages.stream(
                model="m", max_tokens=50, messages=[{"role": "user", "content": PROMPT}],
                tools=[{"name": "search", "input_schema": {"type": "object"}}]) as s:
            msg = s.get_final_message()
        truths = emu.truth(3)
    call = chat.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert chat.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "search"  # type: ignore[union-attr]
    assert call.function.arguments == truths[0]["tool_arguments"]  # type: ignore[union-attr]
    fc = [o for o in resp.output if o.type == "function_call"][0]
    assert json.loads(fc.arguments)["limit"] == 10  # type: ignore[union-attr]
    assert msg.stop_reason == "tool_use" and msg.content[-1].input["limit"] == 10  # type: ignore[union-attr]
    assert all(t["content_events"] == 12 for t in truths)


def test_emulator_non_streaming_bodies(record: Path) -> None:
    with Emulator(FAST, record) as emu:
        chat = emu.openai().chat.completions.create(
            model="m", messages=[{"role": "user", "content": PROMPT}], max_tokens=4)
        resp = emu.openai().responses.create(model="m", input=PROMPT)
        msg = emu.anthropic().messages.create(model="m", max_tokens=50,
                                              messages=[{"role": "user", "content": PROMPT}])
        truths = emu.truth(3)
    assert chat.choices[0].message.content == truths[0]["text"]
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 4  # type: ignore[union-attr]
    assert resp.output_text == truths[1]["text"] and resp.usage.output_tokens == 12  # type: ignore[union-attr]
    assert msg.content[0].text == truths[2]["text"]  # type: ignore[union-attr]
    assert all(t["stream"] is False and t["events"] == 0 for t in truths)


def test_emulator_auth_rejects_wrong_key_in_each_protocol_shape(record: Path) -> None:
    with Emulator({**FAST, "api_key": "sekrit"}, record) as emu:
        with pytest.raises(openai.AuthenticationError) as oe:
            emu.openai(api_key="wrong").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(anthropic.AuthenticationError) as ae:
            emu.anthropic(api_key="wrong").messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        ok = emu.anthropic(api_key="sekrit").messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        assert emu.http.get(emu.url + "/v1/models").status_code == 401
        truths = emu.truth(3)
    assert oe.value.response.json()["error"]["code"] == "invalid_api_key"
    assert ae.value.response.json()["error"]["type"] == "authentication_error"
    assert ok.usage.output_tokens == 5
    assert [t["status"] for t in truths] == [401, 401, 200]


@pytest.mark.slow
@pytest.mark.parametrize("fault, status, oe_cls, ae_type", [
    ("http_429", 429, openai.RateLimitError, "rate_limit_error"),
    ("http_500", 500, openai.InternalServerError, "api_error"),
    ("http_503", 503, openai.InternalServerError, "overloaded_error"),
])
def test_emulator_http_faults_reach_sdks(record: Path, fault: str, status: int,
                                         oe_cls: type[Exception], ae_type: str) -> None:
    with Emulator({**FAST, "faults": {fault: 1, "retry_after_s": 3}}, record) as emu:
        with pytest.raises(oe_cls) as oe:
            list(emu.openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True))
        with pytest.raises(anthropic.APIStatusError) as ae:
            emu.anthropic().messages.create(model="m", max_tokens=5, stream=True,
                                            messages=[{"role": "user", "content": "x"}])
        truths = emu.truth(2)
    o_resp = oe.value.response  # type: ignore[attr-defined]
    assert o_resp.status_code == status and "error" in o_resp.json()
    assert ae.value.status_code == status
    assert ae.value.response.json()["error"]["type"] == ae_type
    if status == 429:
        assert o_resp.headers["retry-after"] == "3"
        assert o_resp.json()["error"]["code"] == "rate_limit_exceeded"
    assert all((t["fault"], t["status"], t["end"]) == (fault, status, "http_error")
               for t in truths)


@pytest.mark.slow
@pytest.mark.parametrize("code", ["rate_limit_exceeded", "server_error", "invalid_prompt"])
def test_emulator_midstream_error_responses_failed_codes(record: Path, code: str) -> None:
    cfg = {**FAST, "faults": {"midstream_error": 1, "fault_after_tokens": 3,
                              "midstream_codes": [code]}}
    with Emulator(cfg, record) as emu:
        events = list(emu.openai().responses.create(model="m", input=PROMPT, stream=True))
        gt = emu.truth(1)[0]
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.code == code  # type: ignore[union-attr]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == gt["text"] and len(deltas) == 3
    assert (gt["end"], gt["error_code"], gt["output_tokens_sent"]) == ("failed", code, 3)


def test_emulator_midstream_error_chat_and_messages_shapes(record: Path) -> None:
    cfg = {**FAST, "faults": {"midstream_error": 1, "fault_after_tokens": 2,
                              "midstream_codes": ["server_error"]}}
    with Emulator(cfg, record) as emu:
        got: list[str] = []
        with pytest.raises(openai.APIError) as oe:
            for chunk in emu.openai().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}], stream=True):
                got.append(chunk.choices[0].delta.content or "")
        with pytest.raises(anthropic.APIStatusError) as ae:
            with emu.anthropic().messages.stream(
                    model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}]) as s:
                "".join(s.text_stream)
        blocks, err, _ = emu.raw("/v1/chat/completions", _chat())
        truths = emu.truth(3)
    assert "".join(got) == truths[0]["text"] and truths[0]["content_events"] == 2
    assert "server_error" in str(oe.value.body) or "failed" in str(oe.value)
    assert STREAM_INTERRUPTED in str(ae.value)
    last = blocks[-1][1]
    assert err is None and last.startswith(b"data: {\"error\"")
    assert json.loads(last[6:])["error"]["code"] == "server_error"
    assert not any(b == b"data: [DONE]" for _, b in blocks)
    assert truths[1]["error_code"] == "api_error" and truths[1]["end"] == "failed"


def test_emulator_disconnect_truncates_the_body(record: Path) -> None:
    with Emulator({**FAST, "faults": {"disconnect": 1, "fault_after_tokens": 4}}, record) as emu:
        blocks, err, _ = emu.raw("/v1/messages", {**_chat(), "max_tokens": 50})
        with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
            list(emu.openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True))
        truths = emu.truth(2)
    assert isinstance(err, httpx.RemoteProtocolError)
    names = [b.split(b"\n")[0] for _, b in blocks]
    assert names.count(b"event: content_block_delta") == 4
    assert b"event: message_stop" not in names and b"event: error" not in names
    assert [(t["end"], t["content_events"]) for t in truths] == [("disconnect", 4)] * 2
    # uvicorn's error line for an unfinished response is the fault working, not noise
    assert "ASGI callable returned without completing response" not in emu.log()


def test_emulator_stall_is_silent_then_continues(record: Path) -> None:
    cfg = {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 6, "keepalive_interval_s": 0.1,
           "faults": {"stall": 1, "stall_s": 0.5, "fault_after_tokens": 2}}
    with Emulator(cfg, record) as emu:
        short, err, _ = emu.raw("/v1/chat/completions", _chat(), timeout_s=0.2)
        full, err2, _ = emu.raw("/v1/chat/completions", _chat())
        truths = emu.truth(2)
    assert isinstance(err, httpx.ReadTimeout)
    assert truths[0]["end"] == "stall" and truths[0]["content_events"] == 2
    assert err2 is None and full[-1][1] == b"data: [DONE]"
    assert not any(b.startswith(b":") for _, b in full)  # no keepalive in a stall
    assert truths[1]["end"] == "completed" and truths[1]["keepalives"] == 0
    assert max(truths[1]["gaps_ns"]) >= 500_000_000
    # What the client saw: nothing of the third token until the stall was over. The
    # silence runs from the emulator's hand-off of the first two (its first write, on
    # the host's CLOCK_MONOTONIC: t0_mono_ns) to the client's read of the third; the
    # gap between the client's two reads is no measure of it, as a client that read
    # the first two late (its process descheduled) shortens it by its own lateness.
    stamps = [t for t, b in full if b"content" in b and b'"content":""' not in b]
    assert len(stamps) == 6 and stamps[1] <= stamps[2]
    stall_from_s = (truths[1]["t0_mono_ns"] + truths[1]["first_write_ns"]) / 1e9
    assert emu.sent_mono_s + stamps[2] - stall_from_s >= 0.5


@pytest.mark.slow
def test_emulator_omit_done_and_slow_headers(record: Path) -> None:
    with Emulator({**FAST, "faults": {"omit_done": 1}}, record) as emu:
        blocks, err, _ = emu.raw("/v1/chat/completions", _chat())
        sdk = list(emu.openai().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True))
        truths = emu.truth(2)
    assert err is None and blocks[-1][1] != b"data: [DONE]"
    assert json.loads(blocks[-1][1][6:])["choices"][0]["finish_reason"] == "stop"
    assert sdk[-1].choices[0].finish_reason == "stop"
    assert [t["fault"] for t in truths] == ["omit_done"] * 2
    with Emulator({**FAST, "faults": {"slow_headers": 1, "slow_headers_ms": 300}},
                  record.with_name("slow.jsonl")) as emu:
        blocks, err, t_headers = emu.raw("/v1/responses", {"model": "m", "input": "x",
                                                           "stream": True})
        gt = emu.truth(1)[0]
    assert err is None and t_headers >= 0.29
    assert gt["fault"] == "slow_headers" and gt["ttft_ns"] >= 300_000_000


def test_emulator_keepalives_only_in_silences_at_cadence(record: Path) -> None:
    cfg = {"ttft_ms": 0, "think_time_ms": 450, "keepalive_interval_s": 0.1,
           "tokens_per_s": 20, "output_tokens": 4}
    with Emulator(cfg, record) as emu:
        blocks, err, _ = emu.raw("/v1/responses", {"model": "m", "input": "x", "stream": True})
        gt = emu.truth(1)[0]
    kinds = ["ka" if b == b": hopbase-keepalive" else "ev" for _, b in blocks]
    first_delta = next(i for i, (_, b) in enumerate(blocks) if b"output_item.added" in b)
    assert kinds.count("ka") == gt["keepalives"] == 4
    assert all(k == "ka" for k in kinds[2:first_delta])  # after created/in_progress, before text
    assert "ka" not in kinds[first_delta:]  # 50 ms gaps are no silence of 100 ms
    # The cadence on the emulator's own clock (its ground truth), within the lateness
    # it measured itself: the client's read times would add the test process's own
    # scheduling on a busy machine (issue 14: no fixed wall-clock bounds).
    ka_ns, late, ms = gt["keepalive_write_ns"], gt["keepalive_lag_max_ns"], 1_000_000
    assert len(ka_ns) == 4 and late >= 0
    spacing = [b - a for a, b in zip(ka_ns, ka_ns[1:])]
    assert all(100 * ms - late - ms <= s <= 100 * ms + late + ms for s in spacing), (spacing, late)
    # all inside the 450 ms think time, which starts after the first events' write
    assert 100 * ms - ms <= ka_ns[0] and ka_ns[-1] <= gt["ttft_ns"]
    # the client reads them in the order sent, never before the emulator sent them
    ka_t = [t for (t, _), k in zip(blocks, kinds) if k == "ka"]
    assert ka_t == sorted(ka_t) and all(t * 1e9 >= k - ms for t, k in zip(ka_t, ka_ns))


def test_emulator_timing_matches_what_the_client_sees(record: Path) -> None:
    cfg = {"ttft_ms": 150, "tokens_per_s": 25, "output_tokens": 5}
    with Emulator(cfg, record) as emu:
        blocks, err, _ = emu.raw("/v1/messages", {**_chat(), "max_tokens": 10})
        gt = emu.truth(1)[0]
    stamps = [t for t, b in blocks if b.startswith(b"event: content_block_delta")]
    assert len(stamps) == 5 and len(gt["gaps_ns"]) == 4
    # The planned TTFT (150 ms) and gaps (40 ms), each handed to send() late by at most
    # the worst lateness the emulator itself measured; on a busy machine that lateness
    # grows, so fixed millisecond bounds would measure the neighbours (issue 14): the
    # emulator's accuracy on a quiet machine is benchmarks/bench_emulator.py's.
    # The schedule starts once the request is parsed and holds a slot (``queue_ns`` after
    # the request arrived: on a busy machine the parse alone took 1.5 ms), so the TTFT
    # adds that too.
    late, ms = gt["lag_max_ns"], 1e6
    assert late >= 0 and gt["queue_ns"] >= 0
    assert 150 * ms - ms <= gt["ttft_ns"] <= 150 * ms + gt["queue_ns"] + late + ms, gt
    assert all(40 * ms - late - ms <= g <= 40 * ms + late + ms for g in gt["gaps_ns"]), (gt["gaps_ns"], late)
    # The client's clock starts before the request leaves and stops after the event
    # is read: it never sees an event before the emulator sent it.
    assert stamps[0] * 1e9 >= gt["ttft_ns"] - ms
    assert stamps[-1] * 1e9 >= gt["ttft_ns"] + sum(gt["gaps_ns"]) - ms


def test_emulator_same_seed_same_requests_same_behaviour(tmp_path: Path) -> None:
    cfg = {**FAST, "seed": 11, "output_tokens_jitter": 5,
           "faults": {"http_429": 0.2, "midstream_error": 0.2, "omit_done": 0.2}}
    runs = []
    for name in ("a", "b"):
        with Emulator(cfg, tmp_path / f"{name}.jsonl") as emu:
            for i in range(8):
                _, err, _ = emu.raw("/v1/chat/completions", _chat(max_tokens=20 + i))
                assert err is None, (name, i, err)
                # A record trails its body: wait for it, so that a quick 429 next
                # cannot be written before it and the lines stay in request order.
                emu.truth(i + 1)
            runs.append([(t["fault"], t["text"], t["error_code"]) for t in emu.truth(8)])
    assert runs[0] == runs[1]
    assert len({f for f, _, _ in runs[0]}) > 1


def test_emulator_client_close_is_recorded(record: Path) -> None:
    with Emulator({"ttft_ms": 0, "tokens_per_s": 50, "output_tokens": 50}, record) as emu:
        with emu.http.stream("POST", emu.url + "/v1/chat/completions", json=_chat()) as r:
            it = r.iter_raw()
            next(it)
        gt = emu.truth(1)[0]
    assert gt["end"] == "client_closed" and gt["output_tokens_sent"] < 50


def test_emulator_models_and_unknown_paths(record: Path) -> None:
    with Emulator({"models": {"slow-model": {"tokens_per_s": 1}}}, record) as emu:
        models = emu.openai().models.list()
        r = emu.http.post(emu.url + "/v1/nothing", json={})
        bad = emu.http.post(emu.url + "/v1/messages", json={"model": "m", "messages": []})
    assert {m.id for m in models} == {"hopbench-emulator", "slow-model"}
    assert r.status_code == 404 and "error" in r.json()
    assert bad.status_code == 400 and bad.json()["type"] == "error"


def test_emulator_serve_in_process_under_asyncio(record: Path) -> None:
    async def main() -> tuple[str, httpx.Response]:
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            url = await tg.start(partial(serve, EmulatorConfig.from_mapping(FAST), port=0,
                                         record_path=record, shutdown_trigger=stop.wait))
            async with httpx.AsyncClient(trust_env=False) as client:
                r = await client.post(url + "/v1/chat/completions", json=_chat())
            stop.set()
        return url, r

    url, r = asyncio.run(main())
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    (gt,) = read_ground_truth(record)  # written, flushed and closed once serve() returned
    assert (gt["end"], gt["content_events"]) == ("completed", 12)


async def test_emulator_serve_under_trio_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="asyncio"):
        await serve(EmulatorConfig(), port=0)
