"""StreamMeter: stamps in, per-stream figures out (pure, no clock)."""

from __future__ import annotations

from hopbench._meter import StreamMeter
from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, Keepalive, UsageReport


def test_meter_itl_zero_for_events_of_one_read_and_silences() -> None:
    m = StreamMeter(start_ns=0, sent_ns=0)
    m.on_headers(10)
    m.on_read(100)
    m.on_observations(100, [Keepalive(b" hopbase-keepalive")])
    m.on_read(1_000)
    m.on_observations(1_000, [FirstToken("reasoning"), ContentDelta("reasoning", 3)])
    m.on_read(1_500)
    m.on_observations(1_500, [FirstContentToken("text"), ContentDelta("text", 2), ContentDelta("text", 1)])
    m.on_read(1_600)
    m.on_observations(1_600, [Keepalive(b""), UsageReport(5, 7)])
    m.close(5_600)
    assert (m.first_token_ns, m.first_content_ns) == (1_000, 1_500)
    assert m.itl_ns == [500, 0]
    assert m.max_silence_ns == 4_000  # from the last read to the end counts
    assert m.keepalive_gaps() == [1_500]
    assert (m.input_tokens, m.output_tokens) == (5, 7)
    assert m.content_reads == 2
