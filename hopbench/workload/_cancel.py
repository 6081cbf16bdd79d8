"""Client cancellation: the scenario key, the seeded choice, and the join with the upstream's record.

Role: a scenario may cancel a share of its streams on the client side
(``cancel = { fraction = 0.2, after_events = 10 }`` or ``after_ms = 500``;
docs/workloads.md, "Client cancellation"). This module owns

- :class:`CancelSpec` and :func:`parse_cancel` (the key, checked before any load);
- :func:`chooses`: which streams cancel (a seeded draw per stream);
- :func:`join_cancels`: matching each client cancel with the upstream's
  ground-truth line (``x-hopbench-request-id``) to get the cancel-propagation
  delay, the tokens the upstream generated after the client left ("wasted
  tokens") and whether the upstream ran to completion anyway.

The runner does the cancelling (it closes the response and its connection);
``hopbench.driver._single`` feeds :func:`join_cancels` with the runner's cancels and the
emulator's record and records the results (:func:`record_join`).

Invariants: pure (no clock, no trio, no httpx). Times are integer ns. Client
and upstream stamps are compared only as ``CLOCK_MONOTONIC`` nanoseconds of one
host (the client converts its trio stamp once, ``_clock.monotonic_offset_ns``;
the emulator records ``t0_mono_ns``, its request-receipt time, on the same
clock): across hosts the figures are meaningless and are not computed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..measure._burst import truth_by_id
from ..measure._recorder import Recorder
from .._toml import Table
from .._units import s_to_ns

__all__ = ["CANCEL_OUTCOME", "CancelSpec", "ClientCancel", "CancelMatch", "chooses", "join_cancels",
           "join_record", "parse_cancel", "read_record", "record_join", "CANCEL_COUNTERS"]

CANCEL_OUTCOME: Final = "client_cancelled"
"""The outcome of a stream the client cancelled on purpose (docs/results.md)."""

CANCEL_COUNTERS: Final = ("cancel.matched", "cancel.unmatched", "cancel.upstream_completed",
                          "cancel.upstream_not_closed", "cancel.upstream_finished_first", "cancel.wasted_tokens")
"""Counters :func:`record_join` writes per scope (docs/results/counters.md, "Client cancellation")."""


@dataclass(frozen=True, slots=True)
class CancelSpec:
    """A scenario's ``cancel`` key.

    Attributes:
        fraction: the share of the scenario's streams that cancel, in (0, 1].
        after_events: cancel after the read that brought this many output
            events (any channel: text, reasoning, tool; >= 1), or None.
        after_ns: cancel this long after the request was sent, ns, or None.
            Exactly one of ``after_events`` and ``after_ns`` is set.
    """

    fraction: float
    after_events: int | None = None
    after_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The key as a JSON-ready dict (ms for the time)."""
        out: dict[str, Any] = {"fraction": self.fraction}
        if self.after_events is not None:
            out["after_events"] = self.after_events
        if self.after_ns is not None:
            out["after_ms"] = self.after_ns / 1e6
        return out


def parse_cancel(t: Table) -> CancelSpec | None:
    """Read a scenario's ``cancel`` key (None when absent).

    Args:
        t: the scenario's table.

    Returns:
        CancelSpec or None.

    Raises:
        ProfileError: not a table, an unknown key, ``fraction`` outside (0, 1],
            neither or both of ``after_events`` / ``after_ms``, or a
            non-positive value; the message names file:line and the key.
    """
    if not t.has("cancel"):
        return None
    c = t.table("cancel")
    fraction = c.number("fraction", 1.0, positive=True)
    if fraction > 1:
        raise c.error("fraction", f"expected a share of the streams in (0, 1], got {fraction:g}")
    has_events, has_ms = c.has("after_events"), c.has("after_ms")
    if has_events == has_ms:
        raise c.error(None, "expected exactly one of after_events (content events) or after_ms "
                            "(milliseconds after the request was sent)"
                      + (", got both" if has_events else ", got neither"))
    events = c.int("after_events", None, min=1)
    ms = c.number("after_ms", None, positive=True)
    c.done()
    return CancelSpec(float(fraction), events, None if ms is None else s_to_ns(ms / 1000))


def chooses(spec: CancelSpec | None, rng: random.Random) -> bool:
    """Whether the next stream cancels: one draw from ``rng`` when a spec is
    set (so the sequence of choices depends on the seed only), none otherwise."""
    if spec is None:
        return False
    return rng.random() < spec.fraction


@dataclass(frozen=True, slots=True)
class ClientCancel:
    """One stream the client cancelled.

    Attributes:
        request_id: the ``x-hopbench-request-id`` it was sent with.
        scope: the results scope it was recorded in.
        closed_mono_ns: when the client began to close the response and its
            connection (before any response head: the stream's end),
            ``CLOCK_MONOTONIC`` ns of this host.
        events_read: content events the client had read by then.
    """

    request_id: str
    scope: str
    closed_mono_ns: int
    events_read: int


@dataclass(frozen=True, slots=True)
class CancelMatch:
    """A client cancel joined with the upstream's ground truth.

    Attributes:
        cancel: the client's side.
        delay_ns: client close -> the upstream noticed the close, ns (None
            when the upstream never noticed: it ran on, e.g. behind a gateway
            that did not pass the cancel on). Clamped at 0.
        wasted_tokens: content tokens the upstream generated (handed to its
            socket) after the client's close.
        upstream_completed: the upstream was still writing when the client
            closed and ran its stream to the end anyway (the cancel did not reach it).
        finished_first: the upstream had written its last bytes before the
            client closed: no cancel could reach it, so it is neither
            ``upstream_completed`` nor "not closed" (issue 38: LiteLLM's 36 of
            47 "ran to their end" had finished a median 675 ms earlier).
    """

    cancel: ClientCancel
    delay_ns: int | None
    wasted_tokens: int
    upstream_completed: bool
    finished_first: bool = False


