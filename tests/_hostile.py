"""Small hostile HTTP servers for the failure tests (127.0.0.1 only, test support).

Each mode misbehaves in one way a real gateway or a wrong target does:

- ``all_501``: every request gets ``501 Unsupported method`` with an HTML body
  (what ``python3 -m http.server`` answers to a POST);
- ``echo_key``: HTTP 401 whose JSON ``error.code`` echoes the request's
  Authorization header (a server that reflects the caller's key);
- ``echo_key_encoded``: HTTP 401 that echoes the request's ``x-api-key`` only
  encoded: percent-encoded in ``error.code``, JSON-escaped with ``/`` written
  ``\\/`` (as PHP does) in ``error.message``;
- ``echo_key_padded``: HTTP 401 that echoes the ``x-api-key`` header after 1,000
  spaces, so that the key crosses the body's 1,024th byte (whitespace a sample
  collapses: a cut there would keep the key's first part);
- ``unique_code``: HTTP 400 with a different ``error.code`` per request;
- ``bad_chunk``: a 200 head and a malformed chunk size in the same write;
- ``silent``: reads the request and never answers;
- ``trickle``: a valid chat stream sent a few bytes at a time;
- ``html_200``: ``200 OK`` with an HTML page (a web server, or a wrong path, behind the URL);
- ``html_500``: ``500 Internal Server Error`` with an HTML page (a web server's error page);
- ``ok_every:N``: every N-th request gets ``ok``, the others ``html_500`` (a target that
  streams sometimes);
- ``done_only``: a valid event stream that holds only ``data: [DONE]`` (no chunk, no output);
- ``ok``: a valid chat stream at once;
- ``die_after:N``: ``ok`` for N requests, then the whole process exits
  (``os._exit``), as a target that dies mid-run.

Use ``serve(mode)`` inside a trio nursery (``nursery.start``) or run this file
as a script: ``python tests/_hostile.py MODE [--tls CERT KEY]`` prints the port
on its first stdout line and serves until killed.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
from functools import partial
from typing import Any
from urllib.parse import quote

import trio

from _raw_http import read_request

CHAT_BODY = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
             b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
             b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
             b'[{"index":0,"delta":{},"finish_reason":"stop"}],'
             b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n'
             b'data: [DONE]\n\n')
_SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
             b"transfer-encoding: chunked\r\n\r\n")


async def _read_request(stream: trio.abc.Stream) -> bytes:
    """The next request's head (b"" when the stream ends before a whole one); its body is read and dropped."""
    got = await read_request(stream, b"")
    return b"" if got is None else got[0]


def _header(head: bytes, name: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip().decode("latin-1")
    return ""


def _response(status: str, body: bytes, ctype: str) -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


class Hostile:
    """A connection handler for one mode (see the module docstring)."""

    def __init__(self, mode: str) -> None:
        self.mode, _, arg = mode.partition(":")
        self.limit = int(arg) if arg else 0
        self.requests = 0

    async def __call__(self, stream: trio.abc.Stream) -> None:
        try:
            head = await _read_request(stream)
            if not head:
                return
            self.requests += 1
            mode = self.mode
            if mode == "die_after" and self.requests > self.limit:
                os._exit(0)  # the target dies: no answer, and its port closes
            if mode == "all_501":
                await stream.send_all(_response("501 Unsupported method ('POST')",
                                                b"<html><body>Error code: 501</body></html>", "text/html"))
            elif mode == "echo_key":
                err = {"error": {"code": _header(head, b"authorization"), "message": "bad key"}}
                await stream.send_all(_response("401 Unauthorized", json.dumps(err).encode(),
                                                "application/json"))
            elif mode == "echo_key_padded":
                body = b'{"error": "' + b" " * 1000 + _header(head, b"x-api-key").encode() + b'"}'
                await stream.send_all(_response("401 Unauthorized", body, "application/json"))
            elif mode == "echo_key_encoded":
                key = _header(head, b"x-api-key")
                err = {"error": {"code": quote(key, safe=""), "message": f"Incorrect API key provided: {key}"}}
                await stream.send_all(_response("401 Unauthorized", json.dumps(err).replace("/", "\\/").encode(),
                                                "application/json"))
            elif mode == "unique_code":
                err = {"error": {"code": f"code_{self.requests}", "message": f"error number {self.requests}"}}
                await stream.send_all(_response("400 Bad Request", json.dumps(err).encode(),
                                                "application/json"))
            elif mode == "html_200":
                await stream.send_all(_response("200 OK", b"<html><body>Welcome to nginx!</body></html>",
                                                "text/html"))
            elif mode == "html_500" or (mode == "ok_every" and self.requests % self.limit):
                await stream.send_all(_response("500 Internal Server Error",
                                                b"<html><body>Internal Server Error</body></html>", "text/html"))
            elif mode == "done_only":
                await stream.send_all(_response("200 OK", b"data: [DONE]\n\n", "text/event-stream"))
            elif mode == "silent":
                await trio.sleep(60)  # never answers (the client's first-byte limit ends it)
            elif mode == "bad_chunk":
                await stream.send_all(_SSE_HEAD + b"zz-not-hex\r\n" + CHAT_BODY + b"\r\n0\r\n\r\n")
            elif mode == "trickle":
                await stream.send_all(_SSE_HEAD)
                data = b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY)
                for i in range(0, len(data), 7):
                    await stream.send_all(data[i:i + 7])
                    await trio.sleep(0.001)
            else:  # ok, die_after, ok_every's N-th
                await stream.send_all(_SSE_HEAD + b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


async def serve(mode: str, *, ssl_context: ssl.SSLContext | None = None,
                task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``mode`` on 127.0.0.1 (a free port); ``task_status.started(port)``."""
    handler = Hostile(mode)
    tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = tcp[0].socket.getsockname()[1]
    listeners: list[Any] = list(tcp)
    if ssl_context is not None:
        listeners = [trio.SSLListener(t, ssl_context, https_compatible=True) for t in tcp]
    async with trio.open_nursery() as n:
        await n.start(partial(trio.serve_listeners, handler, listeners))
        task_status.started(port)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context for a certificate and key (PEM files)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


async def _main(argv: list[str]) -> None:
    ctx = tls_context(argv[2], argv[3]) if len(argv) >= 4 and argv[1] == "--tls" else None

    async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await serve(argv[0], ssl_context=ctx, task_status=task_status)

    async with trio.open_nursery() as n:
        port = await n.start(run)
        print(port, flush=True)


if __name__ == "__main__":
    trio.run(_main, sys.argv[1:])
