"""A canned streaming target for benchmarks: every POST gets the same 4-token
chat stream at once, on a keep-alive HTTP/1.1 connection.

Its own cost per request is a few tens of microseconds (asyncio, no parsing
beyond the head's Content-Length), so a benchmark against it measures the
client over real sockets without an emulator process taking a core.
Prints its port on stdout, then serves until killed. 127.0.0.1 only.

    python benchmarks/_canned.py        # -> 43117
"""

from __future__ import annotations

import asyncio

_EVENT = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
          b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
_LAST = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
         b'[{"index":0,"delta":{},"finish_reason":"stop"}],'
         b'"usage":{"prompt_tokens":64,"completion_tokens":4,"total_tokens":68}}\n\ndata: [DONE]\n\n')
_BODY = _EVENT * 4 + _LAST
REPLY = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
         % len(_BODY)) + _BODY


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            length = int(head[i + 15:].split(b"\r\n", 1)[0]) if i >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            assert self.transport is not None
            self.transport.write(REPLY)


async def main() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Conn, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
