"""Reading HTTP/1.1 requests off a raw trio stream, for tests' hand-written servers.

Role: test support, not product code. The tests that check what hopbench puts
on the wire (its own transport, the dispatcher thread, cookies, large bodies)
serve 127.0.0.1 with a few lines of trio; this is the part they all need:
one request head and its body, framed by Content-Length (hopbench never sends
chunked requests).
"""

from __future__ import annotations

import trio

__all__ = ["read_request"]


async def read_request(stream: trio.abc.ReceiveStream, buf: bytes) -> tuple[bytes, bytes, bytes] | None:
    """The next request on ``stream``.

    Args:
        stream: the connection.
        buf: bytes already read from it and not yet used (b"" at first).

    Returns:
        (head without its blank line, body, bytes read past the body), or None
        when the stream ends before a whole head. A body cut short by the end of
        the stream is returned as far as it came. The body's length is the head's
        Content-Length (any case and spacing; 0 without one).
    """
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buf += data
    head, _, buf = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buf) < length:
        data = await stream.receive_some(1 << 20)
        if not data:
            break
        buf += data
    return head, buf[:length], buf[length:]
