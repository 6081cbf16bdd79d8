"""Serving the emulator: uvicorn (httptools, uvloop when installed), and ``hopbench serve``.

Role: ``serve`` runs ``EmulatorApp`` under uvicorn in the running asyncio loop
until a shutdown trigger fires, reporting the address it really bound (port 0
picks a free port); ``serve_command`` runs it as a process (``hopbench
serve`` and ``python -m hopbench.emulator``, so also the embedded target; the
arguments are parsed by :mod:`hopbench.cli`).

Why uvicorn: a paced stream costs the server one write per event, and that
per-event path (ASGI ``send`` -> HTTP framing -> socket) is what bounds how
many paced events one process keeps time for. uvicorn's httptools protocol
frames a body chunk in one ``transport.write``; hypercorn's trio worker (h11,
``send_all`` with its cancel scopes) cost about three times the CPU per paced
event (~65 against ~20 us, benchmarks/README.md, "Emulator capacity").

Invariants:
- The listening sockets are bound (and listen) before uvicorn starts; ``serve``
  reports the URL only once uvicorn serves them, and ``--ready-file`` is
  written (write + rename) after that: the parent of an embedded emulator
  learns the port without racing for it.
- SIGTERM and SIGINT are the caller's: ``serve_command`` turns them into a
  graceful stop (streams in flight get ``_GRACEFUL_S``) and exits 0. uvicorn's
  own signal capture is off, as it re-raises the signal after its stop.
- The ground-truth file is flushed per line and closed when ``serve`` returns.
- ``serve_command`` freezes what is alive once it serves out of the cyclic garbage
  collector (``gc.freeze``): full collections over the start-up objects would
  stall every stream's schedule for 10-25 ms now and then.
- The ``disconnect`` fault ends the app without the final body chunk, which
  uvicorn answers by closing the connection and logging "ASGI callable
  returned without completing response." at error level: that line (only
  that one) is filtered out of the log, as the fault is intended.
- A client that goes away reaches the app as ``http.disconnect`` (uvicorn's
  ``send`` then silently drops data, so the app must watch ``receive``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .._errors import ProfileError, UsageError
from .._exit import EXIT_INPUT, EXIT_OK
from .._limits import raise_fd_limit
from ._app import EmulatorApp
from ._config import EmulatorConfig
from ._capacity import knee
from ._record import GroundTruthWriter
from ._rx_stamp import WIRE_RX_KEY, StampedReader, keep_kernel_stamps

__all__ = ["serve", "serve_command"]

#: A load test opens many connections at once and keeps them pooled.
_BACKLOG = 4096
_KEEP_ALIVE_S = 120
#: File descriptors the emulator asks for (its soft limit raised toward it, never past the
#: hard one): each connection holds two, its socket and the duplicate that reads it with
#: the kernel's receive stamps (``_rx_stamp``); 32,768 connections.
_FDS = 65_536
#: How long streams still in flight get after a stop before they are cancelled.
_GRACEFUL_S = 2
_UNFINISHED = "ASGI callable returned without completing response."


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None without uvloop (not on Windows or PyPy):
    plain asyncio then serves the same at about the same cost."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class _IntendedDisconnects(logging.Filter):
    """Drops uvicorn's error line for a response the app left unfinished on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _UNFINISHED


_INTENDED_DISCONNECTS = _IntendedDisconnects()


