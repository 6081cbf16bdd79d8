"""Ground truth: one JSON line per request the emulator answered.

Role: tests and benchmarks compare hopbench's measurements against what the
emulator really did. ``GroundTruth`` is the record; ``GroundTruthWriter``
appends it as one line of JSON to a file.

Invariants:
- Times are integer nanoseconds of the emulator's clock (``_app.now_ns``,
  monotonic), as durations from the moment the ASGI app was called for the
  request.
- Each line is written and flushed whole, so a reader never sees half a line
  of a finished request, even if the process is killed later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Literal

__all__ = ["GroundTruth", "GroundTruthWriter", "End", "read_ground_truth", "knee_path", "boot_id"]

End = Literal["completed", "failed", "disconnect", "stall", "http_error", "client_closed"]


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """What the emulator did for one request.

    Attributes:
        request_id: the ``x-hopbench-request-id`` request header, or None.
        protocol: "chat", "responses" or "messages".
        model: the request's model.
        stream: the request's ``stream`` flag.
        fault: the injected fault name, or None.
        error_code: the mid-stream error code sent, or None.
        status: the HTTP status sent (0 if the client left before headers).
        ttft_ns: request received -> first content delta handed to send(), in ns
            (non-streaming: -> response body handed to send()); None if none was sent.
        gaps_ns: handed-to-send() gaps between consecutive content deltas, in ns.
        events: SSE events written (keepalive comments excluded).
        content_events: events carrying a non-empty output delta (text, reasoning, tool).
        keepalives: ``: hopbase-keepalive`` comments written.
        input_tokens: input tokens reported.
        output_tokens: output tokens the stream's usage reported, None if it reported none.
        output_tokens_sent: content deltas actually sent (one token each).
        end: how the request ended.
        text: the visible text sent (reasoning and tool arguments excluded).
        reasoning_text: the reasoning text sent.
        tool_arguments: the tool-call argument text sent ("" when none).
        finish_reason: the planned finish ("stop", "length", "tool_calls").
        duration_ns: request received -> last byte handed to send(), in ns.
        lag_max_ns: the worst lateness of a content delta's hand-off to send()
            against its planned deadline, in ns (how well the emulator kept time).
        t0_mono_ns: when the request was received, ``CLOCK_MONOTONIC`` ns of
            this host (the one absolute stamp: a client on the same host joins
            its own stamps to this record with it; hopbench.workload._cancel).
        client_closed_ns: request received -> the emulator noticed that the
            client had closed the connection before the stream's end, in ns;
            None when it did not (the stream ended first).
        tokens_after_close: content deltas handed to send() after that notice
            (0 unless ``on_client_close = "finish"``: by default the emulator
            stops a stream at once when its client leaves).
        queue_ns: request received -> it left the slot queue (``max_concurrency``),
            in ns; 0 without a slot limit. Its schedule (TTFT, gaps) starts then.
        cached_tokens: prompt tokens the prefix cache held (their prefill was
            skipped), None when the emulator has no prefix cache.
        marker_id: the request id found in the body's `` [hb:<id>]`` marker
            (``hopbench.protocols._marker``), or None; for gateways that drop headers.
        first_write_ns: request received -> the first body bytes handed to
            send(), in ns; None if no body was sent.
        first_write_end_ns: request received -> that send() returned, in ns
            (the bytes entered the kernel between the two stamps); None with
            ``first_write_ns``.
        final_write_ns: request received -> the final body bytes handed to
            send(), in ns; None if the body never ended (fault, client gone).
        final_write_end_ns: request received -> that send() returned, in ns;
            None with ``final_write_ns``.
        late_writes: the writes of content events that ended 0.1 ms or more
            (``_app.LATE_WRITE_NS``) after the earliest one's stamp (``ttft_ns``
            and ``gaps_ns`` stamp each event when it was due and queued), as
            ``[i, j, start_ns, end_ns]``: content events ``i`` to ``j - 1``
            (0-based) went out in one send() called at ``start_ns`` and returned
            at ``end_ns`` (ns from request received). A process descheduled
            between an event's stamp and its write, a send() that itself took
            0.1 ms or more, or events coalesced into a later write show here;
            the rest were written within 0.1 ms of their stamp (gateway
            overhead: hopbench.driver._overhead).
        event_chars: characters (code points) of each content delta, in the
            order sent (one per content event; ``gaps_ns`` times them).
        keepalive_write_ns: request received -> each keepalive comment handed to
            send(), in ns (``keepalives`` of them: at most one per
            ``keepalive_interval_s`` of silence).
        keepalive_lag_max_ns: the worst lateness of a keepalive's hand-off against
            its scheduled time (last write + ``keepalive_interval_s``), in ns.
        boot_id: the host's boot id (Linux ``/proc/sys/kernel/random/boot_id``)
            or "" where unknown: monotonic stamps compare only on one boot.
        t0_wire_mono_ns: when the request's bytes reached the emulator's socket
            (the kernel's receive stamp of the read that completed its head,
            ``SO_TIMESTAMPNS``), ``CLOCK_MONOTONIC`` ns like ``t0_mono_ns`` and
            at or before it; None where the kernel gave none (``_rx_stamp``).
        t0_wire_error_ns: that stamp's error from its move off CLOCK_REALTIME
            (``_rx_stamp.realtime_to_monotonic``), ns; None without the stamp.
    """

    request_id: str | None
    protocol: str
    model: str
    stream: bool
    fault: str | None
    error_code: str | None
    status: int
    ttft_ns: int | None
    gaps_ns: list[int]
    events: int
    content_events: int
    keepalives: int
    input_tokens: int
    output_tokens: int | None
    output_tokens_sent: int
    end: End
    text: str
    reasoning_text: str
    tool_arguments: str
    finish_reason: str
    duration_ns: int
    lag_max_ns: int = 0
    t0_mono_ns: int = 0
    client_closed_ns: int | None = None
    tokens_after_close: int = 0
    queue_ns: int = 0
    cached_tokens: int | None = None
    # gateway overhead (docs/gateway-overhead.md)
    marker_id: str | None = None
    first_write_ns: int | None = None
    first_write_end_ns: int | None = None
    final_write_ns: int | None = None
    final_write_end_ns: int | None = None
    late_writes: list[list[int]] = field(default_factory=list)
    event_chars: list[int] = field(default_factory=list)
    keepalive_write_ns: list[int] = field(default_factory=list)
    boot_id: str = ""
    keepalive_lag_max_ns: int = 0
    t0_wire_mono_ns: int | None = None
    t0_wire_error_ns: int | None = None


_FIELDS = tuple(f.name for f in fields(GroundTruth))


def boot_id() -> str:
    """This host's boot id: Linux's ``/proc/sys/kernel/random/boot_id``
    (a UUID that changes at every boot), or "" where there is none. Two
    processes with the same boot id share CLOCK_MONOTONIC. Never raises."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


