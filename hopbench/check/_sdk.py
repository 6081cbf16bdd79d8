"""Read a stream's bytes with the official OpenAI / Anthropic SDK (``sdk_parse``).

Role: replay a body to the SDK's own streaming client through an in-memory
transport (no network) and collect what the SDK makes of it: text, tool calls
and usage. The SDKs are optional: without one, the read says so (the check is
then ``skip`` for that protocol). The same replay is how
tests/test_protocols_sdk.py holds hopbench's decoders to the SDKs.

Importing the SDKs costs seconds of CPU (9 s each on this project's busy 2-core
machine): ``SdkReader`` imports them in a child process as soon as a check starts, while the script runs, and reads
every body there at the end; the timing of the script's streams never shares a
core with it.

Invariants: never raises; an SDK exception is the read's ``error``; a child
that died makes every read ``missing`` with the reason.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["SdkRead", "SdkReader", "sdk_missing", "sdk_read"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class SdkRead:
    """What an SDK read from one body.

    Attributes:
        sdk: "openai X.Y.Z" / "anthropic X.Y.Z", or "" when missing.
        values: {"text", "tool_calls", "input_tokens", "output_tokens"}.
        error: the SDK's exception ("APIError: ..."), or None.
        missing: why no SDK could read it (not installed), or None.
    """

    sdk: str
    values: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    missing: str | None = None


def _client(body: bytes) -> Any:
    """An http client of the SDKs' own http library whose every response is ``body``."""
    try:  # the SDKs' newer releases are built on httpx2 (an httpx fork with the same API)
        import httpx2 as hx
    except ImportError:
        import httpx as hx  # type: ignore[no-redef]

    def handler(request: Any) -> Any:
        return hx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return hx.Client(transport=hx.MockTransport(handler))


def _openai(protocol: str, body: bytes) -> SdkRead:
    try:
        import openai
    except ImportError:
        return SdkRead("", missing=_not_installed("openai"))
    name = f"openai {openai.__version__}"
    client = openai.OpenAI(api_key="check", base_url="http://127.0.0.1:9/v1", max_retries=0,
                           http_client=_client(body))
    text, tools = "", dict[int, list[str]]()
    usage: tuple[Any, ...] = (None, None)
    try:
        if protocol == "chat":
            for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                        stream=True, stream_options={"include_usage": True}):
                for ch in chunk.choices[:1]:
                    text += ch.delta.content or ""
                    for tc in ch.delta.tool_calls or []:
                        cur = tools.setdefault(tc.index, ["", ""])
                        if tc.function is not None:
                            cur[0] += tc.function.name or ""
                            cur[1] += tc.function.arguments or ""
                if chunk.usage is not None:
                    usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        else:
            for event in client.responses.create(model="m", input="x", stream=True):
                if event.type == "response.output_text.delta":
                    text += event.delta
                elif event.type == "response.function_call_arguments.delta":
                    tools.setdefault(event.output_index, ["", ""])[1] += event.delta
                elif event.type == "response.completed" and event.response.usage is not None:
                    usage = (event.response.usage.input_tokens, event.response.usage.output_tokens)
    except Exception as exc:  # an SDK's refusal of the stream is the finding
        return SdkRead(name, _values(text, tools, usage), f"{type(exc).__name__}: {exc}"[:300])
    return SdkRead(name, _values(text, tools, usage))


def _anthropic(body: bytes) -> SdkRead:
    try:
        import anthropic
    except ImportError:
        return SdkRead("", missing=_not_installed("anthropic"))
    name = f"anthropic {anthropic.__version__}"
    client = anthropic.Anthropic(api_key="check", base_url="http://127.0.0.1:9", max_retries=0,
                                 http_client=_client(body))
    text, tools, usage = "", dict[int, list[str]](), list[Any]([None, None])
    try:
        for ev in client.messages.create(model="m", max_tokens=10, stream=True,
                                         messages=[{"role": "user", "content": "x"}]):
            if ev.type == "message_start":
                usage[0] = ev.message.usage.input_tokens
            elif ev.type == "content_block_start" and ev.content_block.type == "tool_use":
                tools.setdefault(ev.index, ["", ""])[0] = ev.content_block.name
            elif ev.type == "content_block_delta":
                if ev.delta.type == "text_delta":
                    text += ev.delta.text
                elif ev.delta.type == "input_json_delta":
                    tools.setdefault(ev.index, ["", ""])[1] += ev.delta.partial_json
            elif ev.type == "message_delta":
                usage[1] = ev.usage.output_tokens
    except Exception as exc:  # an SDK's refusal of the stream is the finding
        return SdkRead(name, _values(text, tools, tuple(usage)), f"{type(exc).__name__}: {exc}"[:300])
    return SdkRead(name, _values(text, tools, tuple(usage)))