class _Server(uvicorn.Server):
    """uvicorn's server that says when it serves and leaves signals to its caller.

    Args:
        config: the uvicorn configuration.
        on_started: called once uvicorn serves the sockets.
    """

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's version re-raises the signal once it has stopped, so the
        # process would die of it instead of exiting 0 after a graceful stop.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_started()


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening TCP sockets on every address ``host`` resolves to.

    Args:
        host: a name or an address (IPv4 or IPv6).
        port: the port; 0 lets the kernel pick a free one (per socket).

    Returns:
        The sockets, bound and listening, in resolution order.

    Raises:
        OSError: the name does not resolve or an address cannot be bound.
    """
    sockets: list[socket.socket] = []
    seen: set[Any] = set()
    try:
        for family, kind, proto, _, addr in socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
            if addr in seen:
                continue
            seen.add(addr)
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(_BACKLOG)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    # requests are stamped when they reach the socket (WireStampedProtocol): Linux stamps
    # only while some socket asks, turned on lazily; keep it on from the first request on
    keep_kernel_stamps()
    return sockets


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"


class WireStampedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, reading its socket with the kernel's receive stamps.

    The seam: uvicorn's ``http=`` takes a protocol class; this one lets a
    :class:`~hopbench.emulator._rx_stamp.StampedReader` read the connection
    (its flow control switched to that reader) and puts the stamp of the read
    that completed each request's head in the request's scope:
    ``scope["extensions"]["hopbench.wire_rx"] = {"mono_ns": CLOCK_MONOTONIC ns, "error_ns": ns}``
    (absent where the kernel gave none: the app then has only its own stamp).
    Everything else is uvicorn's (tested with uvicorn 0.55: tests/test_rx_stamp.py
    checks the seam, so an upgrade that moves it fails there, not silently).
    """

    _rx: StampedReader | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._rx = StampedReader.attach(transport, self)
        if self._rx is not None:  # uvicorn pauses reading for pipelining and large bodies
            self.flow = FlowControl(self._rx)  # type: ignore[arg-type]  # (pause/resume_reading only)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._rx is not None:
            self._rx.close()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        rx = self._rx
        if rx is not None and not rx.own_read:
            rx.from_transport()
        super().data_received(data)

    def on_headers_complete(self) -> None:
        rx = self._rx
        if rx is not None and rx.last is not None:
            mono_ns, error_ns = rx.last  # (ASGI: an extension's value is a dict)
            self.scope["extensions"] = {WIRE_RX_KEY: {"mono_ns": mono_ns, "error_ns": error_ns}}
        super().on_headers_complete()


def _uvicorn_config(app: EmulatorApp, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app, loop="asyncio" if _uvloop_factory() is None else "uvloop", http=WireStampedProtocol,
        ws="none",
        lifespan="on", log_config=None, log_level=log_level, access_log=False,
        proxy_headers=False, server_header=False, date_header=False, backlog=_BACKLOG,
        timeout_keep_alive=_KEEP_ALIVE_S, timeout_graceful_shutdown=_GRACEFUL_S)


