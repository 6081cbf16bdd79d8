"""One stream: plan, send, read loop, record, and a session's turns.

Role: a mixin of ``LoadRunner`` (hopbench.engine._runner). A request is planned
(``_plan``: id, arm, pool entry, cancel draw, headers, body and the httpx
request) before its send; ``_stream`` sends it within its timeouts
(``_send``), reads its body (``_exchange``: raw bytes -> ``SSEScanner`` -> the
protocol's decoder -> ``StreamMeter``, stamps only: each read's loop time, client
lag and the kernel's receive stamp of its latest bytes, from which the meter
stamps each event when it reached the socket, docs/results/units.md "Times from
the wire") and records it
(``_record``: ``measure`` applies the metric rules, the frozen ``StreamRecord``
goes to the ``Recorder`` and to streams.jsonl). ``_session`` runs a
multi-turn session's turns one after the other.

Invariants: exactly one outcome per started stream (completed, failed,
truncated, timeout, connect_error, http_error, cancelled, or the client's own
cancel); every foreign exception becomes an outcome at one boundary
(``_send``, through hopbench.engine._classify); ``trio.Cancelled`` is recorded
as "cancelled" and raised again, never swallowed; times are integer ns on the
runner's clock; the read loop adds no call per read (benchmarks/bench_run.py).
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx
import trio

from .._clock import now_ns, ns_to_s
from ..config._arm_spec import arm_of_request
from ..config._records import LoadSpec, Profile, Scenario
from ..config._scenario_spec import request_headers
from ..measure._burst import FlaggedBurst, FlaggedLog
from ..measure._inflight import AWAITING_HEADERS, CLOSING, CONNECTING, OUT, STREAMING, WAITING, InFlightGauge
from ..measure._lines import (GATEWAY_KIND_HEADERS, HeaderValues, add_run_fields, capture_headers,
                              stream_line)
from ..measure._meter import StreamMeter
from ..measure._rules import measure
from ..measure._sinks import record_lengths, record_stream, recorder_sink
from ..measure._recorder import Recorder
from ..measure._slo import judge, record_verdict
from ..measure._wire_text import CodeNames, ErrorSamples, Scrubber, describe_exception
from ..protocols import StreamResult, new_decoder
from ..protocols._marker import marked_template
from ..protocols._requests import asks_usage
from ..sse import SSEScanner
from ..workload._cancel import CANCEL_OUTCOME, ClientCancel, chooses
from ..workload._pool import Picker, Prepared
from ..workload._sessions import Conversation, record_turn
from ._client import _Client, send_own
from ._classify import _detail, _http_error_code, classify_exception, wire_detail
from ._runqueue import RunQueueWatch
from ._schedule import LATER_SENT, SENT, WindowCount
from ._transport import SENT_AT, StreamTransport
from ._watch import away_ns

__all__ = ["REQUEST_ID_HEADER", "StreamMixin"]

REQUEST_ID_HEADER = "x-hopbench-request-id"
_ERROR_BODY_LIMIT = 64 * 1024
#: how long the rest of a body may take once its terminal signal arrived
_AFTER_END_S = 1.0
_SPENT_BODY = httpx.ByteStream(b"")  # a closed response's body (no cycle back to it)
_NO_SCOPE = contextlib.nullcontext()  # a stream without a client cancel: no scope of its own
_IDLE_SLACK_NS = 100_000_000  # an idle timeout may fire up to this much late

_REQUEST_ID_RAW = REQUEST_ID_HEADER.encode("ascii")


@dataclass(slots=True, eq=False)
class _Plan:
    """One request made ready before its send (``LoadRunner._plan``): its
    scenario, what it was built from, its arm (compare rounds), the client's
    own cancel draw, scope, headers (with its id), (input, output) length
    shape, whether usage is expected, its in-flight stage ``[phase, written]``,
    and the httpx request (or the exception building it raised)."""

    sc: Scenario
    req: Prepared | None
    arm: tuple[str, str] | None
    cancel: Any
    scope_name: str
    headers: dict[str, str]
    shape: tuple[int | None, int] | None
    expect: bool
    stage: list[Any]
    request: httpx.Request | Exception | None = None

class StreamMixin:
    """One stream, from its plan to its record (a mixin of ``LoadRunner``).

    Owns (sets): ``_transport_factory`` (``LoadRunner``'s parameter), the
    client's transport ``_transport`` (hopbench's own, or None
    with httpx's) and the request templates (``_request_templates``); what a
    request is made of (``_pickers``, ``_headers``, ``_arm_headers``,
    ``_next_id``, ``_arm_next``, ``_round``, ``_expect_usage``, ``_overhead``,
    ``_markers``, ``_sessions_started``); what is recorded beside the recorder
    (``cancels``, ``flagged``, ``_header_values``, ``_record_headers``) and the
    wire's error texts (``_scrubber``, ``_codes``, ``_samples``, shared with
    ``stats.error_samples``).

    Reads of ``LoadRunner``: ``profile``, ``load``, ``stats``, ``rec``, ``warm``,
    ``on_stream``, ``base_url``, ``_arms``, ``_rng``, ``_cancel_rng``,
    ``_id_prefix``, ``_t0``, ``_mono_offset_ns``, ``_gauge``, ``_idle_changed``,
    ``_client``, ``_take_request``; of the watch (hopbench.engine._watch):
    ``_check_reachable``, ``_check_failing``, ``_client_lag_ns``, ``_runq``, ``_loop_lag_ns``, ``_blackouts``,
    ``_probe_due_ns``, ``_last_error`` (written here); of the open loop:
    ``_window``.
    """

    profile: Profile
    load: LoadSpec
    stats: Any  # LoadRunner's RunStats (hopbench.engine._runner imports this module)
    rec: Recorder
    warm: Recorder
    on_stream: Callable[[dict[str, Any]], None] | None
    base_url: str
    _arms: tuple[tuple[str, str], ...]
    _rng: random.Random
    _cancel_rng: random.Random
    _id_prefix: str
    _t0: int
    _mono_offset_ns: int
    _gauge: InFlightGauge
    _idle_changed: trio.Event
    _client: httpx.AsyncClient
    _take_request: Callable[[], bool]
    _check_reachable: Callable[[str, str, bool], None]
    _check_failing: Callable[[str, str, int | None, str, bool], None]
    _client_lag_ns: Callable[[int, int, bool], tuple[int, int]]
    _runq: RunQueueWatch
    _loop_lag_ns: Callable[[int], int]
    _blackouts: collections.deque[tuple[int, int]]
    _probe_due_ns: int
    _last_error: str
    _window: WindowCount | None

    def _init_stream(self, env: dict[str, str] | None, transport_factory: Callable[..., StreamTransport]) -> None:
        """Set the stream side's own attributes (called by ``LoadRunner.__init__``,
        after ``stats`` and ``_arms``, which documents its parameters)."""
        profile = self.profile
        self._transport_factory = transport_factory
        #: the measured streams the client cancelled on purpose (hopbench.workload._cancel)
        self.cancels: list[ClientCancel] = []
        #: the measured streams flagged proxy_buffering_suspected, re-judged after the run
        #: against the origin's record (hopbench.measure._burst; bounded, kept whatever run.stream_log)
        self.flagged = FlaggedLog()
        #: per scenario: which of its bodies each request sends (docs/workloads.md)
        self._pickers = {s.name: Picker(len(s.bodies), s.replacement) for s in profile.scenarios}
        self._headers = {p: request_headers(profile.target, p, env) for p in
                         {s.protocol for s in profile.scenarios}}
        self._next_id = 0
        # an arm's own auth keys (hopbench.config._arm_spec: its target), else the profile's target
        arm_targets = {a.name: a.target for a in profile.arms if a.target is not None}
        self._arm_headers = {(name, p): request_headers(arm_targets[name], p, env)
                             for name, _ in self._arms if name in arm_targets for p in self._headers}
        self._arm_next = 0  # the next request's place in its round (its arm: arm_of_request)
        self._round: tuple[Scenario, int, Any] | None = None  # the round's (scenario, body, cancel)
        env_map = os.environ if env is None else env
        secrets: list[str] = []
        for t in (profile.target, *arm_targets.values()):
            secrets += [env_map[v] for v in t.header_env.values() if v in env_map]
            if t.api_key_env is not None and t.api_key_env in env_map:
                secrets.append(env_map[t.api_key_env])
        self._scrubber = scrubber = Scrubber(secrets)
        self._codes = CodeNames(scrubber)
        self._samples = ErrorSamples(scrubber)
        self.stats.error_samples = self._samples.samples
        self._expect_usage = {b: asks_usage(s.protocol, b) for s in profile.scenarios for b in s.bodies}
        self._request_templates: dict[tuple[int, str], tuple[httpx.URL, httpx.Headers,
                                                             dict[str, Any], dict[str, str]]] = {}
        #: hopbench's own transport (None with httpx's)
        self._transport: StreamTransport | None = None
        self._sessions_started: dict[str, int] = {}  # per scenario: sessions begun (their index)
        self._header_values = HeaderValues()
        self._record_headers = profile.run.record_headers + (  # behind a gateway: which gateway
            tuple(h for h in GATEWAY_KIND_HEADERS if h not in profile.run.record_headers)
            if getattr(profile, "upstream", None) is not None else ())
        # Gateway overhead (docs/gateway-overhead.md): each body's last user message
        # carries the request id too, and streams.jsonl gets per-event stamps.
        self._overhead = profile.upstream is not None
        self._markers = ({b: marked_template(s.protocol, b) for s in profile.scenarios for b in s.bodies}
                         if self._overhead else {})

    def _make_client(self) -> httpx.AsyncClient:
        t = self.profile.target
        to = self.profile.run.timeouts
        conn_s = ns_to_s(to.connect_ns) if to.connect_ns else None
        # Read timeouts are enforced by the runner's own deadlines (first byte,
        # idle, total), so they can be told apart; httpx's read timeout is off.
        timeout = httpx.Timeout(connect=conn_s, read=None, write=conn_s, pool=conn_s)
        if t.transport == "hopbench":
            self._transport = own = self._transport_factory(verify=t.verify_tls)
            transport: httpx.AsyncBaseTransport = own
        else:
            n = max(self.load.concurrency, self.load.max_in_flight)
            transport = httpx.AsyncHTTPTransport(
                verify=t.verify_tls,
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
        return _Client(base_url=self.base_url, transport=transport, timeout=timeout,
                       trust_env=t.transport == "httpx")

    def _build_request(self, path: str, content: bytes, base: dict[str, str], request_id: str,
                       trace: Callable[[str, dict[str, Any]], Any]) -> httpx.Request:
        """The request ``client.build_request("POST", path, content=..., headers={**base,
        REQUEST_ID_HEADER: request_id}, extensions={"trace": trace})`` would build, for a
        sixth of its CPU (~45 us instead of ~300 us): the URL joined with the base URL,
        the client's headers merged with ``base`` and the timeouts are worked out once
        per (``base``, ``path``) by httpx itself, then reused. Once the target has set a
        cookie (the client's jar is not empty) every request is built by httpx, with it.

        Raises:
            whatever httpx raises for a bad URL or header (the caller's boundary maps it).
        """
        if self._client.cookies:
            return self._client.build_request("POST", path, content=content,
                                              headers={**base, REQUEST_ID_HEADER: request_id},
                                              extensions={"trace": trace})
        key = (id(base), path)
        tpl = self._request_templates.get(key)
        if tpl is None:
            probe = self._client.build_request("POST", path, content=b"", headers=base)
            merged = httpx.Headers(probe.headers)
            for name in (REQUEST_ID_HEADER, "content-length"):  # per request
                if name in merged:
                    del merged[name]
            # (base is kept referenced: its id stays its own while the template lives)
            tpl = (probe.url, merged, probe.extensions["timeout"], base)
            self._request_templates[key] = tpl
        if self._transport is None:  # httpx's transport: it frames the body by the request's headers
            return httpx.Request("POST", tpl[0], content=content,
                                 headers=[*tpl[1].raw, (_REQUEST_ID_RAW, request_id.encode("ascii"))],
                                 extensions={"trace": trace, "timeout": tpl[2]})
        # hopbench's transport writes Content-Length itself (_transport._request_bytes):
        # the body as a ready stream skips httpx's encoding of it and its defaults
        # (Host and the rest are in the template already), ~60 us a request
        headers = httpx.Headers(tpl[1])
        headers[REQUEST_ID_HEADER] = request_id
        request = httpx.Request("POST", tpl[0], headers=headers, stream=httpx.ByteStream(content),
                                extensions={"trace": trace, "timeout": tpl[2]})
        request.read()  # (its .content, which the dispatcher thread's wire form reads)
        return request

    def _recorder_for(self, start_ns: int) -> Recorder:
        """The recorder of a stream that started (or was due) at ``start_ns`` (clock
        ns): the warm-up one before ``run.warmup_s``, else the measured one."""
        return self.warm if start_ns - self._t0 < self.profile.run.warmup_ns else self.rec

    async def _session(self, sc: Scenario, intended_ns: int | None) -> str:
        """One multi-turn session (docs/workloads.md, "Multi-turn sessions"):
        each turn sends the conversation so far and the target's streamed
        text is appended for the next; a think time passes before each later
        turn. The first turn's request was already taken from the budget.
        The session ends early when a turn does not complete with text, or
        the run stops. Open loop: a later turn's latency counts from when its
        think time ended (its intended start).

        Returns:
            The last turn's outcome.
        """
        spec = sc.session
        picker = self._pickers[sc.name]
        k = self._sessions_started.get(sc.name, 0)
        self._sessions_started[sc.name] = k + 1
        conv = Conversation(sc.protocol, sc.model, sc.include_usage, sc.extra,
                            spec.entries[picker.pick(self._rng)], script=spec.from_dataset)
        # a dataset record replayed as a session has as many turns as user messages
        n_turns = conv.turns if spec.from_dataset else spec.turn_counts[k % len(spec.turn_counts)]
        sid = f"{self._id_prefix}{sc.name}-{k}"
        box: list[Any] = [None]
        outcome = "cancelled"
        for turn in range(1, n_turns + 1):
            if turn > 1:
                due = now_ns() + spec.think_ns
                if spec.think_ns:  # a user thinking holds its load (docs/results/in-flight.md)
                    self._gauge.think(due - spec.think_ns, 1)
                    try:
                        await trio.sleep_until(ns_to_s(due))
                    finally:
                        self._gauge.think(now_ns(), -1)
                if not self._take_request():
                    break
                if intended_ns is not None:
                    intended_ns = due
                req = conv.request(None if spec.from_dataset else spec.entries[picker.pick(self._rng)])
            else:
                req = conv.request(None)
            req = replace(req, fields=(("session", sid), *req.fields), turn=turn, keep_text=True,
                          on_result=lambda r: box.__setitem__(0, r))
            box[0] = None
            outcome = await self._stream(sc, intended_ns, False, req)
            result = box[0]
            if outcome != "completed" or result is None or not result.text:
                break
            conv.answer(result.text)
        return outcome

    def _plan(self, sc: Scenario, req: Prepared | None = None) -> _Plan:
        """Everything about one request that comes before it is sent: its id,
        arm, pool entry, cancel draw, headers, body and the httpx request
        (built here: its ~50 us of CPU are the client's own work, not the
        target's latency). An open loop plans ahead of the arrival's time
        (hopbench.engine._dispatch); every other stream right before it sends."""
        self._next_id += 1
        arm = self._arms[arm_of_request(self._next_id, len(self._arms))] if self._arms else None
        if arm is not None and self._arm_next and self._round is not None:
            sc, pick, cancel = self._round  # the round's other arms: the same request
        else:
            # a request built for this send (trace, session turn) picks no pool entry
            pick = self._pickers[sc.name].pick(self._rng) if req is None else -1
            cancel = sc.cancel if chooses(sc.cancel, self._cancel_rng) else None
            self._round = (sc, pick, cancel)
        if arm is not None:
            self._arm_next = (self._arm_next + 1) % len(self._arms)
        scope_name = arm[0] if arm is not None else sc.name
        headers = dict(self._arm_headers.get((scope_name, sc.protocol)) or self._headers[sc.protocol])
        headers[REQUEST_ID_HEADER] = f"{self._id_prefix}{self._next_id}"
        if req is None:  # one of the scenario's pre-encoded bodies
            body = sc.bodies[pick]
            shape = sc.lengths[pick] if sc.lengths else None
            expect = self._expect_usage.get(body, False)
        else:  # built for this send (trace replay, session turns)
            body, shape, expect = req.body, req.shape, req.expect_usage
        content = body
        if self._overhead:  # the request id also in the last user message (docs/gateway-overhead.md)
            tpl = self._markers.get(body) if req is None else marked_template(sc.protocol, body)
            if tpl is not None:
                content = tpl[0] + headers[REQUEST_ID_HEADER].encode() + tpl[1]
        gauge = self._gauge
        # [the stream's phase (hopbench.measure._inflight), whether its request was written,
        # when the gauge counted it awaiting headers (clock ns), the stream's timeout
        # scope and its total deadline (ns) once _stream has them, its turn among the
        # loop's writes of its due time (_WriteTurns, ticket) or None,
        # httpx's transport only: stamps before and after its request body's write, ns (0: none)]
        stage: list[Any] = [WAITING, False, 0, None, None, None, 0, 0]
        first_byte_ns = self.profile.run.timeouts.first_byte_ns
        plan = _Plan(sc, req, arm, cancel, scope_name, headers, shape, expect, stage)

        # (the closure never holds the plan: plan -> request -> trace -> plan
        # would be a cycle per stream, freed only by the collector)
        async def trace(name: str, info: dict[str, Any]) -> None:
            # httpcore's trace names; StreamTransport emits the same two
            if name.endswith("send_request_headers.started"):
                turn = stage[5]
                if turn is not None:  # after the earlier requests of its due time (_WriteTurns)
                    await turn[0].wait(turn[1])
                    turn[0].release(turn[1])
                t = now_ns()
                if stage[0] == CONNECTING and stage[3] is not None and first_byte_ns:
                    # first_byte_s counts from the request's send, not from before its
                    # connect (docs/profiles.md): a slow connect within connect_s is
                    # not a first-byte timeout
                    total = stage[4]
                    stage[3].deadline = ns_to_s(t + first_byte_ns if total is None
                                                else min(t + first_byte_ns, total))
                gauge.move(t, stage[0], AWAITING_HEADERS, not stage[1])
                stage[0], stage[1], stage[2] = AWAITING_HEADERS, True, t
            elif name.endswith("send_request_body.started"):  # httpx's transport (own: SENT_AT)
                stage[6] = now_ns()
            elif name.endswith("send_request_body.complete"):
                stage[7] = now_ns()
            elif name.endswith(("connect_tcp.started", "connect_unix_socket.started")):
                if stage[3] is not None and first_byte_ns:  # the connect has connect_s
                    stage[3].deadline = ns_to_s(1 << 62 if stage[4] is None else stage[4])
                gauge.move(now_ns(), stage[0], CONNECTING)
                stage[0] = CONNECTING

        try:
            plan.request = self._build_request(sc.path if arm is None else arm[1] + sc.path, content,
                                               self._arm_headers.get((scope_name, sc.protocol))
                                               or self._headers[sc.protocol], headers[REQUEST_ID_HEADER],
                                               trace)
        except Exception as exc:  # raised again inside the per-stream boundary of _stream
            plan.request = exc
        return plan

    async def _stream(self, sc: Scenario, intended_ns: int | None, counted: bool = False,
                      req: Prepared | None = None, plan: _Plan | None = None,
                      sent_ns: int | None = None, taken_ns: int | None = None,
                      turn: tuple[Any, int] | None = None) -> str:
        """One stream, from its send to its record; returns its outcome.
        ``plan``: made ahead (open loop); ``sent_ns``: when hopbench.engine._dispatch's
        thread wrote its request (the gauge already has it awaiting headers);
        ``taken_ns``: when the open loop took its arrival up (load.sent);
        ``turn``: its place among the loop's writes of its due time (a
        ``hopbench.engine._open_loop._WriteTurns`` and its ticket, ``_write_turn``;
        a plan made ahead has it in its stage already).

        Never raises for server behaviour (``_send`` maps it to an outcome);
        ``trio.Cancelled`` is recorded as "cancelled" (with what the decoder made of
        the body so far; by its own outcome when its terminal signal had arrived)
        and raised again."""
        if plan is None:
            plan = self._plan(sc, req)
        if turn is not None:
            plan.stage[5] = turn
        sc, req, scope_name, stage = plan.sc, plan.req, plan.scope_name, plan.stage
        assert plan.request is not None
        self.stats.requests_started += 1
        gauge = self._gauge
        if not counted:  # (an open-loop arrival was counted when it was spawned or sent)
            gauge.move(now_ns(), OUT, WAITING)
        sent = now_ns() if sent_ns is None else sent_ns
        start = intended_ns if intended_ns is not None else sent
        rec = self._recorder_for(start)
        # gaps go to the recorder as they are measured: into the interval they occurred in
        slo = sc.slo  # a per-request ITL percentile needs the stream's own digest (docs/slo.md)
        # so do the arms' paired verdicts (per-stream ITL p50/p99: docs/ab-arms.md)
        meter = StreamMeter(start, sent, recorder_sink(rec, scope_name),
                            itl_digest=bool(self._arms) or (slo is not None and slo.itl_ns is not None
                                                            and slo.itl_percentile is not None),
                            bounds=rec.bound_sink(scope_name),
                            read_lags=rec.many_sink(scope_name, "client_read_lag"))
        if self._overhead:  # per-event stamps for gateway overhead (grow with the stream)
            meter.event_chars, meter.event_read_ns, meter.event_crc, meter.keepalive_read_ns = [], [], [], []
            meter.quiet_read_ns = []
        rec.incr(scope_name, "started")
        outcome = "cancelled"
        detail = ""
        result: StreamResult | None = None
        # [what the decoder made of the body, whether its terminal signal arrived]:
        # kept when the body then breaks or times out
        # and [2] the error text worth keeping (exception chain, HTTP error body)
        # and [3] when the response (and, unfinished, its connection) began to close
        # and [4] what was wrong with a 2xx response's head (a Content-Type other than
        # text/event-stream): the sample of a stream that then broke with no text of its own
        # and [5] the response's Content-Type (the failing-target check names it)
        box: list[Any] = [None, False, None, None, None, ""]
        try:
            outcome, detail, result = await self._send(plan, meter, rec, box, sent)
        finally:
            if stage[5] is not None:  # written or not, it no longer holds up the later ones
                stage[5][0].release(stage[5][1])
            if result is None and box[0] is not None:
                # the run cancelled it (a second SIGINT, run.grace_s): ``_send`` raised
                # before it returned what the decoder had made of the body; keep it
                result = box[0]
                if box[1]:  # its terminal signal had arrived: it ended by itself
                    outcome, detail = result.outcome, _detail(result)
            end = now_ns()
            meter.close(end)
            detail = wire_detail(self._codes, self._scrubber, self._samples, outcome, detail, result,
                                 box[2], box[4])
            self.stats.codes_folded = self._codes.folded
            self._check_reachable(outcome, detail, meter.headers_ns is not None)
            self._check_failing(outcome, detail, meter.status, box[5], outcome == "completed" or (
                result is not None and result.content_events > 0))
            self._record(plan, meter, rec, end, outcome, detail, result, box[3], intended_ns, taken_ns)
            gauge.move(max(end, gauge.last_ns), stage[0], OUT)
            self._idle_changed.set()
            self._idle_changed = trio.Event()
            if req is not None and req.on_result is not None:
                req.on_result(result)
        return outcome

    async def _send(self, plan: _Plan, meter: StreamMeter, rec: Recorder, box: list[Any],
                    sent: int) -> tuple[str, str, StreamResult | None]:
        """Send ``plan``'s request (due to leave at ``sent``, ns) and read its response
        (``_exchange``) within the stream's timeouts and the client's own cancel.

        Returns:
            (outcome, detail, result): the stream's outcome and counter detail
            (the timeout's kind, the mapped exception's), and what the decoder
            made of the body (None before one was read).

        Raises:
            trio.Cancelled: the run's stop or grace period cancelled the stream.
            whatever ``classify_exception`` raises again (a bug in hopbench).
        """
        to = self.profile.run.timeouts
        sc, req, cancel, stage = plan.sc, plan.req, plan.cancel, plan.stage
        request = plan.request
        assert request is not None
        outcome = "cancelled"
        detail = ""
        result: StreamResult | None = None
        total_deadline = sent + to.total_ns if to.total_ns else None
        with trio.CancelScope() as scope:
            first = sent + to.first_byte_ns if to.first_byte_ns else None
            scope.deadline = ns_to_s(min(x for x in (first, total_deadline, 1 << 62) if x is not None))
            stage[3], stage[4] = scope, total_deadline  # (a connect moves `first`: see _plan)
            # the client's own cancel after a time (hopbench.workload._cancel): a scope
            # of its own, told apart from the timeouts' scope
            # (no scope at all without one: ~5 us a stream)
            leave = (trio.CancelScope(deadline=ns_to_s(sent + cancel.after_ns))
                     if cancel is not None and cancel.after_ns is not None else None)
            with leave if leave is not None else _NO_SCOPE:
                try:
                    outcome, detail, result = await self._exchange(
                        sc, request, meter, scope, total_deadline, rec, box, stage, plan.expect,
                        None if cancel is None else cancel.after_events, plan.scope_name,
                        (req is not None and req.keep_text) or self._overhead)
                except trio.Cancelled:
                    raise
                except Exception as exc:  # the per-stream boundary
                    phase = "body" if meter.headers_ns is not None else "headers"
                    outcome, detail = classify_exception(exc, phase)
                    self._last_error = box[2] = self._scrubber.scrub(describe_exception(exc))[:300]
                    result = box[0]
                    if box[1]:  # broken after its terminal signal: the stream itself ended
                        outcome, detail = result.outcome, _detail(result)
            if leave is not None and leave.cancelled_caught:
                outcome, detail, result = CANCEL_OUTCOME, "after_ms", box[0]
                if box[1]:  # its terminal signal had arrived: it ended by itself
                    outcome, detail = result.outcome, _detail(result)
        if scope.cancelled_caught and box[1]:
            result = box[0]  # the rest of the body after the terminal signal never came
            outcome, detail = result.outcome, _detail(result)
        elif scope.cancelled_caught:
            t = now_ns()
            if total_deadline is not None and t >= total_deadline:
                detail = "total"
            elif meter.headers_ns is None:
                detail = "first_byte"
            else:
                detail = "idle"
            outcome = "timeout"
            result = box[0]
        return outcome, detail, result

    def _record(self, plan: _Plan, meter: StreamMeter, rec: Recorder, end: int, outcome: str, detail: str,
                result: StreamResult | None, closed_ns: int | None, intended_ns: int | None,
                taken_ns: int | None) -> None:
        """Measure the stream that ended at ``end`` (ns) and record it: the recorder's
        histograms and counters, its SLO verdict, a client cancel and a flagged burst
        (measured streams only), the requested lengths, the trace's cache figures, a
        session turn, the open loop's window (load.sent) and its streams.jsonl line.
        ``closed_ns``: when its response began to close (None: no response yet)."""
        sc, req, arm, scope_name, headers, shape, stage = (plan.sc, plan.req, plan.arm, plan.scope_name,
                                                           plan.headers, plan.shape, plan.stage)
        record = measure(meter, end, outcome, detail, result,
                         keepalive_budget_ns=self.profile.run.keepalive_budget_ns)
        record_stream(rec, scope_name, record, self._header_values)
        if sc.slo is not None:  # docs/slo.md
            record_verdict(rec, scope_name, judge(sc.slo, record))
        if outcome == CANCEL_OUTCOME and rec is self.rec:  # joined with the upstream's record
            closed = closed_ns if closed_ns is not None else end  # (no response yet: httpx closed it)
            self.cancels.append(ClientCancel(headers[REQUEST_ID_HEADER], scope_name,
                                             closed + self._mono_offset_ns, record.output_events))
        if record.proxy_buffering_suspected and record.burst_held_ns is not None and rec is self.rec:
            self.flagged.add(FlaggedBurst(headers[REQUEST_ID_HEADER], scope_name, record.burst_held_ns,
                                          record.output_events))
        record_lengths(rec, scope_name, record, shape)
        if (req is not None and req.implied_cached is not None and record.cached_tokens is not None
                and record.input_tokens):  # the trace's own hit figure, over the same streams
            rec.incr(scope_name, "cache.implied_tokens", req.implied_cached)
            if shape is not None and shape[0]:  # its denominator: the tokens hopbench sent
                rec.incr(scope_name, "cache.implied_prompt_tokens", shape[0])
        if req is not None and req.turn:  # docs/results/counters.md, "Sessions"
            record_turn(rec, scope_name, req.turn, outcome, record.ttft_ns, record.input_tokens,
                        record.cached_tokens)
            if req.turn > 1:  # not an arrival: "Load held" counts sessions, not their turns
                rec.incr(scope_name, "session.later_turns_started")
                if stage[1]:
                    rec.incr(scope_name, "session.later_turns_sent")
        if stage[1] and intended_ns is not None and self._window is not None:
            # an open loop's request, counted by its due time whenever it was written
            # (load.sent; a later session turn is not an arrival: docs/results/in-flight.md, "Load held")
            later = req is not None and req.turn > 1
            self._window.note(LATER_SENT if later else SENT, intended_ns, end, None if later else taken_ns)
        if self.on_stream is not None:
            request = plan.request  # when its last byte went out (docs/gateway-overhead.md)
            sent_at = request.extensions.get(SENT_AT) if isinstance(request, httpx.Request) else None
            if sent_at is None and stage[7]:  # httpx's transport: its trace's stamps
                sent_at = (stage[6], stage[7])
            line = stream_line(record, headers[REQUEST_ID_HEADER], scope_name, self._t0, sent_at)
            self.on_stream(add_run_fields(line, record, meter, self._t0, warmup=rec is not self.rec,
                                          arm=None if arm is None else arm[0], scenario=sc.name, shape=shape,
                                          fields=None if req is None else req.fields, overhead=self._overhead))

    async def _exchange(self, sc: Scenario, request: httpx.Request | Exception,
                        meter: StreamMeter, scope: trio.CancelScope, total_deadline: int | None,
                        rec: Recorder, box: list[Any], stage: list[Any],
                        expect_usage: bool = False, cancel_events: int | None = None,
                        scope_name: str = "", keep_text: bool = False,
                        ) -> tuple[str, str, StreamResult | None]:
        """Send ``request`` and read its response to the end: the read loop.

        Returns:
            (outcome, detail, result) of a response that arrived: an HTTP error
            ("http_error", "<status>[:<code>]", None), the decoder's verdict on
            a stream, or the client's own cancel after ``cancel_events``.

        Raises:
            whatever sending or reading raises (httpx's, trio's, OS errors, an
            oversize event): ``_send``'s per-stream boundary maps it.
        """
        # One flat function on purpose: the per-read loop below is the hot path
        # (read -> SSEScanner.feed -> Decoder.feed -> StreamMeter.on_observations), with
        # every callee bound before it and no helper call added per read; its cost is
        # measured as CPU us per event by benchmarks/bench_run.py (against the commit before).
        client = self._client
        idle_ns = self.profile.run.timeouts.idle_ns
        if isinstance(request, Exception):
            raise request
        own = self._transport
        response = (await client.send(request, stream=True) if own is None
                    else await send_own(self._client, own, request))
        try:
            t = now_ns()
            status = meter.status = response.status_code
            # hopbench's own transport hands its body out (None from httpx's): its kernel
            # stamps; the head is stamped when its bytes arrived (docs/results/units.md, "Times
            # from the wire"), else at this read with its client lag as the bound
            direct = response.extensions.get("hopbench.body")
            head_rx = getattr(direct, "head_rx_ns", 0) or 0
            meter.on_headers(t, head_rx, self._client_lag_ns(t, head_rx, True)[0])  # (the head: capped, as before)
            if self._record_headers:
                meter.headers = capture_headers(response.headers.get, self._record_headers)
            # The head arrived at its kernel stamp, maybe well before a busy loop read it:
            # the stream is counted streaming from then on (never before its send), so
            # that an end counted back to its bytes' arrival (below) never comes before
            # it (a head and its terminal event in one read made "streaming" negative).
            # (below, hopbench's body is iterated directly: no httpx generator layers per read)
            streaming_ns = self._gauge.move_late(t, t - head_rx if head_rx else 0,
                                                 max(meter.sent_ns, stage[2]), stage[0], STREAMING)
            stage[0] = STREAMING
            slack = min(idle_ns // 16, _IDLE_SLACK_NS) if idle_ns is not None else 0
            never = 1 << 62
            total = total_deadline if total_deadline is not None else never
            # from here on the idle limit (or none) replaces the first-byte one
            scope.deadline = ns_to_s(min(t + idle_ns + slack, total) if idle_ns is not None else total)
            ext = response.extensions
            if ext.get("hopbench.reused") is False:  # only fresh connections have a connect time
                rec.record(scope_name or sc.name, "connect_wait", ext.get("hopbench.connect_ns", 0))
            if ext.get("hopbench.retried"):
                rec.incr(scope_name or sc.name, "stale_connection_retries")
            write_ns = ext.get("hopbench.write_ns")
            if write_ns is not None:  # hopbench's own transport (docs/results.md, request_write)
                rec.record(scope_name or sc.name, "request_write", write_ns)
            ctype = box[5] = response.headers.get("content-type", "")
            if status >= 300:
                data = b""
                async for chunk in response.aiter_raw():
                    data += chunk
                    if len(data) > _ERROR_BODY_LIMIT:
                        break
                code = _http_error_code(data)
                # whole (at most _ERROR_BODY_LIMIT and a read): the sample is scrubbed of
                # secrets before it is cut short, so a key across a cut cannot leak in part
                box[2] = data.decode("utf-8", "replace")
                return "http_error", f"{status}" + (f":{code}" if code else ""), None
            if not ctype.startswith("text/event-stream"):
                rec.incr(scope_name or sc.name, "anomaly.wrong_content_type")
                box[4] = (f"{status} with Content-Type {ctype[:64]!r}, expected text/event-stream "
                          "(not a stream: a web page, a wrong path, or a non-streaming answer?)")
            scanner = SSEScanner(max_event_bytes=self.profile.run.max_event_bytes)
            dec = new_decoder(sc.protocol, keep_text=keep_text, expect_usage=expect_usage)
            kept = dec.kept_fragments() if meter.event_crc is not None else None  # gateway overhead
            identity = response.headers.get("content-encoding", "identity") == "identity"
            # iterating hopbench's body directly skips httpx's three generator layers
            # per read (closing still goes through response.aclose())
            # kernel receive stamps of hopbench's transport (its rx_ns), where it has them
            stamps = direct if identity and hasattr(direct, "rx_ns") else None
            chunks = (direct if direct is not None and identity
                      else response.aiter_raw() if identity else response.aiter_bytes()).__aiter__()
            # Re-arming a trio deadline costs ~1.6 us; doing it on every read
            # would be the largest single cost of a paced stream. The deadline
            # is instead set ``slack`` past the idle limit and re-armed at most
            # once per ``slack``: an idle timeout then fires after a silence of
            # idle_s to idle_s + slack (never early), slack <= 100 ms.
            rearm_at = t + slack
            left = False  # the client cancelled after cancel_events content events
            # The idle limit has its own scope: when it passes, the stream ends
            # only if the server was silent. Bytes that arrived within the limit
            # and wait in the socket mean the client was late (its process
            # descheduled between two reads): the timeout is taken back and the
            # read goes on (hopbench's transport only: its reader survives a
            # cancelled read; docs/results/counters.md, "idle_timeouts_withdrawn").
            if idle_ns is not None:
                scope.deadline = ns_to_s(total)
            idle = trio.CancelScope(deadline=ns_to_s(min(t + idle_ns + slack, never)) if idle_ns is not None
                                    else math.inf)
            # when the last bytes read reached the socket (kernel stamp, else the read less
            # the loop's lag); first the response head's read
            arrived = stamps.head_rx_ns if stamps is not None and stamps.head_rx_ns else t
            runq = self._runq
            try:
                while True:  # the idle scope, entered again after a withdrawal
                    with idle:
                        async for chunk in chunks:
                            t = now_ns()
                            # the read's client lag (a burst read late is the client's
                            # doing) and how late its latest bytes were read
                            # a read that waited for its bytes (or came right after one that
                            # did) got none that arrived before the loop's previous turn began
                            # (docs/results/units.md "Times from the wire")
                            if stamps is not None:
                                rx = stamps.rx_ns
                                since = runq.turn_from_ns if stamps.after_turn else 0
                            else:
                                rx = since = 0
                            lag, late = self._client_lag_ns(t, rx, since != 0)
                            before, arrived = arrived, t - late
                            items = scanner.feed(chunk)
                            n = len(items)
                            # the read's wire stamp: exact for its last item when the kernel
                            # stamped it and it ends at an event boundary (a blank line)
                            w = meter.on_read(t, lag, rx, n, chunk[-2:] == b"\n\n", since)
                            last = items[-1] if n > 1 else None
                            if idle_ns is not None and t >= rearm_at:
                                idle.deadline = ns_to_s(t + idle_ns + slack)
                                rearm_at = t + slack
                            for item in items:
                                if item is last:
                                    meter.at_last_item()
                                obs = dec.feed(item)
                                if obs:
                                    meter.on_observations(w, obs)
                                    if kept is not None:
                                        meter.on_event_texts(obs, kept)
                            if meter.zero_run:  # the read's gap-0 ITL samples, in its interval
                                meter.end_read()
                            if dec.ended and not box[1]:
                                # The terminal signal arrived ([DONE], message_stop,
                                # response.completed/failed): the stream's outcome is
                                # decided. What is left (the chunked terminator) gets
                                # _AFTER_END_S; a body that then breaks or hangs does
                                # not turn a finished stream into a broken one.
                                box[1] = True
                                # the gateway is done with it: what is left is the client's.
                                # It was done when the bytes arrived, not when a busy loop
                                # served the read: counted back to the terminal bytes' arrival,
                                # never before the read before it arrived (in flight as the
                                # gateway sees it, docs/results/in-flight.md "In flight"), nor before the
                                # gauge counted it streaming
                                self._gauge.move_late(t, late, max(before, streaming_ns), stage[0], CLOSING)
                                stage[0] = CLOSING
                                scope.deadline = min(scope.deadline, trio.current_time() + _AFTER_END_S)
                                idle.deadline = math.inf
                                rearm_at = never
                            elif cancel_events is not None and not box[1] and (
                                    meter.itl_count + (meter.last_content_ns is not None) >= cancel_events):
                                left = True  # closing the response below closes its connection
                                break
                    if not idle.cancelled_caught:
                        break
                    # The idle limit passed: the server's silence, or the client's
                    # lateness? Only bytes waiting in the socket can tell. Their
                    # kernel stamp is an upper bound of when the first of them
                    # arrived (Linux moves a segment's stamp to the latest one
                    # coalesced into it); the time the loop was measured away since
                    # the last bytes arrived (away_ns: every late wake-up of the
                    # probe in the silence, not only a recent one, as a busy
                    # machine may deschedule the process again between the probe's
                    # wake-up and this check) is how much of the silence the
                    # client itself made.
                    waiting = stamps.waiting_rx_ns() if stamps is not None else None
                    now = now_ns()
                    late = max(self._loop_lag_ns(now),
                               away_ns(self._blackouts, arrived, now, self._probe_due_ns))
                    if waiting is not None and idle_ns is not None and (
                            waiting - arrived <= idle_ns or now - arrived - late < idle_ns):
                        rec.incr(scope_name or sc.name, "idle_timeouts_withdrawn")
                        idle = trio.CancelScope(deadline=ns_to_s(now + idle_ns + slack))
                        rearm_at = now + slack
                        continue
                    scope.cancel()  # a real idle timeout: classified by the caller (detail "idle")
                    await trio.lowlevel.checkpoint()
            finally:
                # keep what arrived, also for timeouts and broken connections
                box[0] = dec.finish(discarded_partial=scanner.close())
                # a body left by an exception (e.g. an oversize event) is an
                # async generator stopped at a yield: close it now, not at GC
                await chunks.aclose()  # type: ignore[union-attr]
            result = box[0]
            assert result is not None
            if left:
                return CANCEL_OUTCOME, "after_events", result
            # the body's end on the wire (its last bytes' kernel stamp where the transport
            # has it): the client's end of added_e2e (docs/gateway-overhead.md)
            meter.on_body_end(now_ns(), stamps.end_rx_ns if stamps is not None else 0)
            return result.outcome, _detail(result), result
        finally:
            box[3] = now_ns()  # a client cancel's close stamp (hopbench.workload._cancel)
            try:
                await response.aclose()
            finally:
                # httpx's BoundAsyncStream points back at its response: a cycle
                # (with the request, headers, URL: ~30 objects a stream) that only
                # the cyclic collector would free (hopbench/engine/_collector.py)
                response.stream = _SPENT_BODY
