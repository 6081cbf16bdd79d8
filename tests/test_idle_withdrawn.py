"""An idle timeout that the client's own lateness caused is taken back (docs/results/counters.md,
``idle_timeouts_withdrawn``): a client process descheduled between two reads for longer
than the idle limit must not cut a live stream and call it the server's timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from hopbench.engine import _transport
from hopbench.engine._watch import away_ns
from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile

needs_stamps = pytest.mark.skipif(not _transport._ANC_SIZE, reason="needs the kernel's receive stamps (Linux)")

MS = 1_000_000


def test_away_ns_counts_every_late_wake_up_in_the_silence() -> None:
    # the probe woke 960 ms late at 1,000 ms, and 5 ms late at 1,100 ms; the silence ran
    # from 50 ms to 1,200 ms: the client was away 950 + 5 ms of it (the part of the first
    # blackout before the silence is not the silence's, nor is one that ended before it)
    blackouts = [(40 * MS, 2 * MS), (1_000 * MS, 960 * MS), (1_100 * MS, 5 * MS)]
    assert away_ns(blackouts, 50 * MS, 1_200 * MS, 1_300 * MS) == (950 + 5) * MS
    # the probe was due at 1,110 ms and has not run yet: 90 ms more away so far
    assert away_ns(blackouts, 50 * MS, 1_200 * MS, 1_110 * MS) == (950 + 5 + 90) * MS
    # a silence after every blackout: nothing of the client's
    assert away_ns(blackouts, 1_150 * MS, 1_200 * MS, 1_300 * MS) == 0
    assert away_ns([], 0, 10 * MS, 1 << 62) == 0



PROFILE = """
[run]
requests = 3
[run.timeouts]
idle_s = 0.3
[load]
concurrency = 1
[emulator]
ttft_ms = 10
tokens_per_s = 50
output_tokens = 30
keepalive_interval_s = 0
[[scenario]]
protocol = "chat"
model = "m"
"""


def _descheduled_once(monkeypatch: pytest.MonkeyPatch, after_reads: int, hold_s: float) -> None:
    """The first stream's read number ``after_reads`` returns its bytes, then the whole
    loop stops for ``hold_s`` (the process descheduled) before the task yields: trio
    then sees the idle deadline passed before the task's next read, as on a machine
    whose cores are taken."""
    real = _transport._Body._receive_stamped
    calls = [0]

    async def receive(self: Any, n: int) -> bytes:
        data: bytes = await real(self, n)
        calls[0] += 1
        if calls[0] == after_reads:
            time.sleep(hold_s)  # noqa: the point: nothing in this process runs
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    monkeypatch.setattr(_transport._Body, "_receive_stamped", receive)


@pytest.mark.slow
@needs_stamps
def test_idle_timeout_from_the_clients_lateness_is_taken_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _descheduled_once(monkeypatch, after_reads=4, hold_s=0.9)
    out = tmp_path / "run"
    summary = run_profile(parse_profile(PROFILE, tmp_path / "p.toml"), out_dir=out).summary
    c = summary["scopes"]["all"]["counters"]
    streams = [json.loads(x) for x in (out / "streams.jsonl").read_text().splitlines()]
    truth = [json.loads(x) for x in (out / "ground_truth.jsonl").read_text().splitlines()]
    # the emulator sent every stream to its end without a silence near the limit
    assert [(r["end"], max(r["gaps_ns"]) < 300_000_000) for r in truth] == [("completed", True)] * 3, \
        ([(r["end"], max(r["gaps_ns"]), r["lag_max_ns"]) for r in truth], c, streams)
    assert c.get("timeout", 0) == 0, streams
    assert c["completed"] == 3 and c["idle_timeouts_withdrawn"] == 1
    assert all(s["outcome"] == "completed" and s["output_tokens"] == 30 for s in streams)
    # the late client is said, with the time its bytes waited
    assert max(s["client_lag_ns"] for s in streams) >= 300_000_000
    assert any(w.startswith("idle_timeouts_withdrawn: 1 idle timeouts") for w in summary["warnings"])


@pytest.mark.slow
@needs_stamps
def test_a_silent_server_still_times_out(tmp_path: Path) -> None:
    """The same limit with the server really silent (a stall fault of 1 s): a timeout."""
    text = PROFILE.replace("keepalive_interval_s = 0", "keepalive_interval_s = 0\n[emulator.faults]\n"
                           "stall = 1.0\nstall_s = 1.0\nfault_after_tokens = 5")
    out = tmp_path / "run"
    summary = run_profile(parse_profile(text, tmp_path / "p.toml"), out_dir=out).summary
    c = summary["scopes"]["all"]["counters"]
    assert c.get("timeout.idle", 0) == 3 and c.get("idle_timeouts_withdrawn", 0) == 0
