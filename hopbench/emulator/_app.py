"""The emulator's raw ASGI application (anyio; served by uvicorn, see ``_serve``).

Role: route a request, check auth, draw its plan (``_behaviour``), then carry
the plan out on the wire (``_wire``) on absolute deadlines, and write one
ground-truth line (``_record``) per request.

The app uses anyio only, so it runs under asyncio (uvicorn, with or without
uvloop: the production server) and trio alike. Its clock is ``now_ns`` below,
``time.monotonic_ns``: the clock asyncio's loop schedules with (uvloop's too, at
millisecond grain). It is not hopbench's measuring clock (``hopbench._clock``,
trio's): the emulator runs in its own process and its ground truth holds only
durations.

Invariants:
- Deadlines are absolute from the moment the app is called for the request
  (``t0``): content delta i is due at ``t0 + first_ns + sum(gaps_ns[:i])`` in
  ``now_ns`` time. A stall fault moves the rest of the schedule by
  ``stall_s``, counted from the later of the due time and the last write, so
  the silence is never shorter than ``stall_s``. ``sleep_until_ns`` sleeps on
  that same clock, so sleeps never accumulate drift, and never returns before
  the deadline (uvloop's timers fire up to ~1 ms early: it sleeps again).
- Nothing is held past its due time: events are queued only while the next
  one is already due, and the queue is written (one ``await send()``) before
  any sleep and at the end. Paced streams thus write each event alone when it
  is due; unpaced or overdue ones coalesce into one write (one syscall instead
  of one per event, which is what bounds throughput on a small machine).
- ``: hopbase-keepalive`` is written only in a silence: when nothing has been
  written for ``keepalive_interval_s`` and the next event is not yet due;
  never during a stall (docs/protocols.md, SSE framing).
- A client that goes away (``http.disconnect``) cancels the stream at once;
  its ground truth ends "client_closed" (or "stall" if it left during a stall).
  A task per stream watches ``receive()`` for it: uvicorn's ``send()`` drops
  data for a closed connection without a word.
- A ``disconnect`` fault returns from the app without the final body chunk:
  the server then closes the connection (uvicorn does, and logs an error that
  ``_serve`` filters out), so the client sees a truncated chunked body.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
from anyio.lowlevel import checkpoint

from ._capacity import CapacityGate
from ._behaviour import Plan, Protocol, input_tokens_of, plan_request, prefill_ns, prompt_parts, request_rng
from ._config import EmulatorConfig
from ._metrics import EmulatorMetrics
from ..workload._lengths import load_tokenizer
from ..protocols._marker import find_marker
from ._prefix import PrefixCache
from ._record import End, GroundTruth, GroundTruthWriter, boot_id
from ._rx_stamp import WIRE_RX_KEY
from ._wire import KEEPALIVE, ChatWire, MessagesWire, ResponsesWire, Wire, http_error_body

__all__ = ["EmulatorApp"]

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_ROUTES: dict[str, Protocol] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
_STREAM_FAULTS = ("midstream_error", "disconnect", "stall")

#: The emulator's clock, integer ns (see the module docstring).
now_ns = time.monotonic_ns

LATE_WRITE_NS = 100_000
"""A write of content events that ends this long after the earliest one's stamp (its due time,
when it was queued) is recorded with its own stamps (the ground truth's ``late_writes``), ns:
0.1 ms, beyond a loopback send()'s own tens of microseconds; a process descheduled between
the two, or events coalesced into a later write, lands there (issue 36)."""


async def sleep_until_ns(due_ns: int) -> None:
    """Sleep until ``now_ns() >= due_ns``; return at once if it already is.

    Args:
        due_ns: the deadline, in ``now_ns`` nanoseconds.
    """
    left_ns = due_ns - now_ns()
    if left_ns > 0:
        await anyio.sleep(left_ns / 1e9)
        # uvloop's timers have millisecond grain and fire up to ~1 ms early;
        # rounding the rest down to 0 ms would spin the loop until the deadline
        # (a third more CPU per paced event), so sleep whole milliseconds instead.
        while (left_ns := due_ns - now_ns()) > 0:
            await anyio.sleep(-(-left_ns // 1_000_000) / 1e3)


@dataclass(slots=True)
class _StreamState:
    """Mutable bookkeeping of one stream (what the ground truth will say)."""

    t0_ns: int
    keepalive_ns: int
    #: the schedule's origin: t0_ns plus the wait for a slot (``_capacity``)
    start_ns: int = 0
    last_write_ns: int = 0
    #: events due and queued, not yet handed to send()
    pending: list[bytes] = field(default_factory=list)
    events: int = 0
    content_events: int = 0
    keepalives: int = 0
    #: the worst lateness of a keepalive's hand-off against its scheduled time, ns
    keepalive_lag_max_ns: int = 0
    first_ns: int | None = None
    prev_ns: int = 0
    gaps_ns: list[int] = field(default_factory=list)
    parts: dict[str, list[str]] = field(
        default_factory=lambda: {"text": [], "reasoning": [], "tool": []})
    in_stall: bool = False
    #: worst lateness of a content delta's hand-off against its deadline, ns
    lag_max_ns: int = 0
    client_gone: bool = False
    #: when the client's close was noticed (now_ns), and content deltas queued after it
    closed_ns: int | None = None
    tokens_after_close: int = 0
    #: the behaviour's on_client_close = "finish": run on after the client left
    run_on: bool = False
    #: the last byte was handed over; a later http.disconnect is the normal close.
    finished: bool = False
    status: int = 0
    end_ns: int = 0
    #: the first body bytes handed to send() (gateway overhead's first event)
    first_write_ns: int | None = None
    #: the request-id marker found in the body (hopbench.protocols._marker)
    marker_id: str | None = None
    #: the final body bytes handed to send() (gateway overhead's upstream end)
    final_write_ns: int | None = None
    #: each keepalive comment handed to send(), now_ns (gateway overhead: the upstream's silences)
    keepalive_writes: list[int] = field(default_factory=list)
    #: the stamp of the earliest content event queued and not yet written (now_ns), None when none;
    #: how many content events were written (those queued: ``content_events``)
    pending_since: int | None = None
    written_content: int = 0
    #: the writes that ended LATE_WRITE_NS or more after their earliest content event's stamp:
    #: [first event, end (exclusive), send() called, send() returned], now_ns
    late_writes: list[list[int]] = field(default_factory=list)
    #: send() of the first / final body bytes returned, now_ns
    first_write_end_ns: int | None = None
    final_write_end_ns: int | None = None
    #: the kernel's receive stamp of the request's head (CLOCK_MONOTONIC ns) and its error,
    #: ns (``_rx_stamp``), or None: the server gave none
    wire_rx: tuple[int, int] | None = None



async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body from ASGI ``http.request`` messages; None when the client
    disconnected first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _tool_name(protocol: str, body: dict[str, Any]) -> str | None:
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    t = tools[0]
    if protocol == "chat" and isinstance(t.get("function"), dict):
        name = t["function"].get("name")
    else:
        name = t.get("name")
    return name if isinstance(name, str) and name else "tool"


def _min_tokens(body: dict[str, Any]) -> int:
    """The request's ``min_tokens`` (vLLM's extra sampling parameter), else 0."""
    v = body.get("min_tokens")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def _max_tokens(protocol: str, body: dict[str, Any]) -> int | None:
    keys = {"chat": ("max_completion_tokens", "max_tokens"), "responses": ("max_output_tokens",),
            "messages": ("max_tokens",)}[protocol]
    for k in keys:
        v = body.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


class EmulatorApp:
    """The ASGI 3 application.

    Args:
        config: the validated configuration.
        writer: where ground truth goes, or None.
    """

    def __init__(self, config: EmulatorConfig, writer: GroundTruthWriter | None = None) -> None:
        self.config = config
        self.writer = writer
        self.requests = 0
        self.metrics = EmulatorMetrics()  # GET /metrics (hopbench.emulator._metrics)
        self.capacity = CapacityGate(config)  # the slot queue and token budget (_capacity)
        self.created_s = int(time.time())
        #: the prefix cache (docs/emulator.md, "Prefix cache"), None when off
        self.prefix_cache = (PrefixCache(config.prefix_cache_blocks, config.prefix_block_tokens)
                             if config.prefix_cache_blocks else None)
        #: the config's tokenizer's counter (input tokens as a real server counts
        #: them), None: characters / 4 (``_behaviour.input_tokens_of``)
        self.count_tokens = (load_tokenizer(config.tokenizer, Path.cwd()).count
                             if config.tokenizer is not None else None)
        self.boot_id = boot_id()
        names = ["hopbench-emulator", *config.models]
        self._models_body = json.dumps({"object": "list", "data": [
            {"id": n, "object": "model", "created": self.created_s, "owned_by": "hopbench"}
            for n in names]}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    # -- plain responses -------------------------------------------------------
    @staticmethod
    async def _json(send: Send, status: int, body: bytes,
                    extra: list[tuple[bytes, bytes]] | None = None) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": _JSON_HEADERS + (extra or [])})
        await send({"type": "http.response.body", "body": body})

    def _authorized(self, scope: Scope) -> bool:
        key = self.config.api_key
        if key is None:
            return True
        auth = _header(scope, b"authorization")
        return auth == f"Bearer {key}" or _header(scope, b"x-api-key") == key

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = now_ns()
        path, method = scope["path"], scope["method"]
        if path == "/metrics" and method == "GET":
            exposition, ctype = self.metrics.render(_header(scope, b"accept"))
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", ctype.encode("latin-1"))]})
            await send({"type": "http.response.body", "body": exposition})
            return
        if path == "/v1/models" and method == "GET":
            if not self._authorized(scope):
                await self._json(send, 401, http_error_body("chat", 401))
            else:
                await self._json(send, 200, self._models_body)
            return
        protocol = _ROUTES.get(path)
        if protocol is None or method != "POST":
            await self._json(send, 404, http_error_body(protocol or "chat", 404))
            return
        raw = await _read_body(receive)
        if raw is None:
            return
        ext = scope.get("extensions")
        rx = ext.get(WIRE_RX_KEY) if ext else None  # _serve.WireStampedProtocol's kernel stamp
        wire_rx = (rx["mono_ns"], rx["error_ns"]) if rx else None
        request_id = _header(scope, b"x-hopbench-request-id")
        marker_id = find_marker(raw) if b"[hb:" in raw else None
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            await self._json(send, 400, http_error_body(protocol, 400, "Body is not a JSON object."))
            return
        model = body.get("model")
        model = model if isinstance(model, str) else ""
        stream = body.get("stream") is True
        parts = prompt_parts(body)
        input_tokens = input_tokens_of(body, parts, self.count_tokens)
        if not self._authorized(scope):
            await self._json(send, 401, http_error_body(protocol, 401))
            self._record(request_id, protocol, model, stream, None, None, 401, input_tokens,
                         "http_error", None, _StreamState(t0, 0, marker_id=marker_id, wire_rx=wire_rx), "stop", t0)
            return
        max_tokens = _max_tokens(protocol, body)
        if protocol == "messages" and max_tokens is None:
            await self._json(send, 400, http_error_body(
                protocol, 400, "max_tokens: Field required"))
            return
        index = self.requests
        self.requests += 1
        behaviour = self.config.behaviour_for(model)
        plan = plan_request(behaviour, request_rng(self.config.seed, index), protocol=protocol,
                            stream=stream, max_tokens=max_tokens,
                            tool_name=_tool_name(protocol, body),
                            ignore_eos=body.get("ignore_eos") is True, min_tokens=_min_tokens(body))
        cached: int | None = None
        created = 0
        if plan.status == 200 and not self.capacity.full():  # only a request that is served is prefilled
            if self.prefix_cache is not None:
                hit = self.prefix_cache.lookup(model, parts)
                cached, created = min(hit.hit_tokens, input_tokens), hit.new_tokens
            extra_ns = prefill_ns(behaviour, input_tokens - (cached or 0))
            if extra_ns:
                plan = replace(plan, first_ns=plan.first_ns + extra_ns)
        wire = self._wire(protocol, body, model, index, input_tokens)
        wire.cached_tokens, wire.cache_creation_tokens = cached, created
        st = _StreamState(t0, behaviour.keepalive_interval_ns, t0, marker_id=marker_id, wire_rx=wire_rx)
        st.run_on = behaviour.on_client_close == "finish"
        if plan.status == 200 and self.capacity.full():
            await self._json(send, 503, http_error_body(protocol, 503))
            self._record(request_id, protocol, model, stream, "queue_full", None, 503,
                         input_tokens, "http_error", None, st, plan.finish, now_ns())
            return

        if plan.slow_headers_ns:
            await sleep_until_ns(t0 + plan.slow_headers_ns)
        if plan.status != 200:
            await self._answer(send, receive, plan, wire, st, behaviour.faults.retry_after_s,
                               request_id, protocol, model, stream, input_tokens)
            return
        # a queued request's whole schedule starts when it leaves the queue
        await self.capacity.acquire()
        try:
            st.start_ns = now_ns()
            await self._answer(send, receive, plan, wire, st, behaviour.faults.retry_after_s,
                               request_id, protocol, model, stream, input_tokens)
        finally:
            self.capacity.release()

    def _wire(self, protocol: str, body: dict[str, Any], model: str, index: int,
              input_tokens: int) -> Wire:
        """The event writer of request number ``index``: its protocol's wire with a
        response id unique per seed and index (chat's usage chunk only when the request
        asks for it with ``stream_options.include_usage``, OpenAI's API reference)."""
        rid = {"chat": "chatcmpl-", "responses": "resp_", "messages": "msg_"}[protocol]
        rid += f"{self.config.seed:x}{index:012x}"
        if protocol == "chat":
            opts = body.get("stream_options")
            include = isinstance(opts, dict) and opts.get("include_usage") is True
            return ChatWire(rid, model, self.created_s, input_tokens, include)
        if protocol == "responses":
            return ResponsesWire(rid, model, self.created_s, input_tokens)
        return MessagesWire(rid, model, self.created_s, input_tokens)

    async def _answer(self, send: Send, receive: Receive, plan: Plan, wire: Wire,
                      st: _StreamState, retry_after_s: int, request_id: str | None,
                      protocol: str, model: str, stream: bool, input_tokens: int) -> None:
        """Carry out a plan from ``st.start_ns`` on and write its ground truth."""
        if plan.slow_headers_ns:
            await sleep_until_ns(st.start_ns + plan.slow_headers_ns)
        if plan.status != 200:
            extra = ([(b"retry-after", str(retry_after_s).encode())]
                     if plan.status == 429 else None)
            await self._json(send, plan.status, http_error_body(protocol, plan.status), extra)
            self._record(request_id, protocol, model, stream, plan.fault, None, plan.status,
                         input_tokens, "http_error", None, st, plan.finish, now_ns())
            return
        if not stream:
            await self._plain(send, plan, wire, st)
            self._record(request_id, protocol, model, stream, plan.fault, None, 200,
                         input_tokens, "completed", plan.n_tokens, st, plan.finish, st.end_ns,
                         wire.cached_tokens)
            return

        end: End = "completed"
        self.metrics.in_flight += 1
        try:
            async with anyio.create_task_group() as tg:
                # The watcher cancels the group's scope, and so the stream, when the
                # client leaves. Once the final chunk is sent, receive() returns
                # http.disconnect at once (ASGI HTTP spec, "Disconnect - receive
                # event") and the watcher ends by itself: cancelling it costs more.
                tg.start_soon(self._watch, receive, st, tg.cancel_scope)
                end = await self._stream(send, plan, wire, st)
                if end == "disconnect":  # no final chunk: receive() would wait for the close
                    tg.cancel_scope.cancel()
        finally:
            self.metrics.in_flight -= 1
        if st.client_gone and not st.run_on:
            end = "stall" if st.in_stall else "client_closed"
        self._record(request_id, protocol, model, stream, plan.fault, plan.error_code
                     if end == "failed" else None, st.status, input_tokens, end,
                     wire.reported_output, st, plan.finish, st.end_ns or now_ns(), wire.cached_tokens)

    @staticmethod
    async def _watch(receive: Receive, st: _StreamState, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not st.finished:
                    st.client_gone = True
                    st.closed_ns = now_ns()
                    if not st.run_on:  # (run on: send() drops what goes to a closed connection)
                        scope.cancel()
                return

    async def _plain(self, send: Send, plan: Plan, wire: Wire, st: _StreamState) -> None:
        """A non-streaming answer: the whole body once the whole generation is due."""
        due_ns = st.start_ns + plan.first_ns + sum(self.capacity.gap_ns(g) for g in plan.gaps_ns)
        await sleep_until_ns(due_ns)
        body = wire.body(plan.finish, "".join(plan.reasoning), "".join(plan.text),
                         plan.tool_name, "".join(plan.tool_args), plan.n_tokens)
        st.parts = {"text": list(plan.text), "reasoning": list(plan.reasoning),
                    "tool": list(plan.tool_args)}
        st.status = 200
        await send({"type": "http.response.start", "status": 200, "headers": _JSON_HEADERS})
        st.first_ns = st.first_write_ns = st.final_write_ns = now_ns()
        await send({"type": "http.response.body", "body": body})
        st.end_ns = now_ns()

    @staticmethod
    def _queue(st: _StreamState, data: bytes, n_events: int) -> None:
        st.events += n_events
        st.pending.append(data)

    @staticmethod
    async def _flush(send: Send, st: _StreamState, more_body: bool = True) -> None:
        """Write the queued events in one ``send()`` (a no-op when none are queued)."""
        if st.pending or not more_body:
            data = b"".join(st.pending)
            st.pending.clear()
            t_ns = now_ns()
            first = st.first_write_ns is None and bool(data)
            if first:
                st.first_write_ns = t_ns
            if not more_body:
                st.final_write_ns = t_ns
            await send({"type": "http.response.body", "body": data, "more_body": more_body})
            st.last_write_ns = st.end_ns = done = now_ns()
            if first:
                st.first_write_end_ns = done
            if not more_body:
                st.final_write_end_ns = done
            since = st.pending_since
            if since is not None:  # (the earliest queued event waited longest)
                if done - since >= LATE_WRITE_NS:
                    st.late_writes.append([st.written_content, st.content_events, t_ns, done])
                st.written_content = st.content_events
                st.pending_since = None

    async def _wait_until(self, send: Send, st: _StreamState, due_ns: int) -> None:
        """Sleep until ``due_ns``, writing keepalives in the silence (unless stalled)."""
        if due_ns <= now_ns():
            return
        await self._flush(send, st)
        ka = st.keepalive_ns
        if ka and not st.in_stall:
            while st.last_write_ns + ka < due_ns:
                t_ns = st.last_write_ns + ka
                await sleep_until_ns(t_ns)
                handed = now_ns()
                st.keepalive_writes.append(handed)
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
                st.keepalives += 1
                st.keepalive_lag_max_ns = max(st.keepalive_lag_max_ns, handed - t_ns)
                # the cadence counts from the scheduled time, so it never drifts
                st.last_write_ns = t_ns
        if due_ns > now_ns():
            await sleep_until_ns(due_ns)

    async def _stream(self, send: Send, plan: Plan, wire: Wire, st: _StreamState) -> End:
        """Carry out a streaming plan; return how it ended."""
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        st.status = 200
        opening = wire.opening()
        self._queue(st, b"".join(opening), len(opening))
        fault = plan.fault if plan.fault in _STREAM_FAULTS else None
        base_ns = st.start_ns + plan.first_ns
        gaps = plan.gaps_ns
        i = 0
        for kind, tokens in (("reasoning", plan.reasoning), ("text", plan.text),
                             ("tool", plan.tool_args)):
            parts = st.parts[kind]
            for token in tokens:
                if i:
                    base_ns += self.capacity.gap_ns(gaps[i - 1])
                if fault is not None and i == plan.fault_at:
                    base_ns, ended = await self._fault(send, plan, wire, st, base_ns)
                    if ended is not None:
                        return ended
                t_ns = now_ns()
                if base_ns > t_ns:
                    await self._wait_until(send, st, base_ns)
                    t_ns = now_ns()
                if st.client_gone and not st.run_on:
                    # the watcher cancelled this stream while the wait's wake-up was
                    # already due: stop here (raises), no token after the close
                    await checkpoint()
                if wire.kind != kind:
                    pre = wire.switch(kind, plan.tool_name)
                    data = b"".join(pre) + wire.delta(kind, token)
                    n = len(pre) + 1
                else:
                    data = wire.delta(kind, token)
                    n = 1
                if st.first_ns is None:
                    st.first_ns = t_ns
                else:
                    st.gaps_ns.append(t_ns - st.prev_ns)
                st.prev_ns = t_ns
                if t_ns - base_ns > st.lag_max_ns:
                    st.lag_max_ns = t_ns - base_ns
                st.content_events += 1
                if st.closed_ns is not None:
                    st.tokens_after_close += 1
                parts.append(token)
                if st.pending_since is None:
                    st.pending_since = t_ns
                self._queue(st, data, n)
                if len(st.pending) >= 256:  # bound the memory of a long unpaced stream
                    await self._flush(send, st)
                i += 1
        if fault is not None and i == plan.fault_at:
            _, ended = await self._fault(send, plan, wire, st, now_ns())
            if ended is not None:
                return ended
        closing = wire.closing(plan.finish, omit_done=plan.fault == "omit_done")
        self._queue(st, b"".join(closing), len(closing))
        st.finished = True
        await self._flush(send, st, more_body=False)
        return "completed"

    async def _fault(self, send: Send, plan: Plan, wire: Wire, st: _StreamState,
                     due_ns: int) -> tuple[int, End | None]:
        """Strike a mid-stream fault when the next delta is due.

        Returns:
            (the next delta's new due time in ns, the end if the stream ended).
        """
        if plan.fault == "stall":
            await self._flush(send, st)
            st.in_stall = True
            # stall_s of silence, counted from the last byte when that went out
            # after the due time (an unpaced or late stream): never a shorter one
            resume_ns = max(due_ns, st.last_write_ns) + plan.stall_ns
            await sleep_until_ns(resume_ns)
            st.in_stall = False
            # the keepalive cadence restarts after the stall instead of catching up
            st.last_write_ns = now_ns()
            return resume_ns, None
        await self._wait_until(send, st, due_ns)
        if plan.fault == "disconnect":
            await self._flush(send, st)
            st.end_ns = now_ns()
            st.finished = True
            return due_ns, "disconnect"
        assert plan.error_code is not None
        events = wire.error(plan.error_code)
        self._queue(st, b"".join(events), len(events))
        st.finished = True
        await self._flush(send, st, more_body=False)
        return due_ns, "failed"

    def _record(self, request_id: str | None, protocol: str, model: str, stream: bool,
                fault: str | None, error_code: str | None, status: int, input_tokens: int,
                end: End, output_tokens: int | None, st: _StreamState, finish: str,
                end_ns: int, cached_tokens: int | None = None) -> None:
        self.metrics.request_done(status, fault, st.events,
                                  len(st.parts["text"]) + len(st.parts["reasoning"]) + len(st.parts["tool"]))
        if self.writer is None:
            return
        if protocol == "messages" and error_code is not None:
            error_code = "api_error"
        self.writer.write(GroundTruth(
            request_id=request_id, protocol=protocol, model=model, stream=stream, fault=fault,
            error_code=error_code, status=status,
            ttft_ns=None if st.first_ns is None else st.first_ns - st.t0_ns,
            gaps_ns=st.gaps_ns, events=st.events, content_events=st.content_events,
            keepalives=st.keepalives, input_tokens=input_tokens, output_tokens=output_tokens,
            output_tokens_sent=len(st.parts["text"]) + len(st.parts["reasoning"])
            + len(st.parts["tool"]),
            end=end, text="".join(st.parts["text"]),
            reasoning_text="".join(st.parts["reasoning"]),
            tool_arguments="".join(st.parts["tool"]), finish_reason=finish,
            duration_ns=max(0, end_ns - st.t0_ns), lag_max_ns=st.lag_max_ns,
            t0_mono_ns=st.t0_ns,  # now_ns is time.monotonic_ns: CLOCK_MONOTONIC
            client_closed_ns=None if st.closed_ns is None else st.closed_ns - st.t0_ns,
            tokens_after_close=st.tokens_after_close,
            queue_ns=max(0, st.start_ns - st.t0_ns), cached_tokens=cached_tokens,
            **self._overhead_fields(st)))

    def _overhead_fields(self, st: _StreamState) -> dict[str, Any]:
        """The ground truth's gateway-overhead fields (docs/gateway-overhead.md)."""
        p = st.parts
        return {"marker_id": st.marker_id,
                "first_write_ns": None if st.first_write_ns is None else st.first_write_ns - st.t0_ns,
                "first_write_end_ns": None if st.first_write_end_ns is None else st.first_write_end_ns - st.t0_ns,
                "final_write_ns": None if st.final_write_ns is None else st.final_write_ns - st.t0_ns,
                "final_write_end_ns": None if st.final_write_end_ns is None else st.final_write_end_ns - st.t0_ns,
                "late_writes": [[i, j, a - st.t0_ns, b - st.t0_ns] for i, j, a, b in st.late_writes],
                "event_chars": [len(x) for kind in ("reasoning", "text", "tool") for x in p[kind]],
                "keepalive_write_ns": [t - st.t0_ns for t in st.keepalive_writes],
                "keepalive_lag_max_ns": st.keepalive_lag_max_ns,
                "boot_id": self.boot_id,
                "t0_wire_mono_ns": None if st.wire_rx is None else st.wire_rx[0],
                "t0_wire_error_ns": None if st.wire_rx is None else st.wire_rx[1]}
