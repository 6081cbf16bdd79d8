"""The emulator behind the gateway under check, scripted one behaviour at a time.

Role: ``ScriptedUpstream`` serves hopbench's emulator (``EmulatorApp`` under
uvicorn) on ``[upstream] listen`` for the whole check, in a thread of its own
with its own asyncio loop, and swaps the emulator's behaviour between checks
(``use``) without closing the listening socket: a gateway's pooled upstream
connections stay valid from one check to the next. A capturing ASGI layer
keeps, per upstream request, what the emulator really wrote: the body bytes of
each ``send`` with the moment it was handed over, the status and headers, and
when the gateway closed the connection. That is the upstream side every check
compares the client's stream with, byte for byte.

Invariants:
- Stamps are ``time.monotonic_ns()``: the emulator's own clock (``_app.now_ns``)
  and the check's client's, one clock in one process.
- Requests are joined to the client's by the ``x-hopbench-request-id`` header,
  else by the body marker (``hopbench.protocols._marker``), as gateway overhead
  joins them (docs/gateway-overhead.md).
- ``__exit__`` stops uvicorn (streams in flight are cut after its graceful
  period) and joins the thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

from .._errors import HopbenchError
from ..emulator._app import EmulatorApp
from ..emulator._config import EmulatorConfig
from ..emulator._record import GroundTruthWriter
from ..emulator._serve import _INTENDED_DISCONNECTS, WireStampedProtocol, _Server, _listen
from ..protocols._marker import find_marker

__all__ = ["Exchange", "ScriptedUpstream", "UpstreamStartError"]

_Message = dict[str, Any]


class UpstreamStartError(HopbenchError):
    """The emulator could not listen on ``[upstream] listen`` (the address is in use)."""


@dataclass(slots=True)
class Exchange:
    """One upstream request as the emulator saw and answered it.

    Attributes:
        request_id: the ``x-hopbench-request-id`` header, else the body marker's id, else None.
        behaviour: the script step that served it (``ScriptedUpstream.use``).
        path: the request path.
        received_ns: when the ASGI app was called (monotonic ns).
        status: the response status sent, None before the headers.
        headers: the response headers sent (lower-case names).
        writes: (monotonic ns when handed to ``send``, body bytes) per non-empty body chunk, in order.
        ended_ns: when the last body chunk was handed over (the body ended), else None.
        disconnect_ns: when the gateway's connection close reached the app, else None.
        done_ns: when the emulator had finished with the request (its app returned), else None.
    """

    request_id: str | None
    behaviour: str
    path: str
    received_ns: int
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    writes: list[tuple[int, bytes]] = field(default_factory=list)
    ended_ns: int | None = None
    disconnect_ns: int | None = None
    done_ns: int | None = None

    @property
    def body(self) -> bytes:
        """The whole body written, bytes."""
        return b"".join(b for _, b in self.writes)


class _Capture:
    """ASGI layer over the current ``EmulatorApp``: records every exchange."""

    def __init__(self, app: EmulatorApp, behaviour: str) -> None:
        self.app = app
        self.behaviour = behaviour
        self.exchanges: list[Exchange] = []

    async def __call__(self, scope: _Message, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid: str | None = None
        for k, v in scope.get("headers", []):
            if k == b"x-hopbench-request-id":
                rid = v.decode("latin-1")
        ex = Exchange(rid, self.behaviour, scope.get("path", ""), time.monotonic_ns())
        self.exchanges.append(ex)

        async def receive_seen() -> _Message:
            msg: _Message = await receive()
            if msg["type"] == "http.request" and ex.request_id is None:
                ex.request_id = find_marker(msg.get("body", b""))
            elif msg["type"] == "http.disconnect" and ex.disconnect_ns is None:
                ex.disconnect_ns = time.monotonic_ns()
            return msg

        async def send_seen(msg: _Message) -> None:
            t = time.monotonic_ns()
            if msg["type"] == "http.response.start":
                ex.status = int(msg["status"])
                ex.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in msg.get("headers", [])}
            elif msg["type"] == "http.response.body":
                if msg.get("body"):
                    ex.writes.append((t, bytes(msg["body"])))
                if not msg.get("more_body", False):
                    ex.ended_ns = t
            await send(msg)

        try:
            await self.app(scope, receive_seen, send_seen)
        finally:
            ex.done_ns = time.monotonic_ns()


class _Switch:
    """The ASGI app uvicorn serves: forwards to the current script step."""

    def __init__(self, step: _Capture) -> None:
        self.step = step

    async def __call__(self, scope: _Message, receive: Any, send: Any) -> None:
        await self.step(scope, receive, send)


class ScriptedUpstream:
    """The emulator on a fixed address, its behaviour set per check.

    Args:
        host, port: ``[upstream] listen`` (the address the gateway proxies to).
        record_path: the ground-truth file every step appends to (JSON lines,
            docs/emulator.md "Ground truth").
        startup_timeout_s: how long uvicorn has to serve.

    Raises (on ``__enter__``):
        UpstreamStartError: the address cannot be bound (in use, not local) or
            uvicorn did not serve within ``startup_timeout_s``.
    """

    def __init__(self, host: str, port: int, record_path: Path, startup_timeout_s: float = 10.0) -> None:
        self.host, self.port = host, port
        self.record_path = record_path
        self.startup_timeout_s = startup_timeout_s
        self._writer: GroundTruthWriter | None = None
        self._switch: _Switch | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._steps: list[_Capture] = []

    def use(self, behaviour: str, config: EmulatorConfig) -> None:
        """Serve every request from now on with ``config`` (a new emulator state), labelled ``behaviour``."""
        assert self._switch is not None, "use() inside the with block"
        step = _Capture(EmulatorApp(config, self._writer), behaviour)
        self._steps.append(step)
        self._switch.step = step

    def exchanges(self, behaviour: str | None = None) -> list[Exchange]:
        """The upstream requests so far (of one script step, or all), in arrival order."""
        return [ex for s in self._steps if behaviour is None or s.behaviour == behaviour for ex in s.exchanges]

    def __enter__(self) -> "ScriptedUpstream":
        try:
            sockets = _listen(self.host, self.port)
        except OSError as exc:
            raise UpstreamStartError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = GroundTruthWriter(self.record_path)
        self._switch = _Switch(_Capture(EmulatorApp(EmulatorConfig(), self._writer), "idle"))
        config = uvicorn.Config(self._switch, loop="asyncio", http=WireStampedProtocol, ws="none", lifespan="off",
                                log_config=None, log_level="error", access_log=False, proxy_headers=False,
                                server_header=False, date_header=False, timeout_keep_alive=120,
                                timeout_graceful_shutdown=1)
        logging.getLogger("uvicorn.error").addFilter(_INTENDED_DISCONNECTS)  # the disconnect fault is meant
        started = threading.Event()
        self._server = server = _Server(config, started.set)

        def serve() -> None:
            try:
                asyncio.run(server.serve(sockets))
            except BaseException as exc:  # reported by __enter__ / __exit__
                self._failure = exc
            finally:
                for s in sockets:
                    s.close()
                started.set()

        self._thread = threading.Thread(target=serve, name="hopbench-check-upstream", daemon=True)
        self._thread.start()
        if not started.wait(self.startup_timeout_s) or self._failure is not None or not server.started:
            self.__exit__(None, None, None)
            raise UpstreamStartError(f"the emulator did not serve on {self.host}:{self.port}"
                                     f" within {self.startup_timeout_s:g} s ({self._failure!r})")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