class GroundTruthWriter:
    """Append ``GroundTruth`` records as JSON lines.

    Args:
        path: the file to append to (created with its parent folders).
        knee: the configured knee (``Knee.to_json``), written once to
            ``knee_path(path)``; None writes none.
    """

    def __init__(self, path: Path, knee: dict[str, Any] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] | None = path.open("a", encoding="utf-8")
        if knee is not None:  # the configured capacity, beside the lines (docs/emulator.md)
            knee_path(path).write_text(json.dumps(knee, indent=2) + "\n", encoding="utf-8")

    def write(self, record: GroundTruth) -> None:
        """Write one line and flush it. A closed writer ignores the record."""
        if self._file is None:
            return
        # not dataclasses.asdict: it deep-copies gaps_ns, a cost per request
        line = json.dumps({name: getattr(record, name) for name in _FIELDS}, ensure_ascii=False)
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def knee_path(path: Path) -> Path:
    """Where the configured knee of the ground truth at ``path`` is written:
    ``ground_truth.jsonl`` -> ``ground_truth.knee.json`` (``_capacity.Knee.to_json``)."""
    return path.with_name(path.name.split(".")[0] + ".knee.json")


def read_ground_truth(path: Path) -> list[dict[str, object]]:
    """Read a ground-truth file back: one dict per line, in write order."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