async def serve(
    config: EmulatorConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    record_path: Path | None = None,
    log_level: str = "warning",
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the emulator until ``shutdown_trigger`` returns (or forever).

    uvicorn needs asyncio: call this from an asyncio program (or anyio on its
    asyncio backend), e.g. ``url = await task_group.start(partial(serve, config, port=0))``.
    For a trio program, or a separate process, use ``EmbeddedEmulator``.

    Args:
        config: the emulator configuration.
        host: the address to bind (loopback by default).
        port: the TCP port; 0 picks a free one.
        record_path: ground-truth JSON-lines file to append to, or None.
        log_level: uvicorn's log level.
        shutdown_trigger: an async callable whose return starts a graceful stop.
        task_status: ``TaskGroup.start`` receives the bound base URL,
            e.g. ``"http://127.0.0.1:41234"``, once uvicorn serves it.

    Raises:
        UsageError: not called from asyncio.
        OSError: ``host`` does not resolve or cannot be bound.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise UsageError("hopbench.emulator.serve runs uvicorn: call it from asyncio "
                         "(or anyio's asyncio backend), not trio") from None
    logging.getLogger("uvicorn.error").addFilter(_INTENDED_DISCONNECTS)
    raise_fd_limit(_FDS)  # (a refusal leaves the limit: a duplicate that fails reads unstamped)
    sockets = _listen(host, port)
    writer: GroundTruthWriter | None = None
    try:
        writer = (GroundTruthWriter(record_path, knee(config).to_json())
                  if record_path is not None else None)
        app = EmulatorApp(config, writer)
        server = _Server(_uvicorn_config(app, log_level),
                         partial(task_status.started, _url(sockets[0])))

        async def stop_on_trigger(trigger: Callable[[], Awaitable[object]]) -> None:
            await trigger()
            server.should_exit = True

        async with anyio.create_task_group() as tg:
            if shutdown_trigger is not None:
                tg.start_soon(stop_on_trigger, shutdown_trigger)
            await server.serve(sockets)
            tg.cancel_scope.cancel()
    finally:
        for sock in sockets:
            sock.close()
        if writer is not None:
            writer.close()


def _write_ready(path: Path, url: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(url + "\n", encoding="utf-8")
    os.replace(tmp, path)


async def _main(config: EmulatorConfig, host: str, port: int, record: Path | None, log_level: str,
                ready_file: Path | None) -> None:
    stop = anyio.Event()

    async def watch_signals(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                            ) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                stop.set()
                return

    async with anyio.create_task_group() as tg:
        await tg.start(watch_signals)
        url = await tg.start(partial(
            serve, config, host=host, port=port, record_path=record,
            log_level=log_level, shutdown_trigger=stop.wait))
        # Everything alive now (modules, the app, uvicorn) lives as long as the
        # process: keep it out of the collector's full passes, which otherwise
        # stall the loop for ~10-25 ms now and then, and every stream's deadline
        # with it (benchmarks/README.md, "Emulator capacity").
        gc.freeze()
        if ready_file is not None:
            _write_ready(ready_file, url)
        print(f"hopbench emulator listening on {url}", flush=True)


def serve_command(*, host: str = "127.0.0.1", port: int = 8000, config: Path | None = None,
                  config_json: Path | None = None, record: Path | None = None, log_level: str = "warning",
                  ready_file: Path | None = None) -> int:
    """``hopbench serve``: serve until SIGINT/SIGTERM (arguments parsed by :mod:`hopbench.cli`).

    Args:
        host: address to bind.
        port: TCP port, 0 to 65535 (0: any free port).
        config: emulator TOML config file (None: the defaults).
        config_json: the config as JSON (``EmulatorConfig.to_mapping``), used by
            ``EmbeddedEmulator``; wins over ``config``.
        record: append ground truth (JSON lines) to this file.
        log_level: a logging level name: debug, info, warning, error or critical.
        ready_file: where to write the URL once serving (write + rename).

    Returns:
        The exit status: 0 after a clean stop, 2 for a bad config, an
        unwritable record file or an address it cannot listen on (a message
        on stderr).
    """
    if record is not None:
        try:  # a record file that cannot be written is a usage error, not a listen error
            record.parent.mkdir(parents=True, exist_ok=True)
            with open(record, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            print(f"hopbench serve: --record {record}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_INPUT
    try:
        if config_json is not None:
            data = json.loads(config_json.read_text(encoding="utf-8"))
            cfg = EmulatorConfig.from_mapping(data, str(config_json))
        elif config is not None:
            cfg = EmulatorConfig.from_file(str(config))
        else:
            cfg = EmulatorConfig()
    except (ProfileError, OSError, ValueError) as exc:
        print(f"hopbench serve: {exc}", file=sys.stderr)
        return EXIT_INPUT
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr)
    factory = _uvloop_factory()
    options: dict[str, Any] = {} if factory is None else {"loop_factory": factory}
    status = EXIT_OK
    try:
        anyio.run(_main, cfg, host, port, record, log_level, ready_file, backend="asyncio", backend_options=options)
    except* (OSError, OverflowError) as group:
        cause: BaseException = group
        while isinstance(cause, BaseExceptionGroup) and cause.exceptions:  # the innermost one
            cause = cause.exceptions[0]
        reason = (cause.strerror if isinstance(cause, OSError) and cause.strerror
                  else str(cause))
        print(f"hopbench serve: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        status = EXIT_INPUT
    return status
