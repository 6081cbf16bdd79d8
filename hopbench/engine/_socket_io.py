"""The socket calls of one stream's connection, written out for their stamps.

``StreamTransport`` (hopbench.engine._transport) opens, reads and writes its plain
TCP connections through these four functions rather than trio's stream methods,
because each one needs a time trio's calls do not give:

- ``_open_tcp``: a connection with the kernel's receive stamps turned on
  (SO_TIMESTAMPNS, socket(7)) and IP literals connected without a resolver;
- ``_recv_stamped``: a read with the kernel's stamp of its latest bytes and
  whether the read waited for them (docs/results/units.md "Times from the wire");
- ``_send_last``: the write that completes a request, between two stamps with no
  await in between (docs/gateway-overhead.md "Definitions": ``request_sent_ns``).

Every stamp is integer ns on hopbench's clock (``hopbench._clock.now_ns``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time

import trio

from .._clock import now_ns
from ..emulator._rx_stamp import ANC_SIZE as _ANC_SIZE
from ..emulator._rx_stamp import SCM_TIMESTAMPNS as _SCM_TIMESTAMPNS
from ..emulator._rx_stamp import SO_TIMESTAMPNS as _SO_TIMESTAMPNS
from ..emulator._rx_stamp import TIMESPEC as _TIMESPEC

__all__: list[str] = []


async def _open_tcp(host: str, port: int) -> trio.SocketStream:
    """A TCP connection to ``host``. An IP literal is connected directly (~40 µs
    of CPU here); a name goes through ``trio.open_tcp_stream``: resolution and
    happy eyeballs (RFC 8305), ~150 µs, which at 1,000 new streams/s is a
    tenth of a core and shows in the TTFT of streams opened during a ramp-up."""
    try:
        family = trio.socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else trio.socket.AF_INET
    except ValueError:
        return _stamped(await trio.open_tcp_stream(host, port))
    sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
    try:
        await sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return _stamped(trio.SocketStream(sock))  # sets TCP_NODELAY


def _stamped(stream: trio.SocketStream) -> trio.SocketStream:
    """Ask the kernel to stamp what ``stream`` receives (SO_TIMESTAMPNS), where it can."""
    if _SO_TIMESTAMPNS is not None:
        try:
            stream.socket.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:  # pragma: no cover - a kernel without it: no stamps
            pass
    return stream


async def _recv_stamped(stream: trio.SocketStream, n: int) -> tuple[bytes, int, bool]:
    """``receive_some(n)`` through ``recvmsg``: the bytes, the kernel's receive
    stamp of the latest segment among them (SO_TIMESTAMPNS) on hopbench's clock,
    ns (0 when the kernel gave none), and whether the read *waited* for them.

    ``waited`` is True when the socket was empty at the call, so the task was
    parked on it and the event loop's I/O wait woke it for these bytes: then none
    of them arrived before the end of the I/O wait before that one (``_Body.after_turn``:
    the runner's floor of a read's earlier events, docs/results/units.md "Times from
    the wire"). False when bytes were waiting already (the call then yields once
    after the system call, as trio's does) or the socket is not trio's usual one. The
    system calls are trio's own ``recvmsg`` sequence (its ``_nonblocking_helper``:
    one try, a cancel-shielded checkpoint when it succeeds, else wait readable
    and try again), written out to tell the two cases apart.

    Raises:
        OSError: the read failed (the callers map it to httpx.ReadError).
        trio.ClosedResourceError: the socket was closed while the read waited.
    """
    sock = stream.socket
    raw_sock = getattr(sock, "_sock", None)  # trio's wrapped stdlib socket (non-blocking)
    waited = False
    if raw_sock is None:  # pragma: no cover - another socket class: trio's own call
        data, anc, _, _ = await sock.recvmsg(n, _ANC_SIZE)
    else:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data, anc, _, _ = raw_sock.recvmsg(n, _ANC_SIZE)
        except BlockingIOError:
            waited = True
            while True:
                await trio.lowlevel.wait_readable(raw_sock)
                try:
                    data, anc, _, _ = raw_sock.recvmsg(n, _ANC_SIZE)
                    break
                except BlockingIOError:
                    pass
        except OSError:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
    for level, kind, raw in anc:
        if kind == _SCM_TIMESTAMPNS and level == socket.SOL_SOCKET and len(raw) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            # CLOCK_REALTIME -> hopbench's clock: both read now, microseconds apart
            return data, sec * 1_000_000_000 + nsec - time.time_ns() + now_ns(), waited
    return data, 0, waited


async def _send_last(stream: trio.abc.Stream, data: bytes) -> tuple[int, int]:
    """Write ``data``, the request's last bytes, on ``stream``; returns ``(before_ns, after_ns)``:
    stamps (``now_ns``) just before and just after the write that completed the request: the
    moment its last byte reached the kernel lies between them (docs/gateway-overhead.md,
    "Definitions": ``request_sent_ns``).

    On plain TCP the first write is one ``os.write`` between the two stamps, with no await in
    between (trio's ``send_all`` yields to the loop after its write: its "after" would carry a
    whole loop turn); what the socket buffer did not take, and a TLS stream, go through
    ``send_all`` (its last write lies somewhere in that call: a wider bound).

    Raises:
        OSError, trio.BrokenResourceError, trio.ClosedResourceError: the write failed;
        trio.Cancelled: the stream was cancelled before the write.
    """
    if type(stream) is trio.SocketStream:
        await trio.lowlevel.checkpoint_if_cancelled()  # as send_all: a cancelled stream writes nothing
        before = now_ns()
        try:
            n = os.write(stream.socket.fileno(), data)
        except BlockingIOError:
            n = 0
        after = now_ns()
        if n == len(data):
            return before, after
        data = data[n:]
    before = now_ns()
    await stream.send_all(data)
    return before, now_ns()
