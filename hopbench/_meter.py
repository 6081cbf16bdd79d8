"""Per-stream measurement: stamped observations in, metric samples out.

Pure and synchronous (STYLE.md §1): the runner stamps every network read with
one clock reading (integer ns) and hands this meter the read and the decoder's
observations for it; at the end the meter yields the stream's samples. Events
that arrive in one read share one stamp, so an inter-token gap of 0 means
"same read".

Latencies count from ``start_ns``: the intended start in an open loop (wrk2:
no coordinated omission), the send time in a closed loop. ``sent_ns`` is kept
beside it so the uncorrected figures can be reported too.
"""

from __future__ import annotations

from collections.abc import Iterable

from .protocols import (
    ContentDelta,
    FirstContentToken,
    FirstToken,
    Keepalive,
    Observation,
    UsageReport,
)

__all__ = ["StreamMeter"]


class StreamMeter:
    """Collects one stream's stamps.

    Args:
        start_ns: when the stream counts as started (intended start in open loop).
        sent_ns: when the request was actually sent (>= start_ns in open loop).

    All attributes are integer ns from the runner's clock, or None when the
    moment never came.
    """

    __slots__ = (
        "start_ns", "sent_ns", "headers_ns", "status", "last_byte_ns",
        "max_silence_ns", "first_token_ns", "first_content_ns", "last_content_ns",
        "itl_ns", "keepalive_ns", "content_reads", "_last_content_read",
        "input_tokens", "output_tokens", "reads",
    )

    def __init__(self, start_ns: int, sent_ns: int) -> None:
        self.start_ns = start_ns
        self.sent_ns = sent_ns
        self.headers_ns: int | None = None
        self.status: int | None = None  # the response's HTTP status, once its head arrived
        self.last_byte_ns: int | None = None
        self.max_silence_ns = 0
        self.first_token_ns: int | None = None
        self.first_content_ns: int | None = None
        self.last_content_ns: int | None = None
        self.itl_ns: list[int] = []
        self.keepalive_ns: list[int] = []
        self.content_reads = 0
        self._last_content_read: int | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.reads = 0

    def on_headers(self, t_ns: int) -> None:
        """The response head arrived at ``t_ns``."""
        self.headers_ns = t_ns
        self.last_byte_ns = t_ns

    def on_read(self, t_ns: int) -> None:
        """A body read arrived at ``t_ns`` (before its observations)."""
        last = self.last_byte_ns
        if last is not None and t_ns - last > self.max_silence_ns:
            self.max_silence_ns = t_ns - last
        self.last_byte_ns = t_ns
        self.reads += 1

    def on_observations(self, t_ns: int, observations: Iterable[Observation]) -> None:
        """Apply the observations the decoder produced for the read at ``t_ns``."""
        for ob in observations:
            cls = type(ob)
            if cls is ContentDelta:
                last = self.last_content_ns
                if last is not None:
                    self.itl_ns.append(t_ns - last)
                self.last_content_ns = t_ns
                if self._last_content_read != self.reads:
                    self._last_content_read = self.reads
                    self.content_reads += 1
            elif cls is FirstToken:
                self.first_token_ns = t_ns
            elif cls is FirstContentToken:
                self.first_content_ns = t_ns
            elif cls is Keepalive:
                self.keepalive_ns.append(t_ns)
            elif cls is UsageReport:
                u: UsageReport = ob  # type: ignore[assignment]
                if u.input_tokens is not None:
                    self.input_tokens = u.input_tokens
                if u.output_tokens is not None:
                    self.output_tokens = u.output_tokens

    def close(self, t_ns: int) -> None:
        """The stream ended at ``t_ns``: the final silence counts too (a stall cut
        by the idle timeout is the longest silence of its stream)."""
        last = self.last_byte_ns
        if last is not None and t_ns - last > self.max_silence_ns:
            self.max_silence_ns = t_ns - last

    def keepalive_gaps(self) -> list[int]:
        """Gaps between consecutive keepalive comments, ns."""
        k = self.keepalive_ns
        return [b - a for a, b in zip(k, k[1:])]
