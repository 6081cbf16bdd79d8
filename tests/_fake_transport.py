"""An in-memory httpx transport on trio's clock, for runner tests under MockClock.

Role: test support. Nothing touches a socket: each request waits, "connects",
"sends", answers with an SSE head and a paced chat body, all with
``trio.sleep`` (instant and exact under ``MockClock(autojump_threshold=0)``),
reporting its phases through the request's ``trace`` extension with httpcore's
names, as ``hopbench.engine._transport.StreamTransport`` does. Install it with
``LoadRunner(..., transport_factory=fake_transport(plan))`` (hopbench.engine._runner).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import trio

CHUNK = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
         b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
LAST = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
        b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


@dataclass(frozen=True, slots=True)
class Plan:
    """One stream's schedule, seconds of the fake clock.

    Attributes:
        wait_s: before anything (as a wait for a pooled connection).
        connect_s: opening a new connection (every request opens one).
        head_s: request written -> response head.
        gaps_s: head -> first content chunk, then between content chunks.
        last_s: last content chunk -> the terminal chunk ([DONE]); None: no
            terminal chunk (the body ends without one: truncated).
        close_s: terminal chunk -> end of body.
    """

    wait_s: float = 0.0
    connect_s: float = 0.0
    head_s: float = 0.0
    gaps_s: tuple[float, ...] = (0.25, 0.25, 0.25)
    last_s: float | None = 0.25
    close_s: float = 0.0


class _Body(httpx.AsyncByteStream):
    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for gap in self.plan.gaps_s:
            await trio.sleep(gap)
            yield CHUNK
        if self.plan.last_s is not None:
            await trio.sleep(self.plan.last_s)
            yield LAST
        await trio.sleep(self.plan.close_s)

    async def aclose(self) -> None:
        pass


def fake_transport(plan: Plan, seen: list[tuple[str, bytes, httpx.Headers]] | None = None,
                   ) -> type[httpx.AsyncBaseTransport]:
    """A transport class (constructed by the runner with ``verify=``) serving ``plan``;
    each request's (URL, body, headers) is appended to ``seen`` when given."""

    class FakeTransport(httpx.AsyncBaseTransport):
        def __init__(self, **_: Any) -> None:
            pass

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            trace = request.extensions["trace"]
            if seen is not None:
                seen.append((str(request.url), request.content, request.headers))
            await trio.sleep(plan.wait_s)
            await trace("connection.connect_tcp.started", {})
            await trio.sleep(plan.connect_s)
            await trace("http11.send_request_headers.started", {})
            await trio.sleep(plan.head_s)
            body = _Body(plan)
            # the body handed out as StreamTransport does (the runner iterates it directly)
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body,
                                  request=request, extensions={"hopbench.body": body})

    return FakeTransport
