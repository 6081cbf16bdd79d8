"""Kernel receive stamps: when a request's bytes reached the emulator's socket.

Role: the emulator's "request received" was the moment its ASGI app was
called: after its process was scheduled and uvicorn parsed the head. On a busy
machine that is milliseconds after the bytes arrived, and gateway overhead's
``request_delay`` (client sent -> upstream received) read it as the path's
(docs/gateway-overhead.md, "Times from the wire at the upstream").
:class:`StampedReader` reads a connection's socket itself, with ``recvmsg``
and the kernel's receive stamp of what it read (``SO_TIMESTAMPNS``,
socket(7)), and hands the bytes to the protocol as the transport would; the
protocol (``_serve._WireStampedProtocol``) carries the stamp of the read that
completed a request's head to the app (scope key :data:`WIRE_RX_KEY`).

Why not the ``SIOCGSTAMPNS`` ioctl: on TCP sockets Linux answers ENOENT (the
stamp it returns is kept for datagram sockets only; tested on 6.x), so the
ancillary data of ``recvmsg`` is the one way to the stamp, and the event loop's
transports (uvloop's libuv reads, asyncio's ``recv``) drop it.

How: the transport's own reading is paused for good and a duplicate of its
socket's descriptor (``os.dup``: the same TCP socket) is watched with
``loop.add_reader``; writes still go through the transport. uvicorn's flow
control pauses and resumes this reader instead of the transport's. End of
stream closes the transport as asyncio's does (``eof_received`` then
``close``), a read error aborts it, and the duplicate is closed when the
connection is lost.

Invariants:
- A stamp is CLOCK_REALTIME in the kernel; :func:`realtime_to_monotonic`
  moves it to CLOCK_MONOTONIC (the emulator's ``now_ns`` and ground truth's
  ``t0_mono_ns``) with the offset read between two monotonic reads, and
  returns the move's error: half their span (a preemption between them shows
  as a large error, never as a silent one).
- Where there is no stamp (not Linux x86-64/arm64, TLS, a socket that is not
  TCP, a read the kernel did not stamp) the transport reads as before and the
  request has no wire stamp: the ground truth's ``t0_wire_mono_ns`` is null
  and gateway overhead falls back to the app's stamp, and counts it.
- Linux stamps a read of several coalesced segments with the latest one's
  arrival: a request whose head came in one read with earlier bytes of the
  same request is stamped when its last bytes of that read arrived.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import platform
import socket
import struct
import sys
import time
from typing import Final

__all__ = ["SO_TIMESTAMPNS", "SCM_TIMESTAMPNS", "ANC_SIZE", "TIMESPEC", "WIRE_RX_KEY", "StampedReader",
           "keep_kernel_stamps", "realtime_to_monotonic", "stamp_of"]

#: Linux ``SO_TIMESTAMPNS`` (socket(7)), None where the platform has none. Python < 3.14
#: does not name it: 35 on Linux x86-64 and arm64 (asm-generic/socket.h,
#: SO_TIMESTAMPNS_OLD, a 64-bit struct timespec there).
SO_TIMESTAMPNS: Final[int | None] = getattr(socket, "SO_TIMESTAMPNS", (
    35 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64") else None))
#: the ancillary message type that carries it
SCM_TIMESTAMPNS: Final[int | None] = getattr(socket, "SCM_TIMESTAMPNS", SO_TIMESTAMPNS)
#: ``recvmsg``'s ancillary buffer for one timespec (0: no stamps here)
ANC_SIZE: Final = socket.CMSG_SPACE(16) if SO_TIMESTAMPNS is not None else 0
#: struct timespec: seconds, nanoseconds (64-bit each)
TIMESPEC: Final = struct.Struct("@qq")
#: the ASGI scope key (in ``scope["extensions"]``) of a request's wire stamp:
#: ``{"mono_ns": CLOCK_MONOTONIC ns, "error_ns": its error, ns}``, absent where there is none
WIRE_RX_KEY: Final = "hopbench.wire_rx"
#: bytes per read (asyncio's transports read 256 KiB; requests are small)
_READ_SIZE = 64 * 1024


_STAMP_KEEPER: socket.socket | None = None


def keep_kernel_stamps(tries: int = 200) -> bool:
    """Turn the kernel's receive stamps on for this process and wait until they are on.

    Linux turns SO_TIMESTAMPNS stamping on system-wide lazily: the first socket
    that asks schedules deferred work (``net_enable_timestamp``, net/core/dev.c),
    and packets that arrive before that work ran carry no stamp; when the last
    socket that asked closes, stamping goes off again (deferred too). On a busy
    machine that work can wait: the first reads of a run, or of a connection
    opened after a quiet spell, had no stamp. One UDP socket on 127.0.0.1 that
    asks for stamps is kept open for the process's life (closed at exit), and
    datagrams are sent to it until one comes back stamped: at most ``tries``,
    1 ms apart (a blocking wait: call before the run's clock starts). Idempotent.

    Returns:
        Whether a stamped datagram came back (False where there are no kernel
        stamps, or they did not come on in time: reads then say 0, as before).
    """
    global _STAMP_KEEPER
    if SO_TIMESTAMPNS is None or not ANC_SIZE:
        return False
    try:
        if _STAMP_KEEPER is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
            _STAMP_KEEPER = sock
            atexit.register(sock.close)
        sock = _STAMP_KEEPER
        addr = sock.getsockname()
        for k in range(tries):
            if k:
                time.sleep(0.001)
            sock.sendto(b"x", addr)  # (loopback: queued to the socket within the call)
            while True:
                try:
                    _, anc, _, _ = sock.recvmsg(1, ANC_SIZE)
                except BlockingIOError:
                    break
                if any(kind == SCM_TIMESTAMPNS and level == socket.SOL_SOCKET for level, kind, _ in anc):
                    while True:  # drain what is left
                        try:
                            sock.recv(1)
                        except BlockingIOError:
                            return True
    except OSError:  # pragma: no cover - no loopback UDP here: reads say 0 where unstamped
        return False
    return False


def realtime_to_monotonic(realtime_ns: int) -> tuple[int, int]:
    """A CLOCK_REALTIME stamp on CLOCK_MONOTONIC, with the move's error.

    Args:
        realtime_ns: a ``time.time_ns()``-clock stamp, ns.

    Returns:
        ``(monotonic ns, error ns)``: the stamp moved by the offset between the
        two clocks read now (the realtime read between two monotonic ones, the
        offset taken at their midpoint); the error is half the monotonic reads'
        span (the realtime read happened somewhere inside it), so the true
        monotonic stamp lies within ``± error`` (plus the clocks' own grain).
    """
    a = time.monotonic_ns()
    r = time.time_ns()
    b = time.monotonic_ns()
    return realtime_ns - r + (a + b) // 2, (b - a + 1) // 2


def stamp_of(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive stamp in ``recvmsg``'s ancillary data, CLOCK_REALTIME ns, or None."""
    for level, kind, raw in ancillary:
        if kind == SCM_TIMESTAMPNS and level == socket.SOL_SOCKET and len(raw) >= 16:
            sec, nsec = TIMESPEC.unpack_from(raw)
            return int(sec * 1_000_000_000 + nsec)
    return None


class StampedReader:
    """Reads one connection's socket for its protocol, stamping each read (see the module docstring).

    Use :meth:`attach`; the protocol reads :attr:`last` inside ``data_received``
    (and calls :meth:`from_transport` there when :attr:`own_read` is False).

    Attributes:
        last: the latest read's stamp, ``(CLOCK_MONOTONIC ns, error ns)``, or
            None when the kernel gave none for it.
    """

    __slots__ = ("_loop", "_transport", "_protocol", "_sock", "_fd", "_reading", "last", "own_read")

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport,
                 protocol: asyncio.Protocol, sock: socket.socket) -> None:
        self._loop = loop
        self._transport = transport
        self._protocol = protocol
        self._sock: socket.socket | None = sock
        self._fd = sock.fileno()
        self._reading = False
        self.last: tuple[int, int] | None = None
        #: True while this reader hands its bytes to the protocol (not the transport)
        self.own_read = False

    @classmethod
    def attach(cls, transport: asyncio.Transport, protocol: asyncio.Protocol) -> StampedReader | None:
        """Take the reading of ``transport``'s socket over, if its receive stamps can be had.

        Call from ``protocol.connection_made`` (in the loop's thread).

        Args:
            transport: a new connection's transport (asyncio's or uvloop's).
            protocol: its protocol: gets ``data_received`` and ``eof_received`` from the reader.

        Returns:
            The reader, reading; None (and the transport reading as before) on
            a platform without ``SO_TIMESTAMPNS``, over TLS, for a socket that
            is not TCP, or when the kernel refuses. Never raises.
        """
        if SO_TIMESTAMPNS is None or not ANC_SIZE or transport.get_extra_info("sslcontext") is not None:
            return None
        raw = transport.get_extra_info("socket")
        try:
            if raw is None or raw.type != socket.SOCK_STREAM or raw.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            loop = asyncio.get_running_loop()
            fd = os.dup(raw.fileno())
        except (OSError, RuntimeError, AttributeError):
            return None
        try:
            sock = socket.socket(raw.family, raw.type, 0, fd)
        except OSError:
            os.close(fd)
            return None
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            transport.pause_reading()
        except (OSError, RuntimeError):
            sock.close()
            return None
        reader = cls(loop, transport, protocol, sock)
        reader.resume_reading()
        # uvloop starts the transport's reading right after connection_made, whatever it
        # was told there: pause it at the loop's next turn. Bytes waiting before both
        # watchers were registered go to this reader (registered first, so epoll lists it
        # first); a read the transport made all the same comes without a stamp
        # (``from_transport``): correct bytes, no wire time.
        loop.call_soon(reader._pause_transport)
        return reader

    def _pause_transport(self) -> None:
        if self._sock is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def from_transport(self) -> None:
        """The protocol got bytes from the transport's own read (see :meth:`attach`):
        they have no stamp, and the transport stops reading now."""
        self.last = None
        self._pause_transport()

    def pause_reading(self) -> None:
        """Stop reading (uvicorn's flow control; idempotent)."""
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        """Read again (idempotent; a closed reader stays closed)."""
        if not self._reading and self._sock is not None:
            self._reading = True
            self._loop.add_reader(self._fd, self._read)

    def close(self) -> None:
        """Stop reading and close the duplicate descriptor (call from ``connection_lost``; idempotent)."""
        self.pause_reading()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _read(self) -> None:
        sock = self._sock
        if sock is None or self._transport.is_closing():
            self.pause_reading()
            return
        try:
            data, anc, _, _ = sock.recvmsg(_READ_SIZE, ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset, timed out: as asyncio's transport, the connection is lost
            self.pause_reading()
            self._transport.abort()
            return
        if not data:  # the peer's end of stream: asyncio's rule (eof_received, then close)
            self.pause_reading()
            if not self._protocol.eof_received():
                self._transport.close()
            return
        rt = stamp_of(anc)
        self.last = None if rt is None else realtime_to_monotonic(rt)
        self.own_read = True
        try:
            self._protocol.data_received(data)
        finally:
            self.own_read = False