def _token_times(truth: Mapping[str, Any]) -> list[int]:
    """The upstream's content tokens' hand-off times, ns from its request receipt."""
    first = truth.get("ttft_ns")
    if not isinstance(first, int):
        return []
    out = [first]
    gaps = truth.get("gaps_ns")
    for g in gaps if isinstance(gaps, list) else ():
        if isinstance(g, int):
            out.append(out[-1] + g)
    return out


def join_cancels(cancels: Iterable[ClientCancel],
                 truths: Iterable[Mapping[str, Any]]) -> tuple[list[CancelMatch], list[ClientCancel]]:
    """Match client cancels with the upstream's ground-truth lines by request id.

    Args:
        cancels: the client's cancels.
        truths: ground-truth dicts (``hopbench serve --record`` lines:
            ``request_id`` (else ``marker_id``), ``t0_mono_ns``, ``client_closed_ns``, ``ttft_ns``,
            ``gaps_ns``, ``end``). When one request id has several lines (a
            gateway that retried), the last one counts.

    Returns:
        (matches in the order of ``cancels``, the cancels with no usable line:
        no line with that id, or one without ``t0_mono_ns``).

    Never raises on malformed lines: they do not match.
    """
    by_id = truth_by_id(truths)  # the header's id, else the body marker's
    matched: list[CancelMatch] = []
    unmatched: list[ClientCancel] = []
    for c in cancels:
        found = by_id.get(c.request_id)
        t0 = found.get("t0_mono_ns") if found is not None else None
        if found is None or not isinstance(t0, int):
            unmatched.append(c)
            continue
        close_rel = c.closed_mono_ns - t0  # the client's close, ns after the upstream got the request
        noticed = found.get("client_closed_ns")
        delay = max(noticed - close_rel, 0) if isinstance(noticed, int) else None
        wasted = sum(1 for x in _token_times(found) if x > close_rel)
        last_ns = found.get("final_write_ns")
        last_ns = last_ns if isinstance(last_ns, int) else found.get("duration_ns")
        finished = not isinstance(noticed, int) and isinstance(last_ns, int) and last_ns <= close_rel
        matched.append(CancelMatch(c, delay, wasted, found.get("end") == "completed" and not finished, finished))
    return matched, unmatched


def record_join(rec: Recorder, matches: Iterable[CancelMatch], unmatched: Iterable[ClientCancel]) -> None:
    """Record a join in a ``Recorder`` (``cancel_delay`` histogram and the
    :data:`CANCEL_COUNTERS`), per scope.

    Args:
        rec: a recorder whose scopes include each cancel's scope.
        matches, unmatched: what :func:`join_cancels` returned.

    Raises:
        UsageError: a cancel's scope is not one of ``rec``'s.
    """
    for m in matches:
        scope = m.cancel.scope
        rec.incr(scope, "cancel.matched")
        if m.delay_ns is not None:
            rec.record(scope, "cancel_delay", m.delay_ns)
        elif m.finished_first:
            rec.incr(scope, "cancel.upstream_finished_first")
        else:
            rec.incr(scope, "cancel.upstream_not_closed")
        if m.wasted_tokens:
            rec.incr(scope, "cancel.wasted_tokens", m.wasted_tokens)
        if m.upstream_completed:
            rec.incr(scope, "cancel.upstream_completed")
    for c in unmatched:
        rec.incr(c.scope, "cancel.unmatched")


def read_record(path: Path) -> list[dict[str, Any]]:
    """The upstream's ground-truth lines (``--record`` JSON lines) as dicts.

    Lines that are not JSON objects (a line cut by a killed process) are
    skipped: they cannot match. A missing file reads as no lines.
    """
    out: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if isinstance(d, dict):
                    out.append(d)
    except OSError:
        return []
    return out


def join_record(rec: Recorder, cancels: Sequence[ClientCancel], path: Path,
                truths: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """Join the client's cancels with the upstream's record file and record
    the figures in ``rec`` (:func:`join_cancels`, :func:`record_join`).

    Args:
        rec: the run's (measured) recorder.
        cancels: the runner's ``cancels``.
        path: the upstream's ground-truth file (the embedded emulator's
            ground_truth.jsonl, or a ``hopbench serve --record`` file behind a
            gateway: its lines carry the request id the gateway passed on).
        truths: the record's lines when the caller read them already (only
            those of this run: a ``[upstream] record`` file may hold earlier
            runs, hopbench.driver._gateway.join_upstream_cancels); None reads ``path``.

    Returns:
        warnings for summary.json (e.g. cancels the record does not hold),
        possibly empty.
    """
    if not cancels:
        return []
    matches, unmatched = join_cancels(cancels, read_record(path) if truths is None else truths)
    record_join(rec, matches, unmatched)
    out: list[str] = []
    ran_on = [m for m in matches if m.upstream_completed]
    finished = sum(1 for m in matches if m.finished_first)
    if ran_on:  # what a gateway team must hear: its cancels do not reach the upstream
        apart = (f"; {finished} more had finished upstream before the client closed, not counted"
                 if finished else "")
        out.append(f"client cancellation: {len(ran_on)} of {len(matches)} cancelled streams ran to their "
                   f"end upstream ({sum(m.wasted_tokens for m in ran_on):,} tokens generated after the "
                   f"client left): the cancel did not reach the upstream{apart}")
    if unmatched:
        out.append(f"client cancellation: {len(unmatched)} of {len(cancels)} cancelled streams have no line "
                   f"with their request id in {path.name} (the upstream never saw them, or the gateway "
                   "dropped the x-hopbench-request-id header): no cancel_delay or wasted tokens for them")
    return out