def _values(text: str, tools: dict[int, list[str]], usage: tuple[Any, ...]) -> dict[str, Any]:
    return {"text": text, "tool_calls": [tools[k] for k in sorted(tools)],
            "input_tokens": usage[0], "output_tokens": usage[1]}


def _not_installed(sdk: str) -> str:
    return f"the {sdk} SDK is not installed (pip install {sdk})"


def sdk_missing(protocols: Sequence[str]) -> str | None:
    """Why ``sdk_parse`` would skip every scenario of ``protocols`` ("the openai SDK is not
    installed (pip install openai)"), or None when the SDK of one of them is installed: what a
    full run would say, told without running it (an interrupted check). Looks the packages up
    without importing them; never raises."""
    sdks = sorted({"anthropic" if p == "messages" else "openai" for p in protocols})
    missing = [s for s in sdks if importlib.util.find_spec(s) is None]
    return "; ".join(_not_installed(s) for s in missing) if sdks and missing == sdks else None


def sdk_read(protocol: str, body: bytes) -> SdkRead:
    """Read ``body`` (a whole response body) as the protocol's official SDK does.

    Args:
        protocol: "chat" or "responses" (openai), "messages" (anthropic).
        body: the SSE bytes.

    Returns:
        The ``SdkRead``. Never raises.
    """
    return _anthropic(body) if protocol == "messages" else _openai(protocol, body)


class SdkReader:
    """``sdk_read`` in a child process (``python -m hopbench.check._sdk``) that starts
    importing the SDKs of ``protocols`` at once.

    ``read_all`` sends every body and waits for the answers (once); ``close`` (or
    leaving a ``with`` block) stops the child.
    """

    def __init__(self, protocols: Sequence[str] = ("chat", "messages")) -> None:
        sdks = sorted({"anthropic" if p == "messages" else "openai" for p in protocols})
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_PACKAGE_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", "hopbench.check._sdk", *sdks], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env)

    def __enter__(self) -> "SdkReader":
        return self

    def read_all(self, items: Sequence[tuple[str, bytes]], timeout_s: float = 120.0) -> list[SdkRead]:
        """``sdk_read(protocol, body)`` for each item, in order (the child then exits)."""
        assert self._proc is not None
        request = json.dumps([[p, base64.b64encode(b).decode()] for p, b in items]).encode()
        try:
            out, err = self._proc.communicate(request, timeout=timeout_s)
            answers = json.loads(out)
            return [SdkRead(a["sdk"], a["values"], a["error"], a["missing"]) for a in answers]
        except Exception as exc:  # a dead or stuck child: say so rather than fail the whole check
            self.close()
            return [SdkRead("", missing=f"the SDK reader process failed ({type(exc).__name__}: {exc})")
                    for _ in items]

    def close(self) -> None:
        """Stop the child (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.communicate()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _main() -> None:
    """The child: import the SDKs named in argv, then answer one JSON list of [protocol, base64 body] on stdin."""
    for name in sys.argv[1:]:
        try:
            __import__(name)
        except ImportError:
            pass
    items = json.loads(sys.stdin.buffer.read() or b"[]")
    out = [sdk_read(p, base64.b64decode(b)) for p, b in items]
    sys.stdout.write(json.dumps([{"sdk": r.sdk, "values": r.values, "error": r.error, "missing": r.missing}
                                 for r in out]))


if __name__ == "__main__":
    _main()
