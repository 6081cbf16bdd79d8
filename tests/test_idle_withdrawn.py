"""An idle timeout that the client's own lateness caused is taken back (docs/results.md,
``idle_timeouts_withdrawn``): a client process descheduled between two reads for longer
than the idle limit must not cut a live stream and call it the server's timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from hopbench import _transport
from hopbench._profile import parse_profile
from hopbench._run import run_profile

pytestmark = pytest.mark.skipif(not _transport._ANC_SIZE, reason="needs the kernel's receive stamps (Linux)")

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


def test_idle_timeout_from_the_clients_lateness_is_taken_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _descheduled_once(monkeypatch, after_reads=4, hold_s=0.9)
    out = tmp_path / "run"
    summary = run_profile(parse_profile(PROFILE, tmp_path / "p.toml"), out_dir=out).summary
    c = summary["scopes"]["all"]["counters"]
    streams = [json.loads(x) for x in (out / "streams.jsonl").read_text().splitlines()]
    truth = [json.loads(x) for x in (out / "ground_truth.jsonl").read_text().splitlines()]
    # the emulator sent every stream to its end without a silence near the limit
    assert all(r["end"] == "completed" and max(r["gaps_ns"]) < 300_000_000 for r in truth)
    assert c.get("timeout", 0) == 0, streams
    assert c["completed"] == 3 and c["idle_timeouts_withdrawn"] == 1
    assert all(s["outcome"] == "completed" and s["output_tokens"] == 30 for s in streams)
    # the late client is said, with the time its bytes waited
    assert max(s["client_lag_ns"] for s in streams) >= 300_000_000
    assert any(w.startswith("idle_timeouts_withdrawn: 1 idle timeouts") for w in summary["warnings"])


def test_a_silent_server_still_times_out(tmp_path: Path) -> None:
    """The same limit with the server really silent (a stall fault of 1 s): a timeout."""
    text = PROFILE.replace("keepalive_interval_s = 0", "keepalive_interval_s = 0\n[emulator.faults]\n"
                           "stall = 1.0\nstall_s = 1.0\nfault_after_tokens = 5")
    out = tmp_path / "run"
    summary = run_profile(parse_profile(text, tmp_path / "p.toml"), out_dir=out).summary
    c = summary["scopes"]["all"]["counters"]
    assert c.get("timeout.idle", 0) == 3 and c.get("idle_timeouts_withdrawn", 0) == 0
