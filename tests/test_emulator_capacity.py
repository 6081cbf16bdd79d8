"""The emulator's capacity limits (hopbench/emulator/_capacity.py): slot queue, token budget, knee."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx
import pytest

from hopbench._errors import ProfileError
from hopbench.emulator import EmbeddedEmulator, EmulatorConfig, read_ground_truth
from hopbench.emulator._capacity import knee

_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _post_all(base_url: str, n: int) -> list[httpx.Response]:
    """``n`` streaming requests sent at once (one thread each), their whole answers."""
    def one(i: int) -> httpx.Response:
        with httpx.Client(trust_env=False, timeout=30) as client:
            return client.post(base_url + "/v1/chat/completions", json=_BODY,
                               headers={"x-hopbench-request-id": f"r{i}"})

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def test_knee_of_a_slot_limit_is_littles_law() -> None:
    config = EmulatorConfig.from_mapping({"max_concurrency": 4, "ttft_ms": 100, "tokens_per_s": 100,
                                          "output_tokens": 11})
    k = knee(config)
    assert k.concurrency == 4
    assert k.service_s == pytest.approx(0.2)  # 100 ms + 10 gaps of 10 ms
    assert k.rate_rps == pytest.approx(20.0)
    assert k.max_rate_rps == pytest.approx(20.0)


def test_knee_of_a_token_budget_is_where_streams_slow_down() -> None:
    config = EmulatorConfig.from_mapping({"token_budget_per_s": 250, "ttft_ms": 100,
                                          "tokens_per_s": 50, "output_tokens": 6})
    k = knee(config)
    assert k.concurrency == 5  # 250 / 50: a sixth stream makes everyone slower
    assert k.service_s == pytest.approx(0.2)
    assert k.rate_rps == pytest.approx(25.0)
    assert k.max_rate_rps == pytest.approx(50.0)  # 250 tokens/s / 5 gaps per request
    both = knee(EmulatorConfig.from_mapping({"token_budget_per_s": 250, "max_concurrency": 3,
                                             "ttft_ms": 100, "tokens_per_s": 50, "output_tokens": 6}))
    assert both.concurrency == 3
    assert knee(EmulatorConfig()).concurrency is None and knee(EmulatorConfig()).rate_rps is None


def test_capacity_keys_are_checked() -> None:
    with pytest.raises(ProfileError, match="max_concurrency: expected a non-negative integer, got -1"):
        EmulatorConfig.from_mapping({"max_concurrency": -1})
    with pytest.raises(ProfileError, match="max_queue: only valid with max_concurrency"):
        EmulatorConfig.from_mapping({"max_queue": 3})
    with pytest.raises(ProfileError, match="models.x.max_concurrency"):
        EmulatorConfig.from_mapping({"models": {"x": {"max_concurrency": 2}}})
    config = EmulatorConfig.from_mapping({"max_concurrency": 2, "max_queue": 1,
                                          "token_budget_per_s": 9.5})
    assert EmulatorConfig.from_mapping(json.loads(json.dumps(config.to_mapping()))) == config


def test_slot_limit_queues_requests_before_their_ttft(tmp_path: Path) -> None:
    record = tmp_path / "ground_truth.jsonl"
    config = EmulatorConfig.from_mapping({"max_concurrency": 2, "ttft_ms": 600, "tokens_per_s": 0,
                                          "output_tokens": 3})
    with EmbeddedEmulator(config, record_path=record) as emu:
        answers = _post_all(emu.base_url, 4)
    assert all(r.status_code == 200 for r in answers)
    lines = read_ground_truth(record)
    assert len(lines) == 4
    planned_ns = 600_000_000
    # every schedule starts when its request leaves the queue: TTFT after that is the plan's
    for line in lines:
        assert int(line["ttft_ns"]) - int(line["queue_ns"]) >= planned_ns  # type: ignore[call-overload]
    # two got a slot at once; two waited for one of them to finish (its whole service)
    waits = sorted(int(line["queue_ns"]) for line in lines)  # type: ignore[call-overload]
    # (the four arrive spread by the threads' start-up, well under half a TTFT)
    assert waits[1] < planned_ns // 2 <= waits[2]
    assert json.loads((tmp_path / "ground_truth.knee.json").read_text())["knee_concurrency"] == 2


def _status_then_close(base_url: str, i: int) -> int:
    """Open a streaming request, return its status once its head came, close it unread."""
    with httpx.Client(trust_env=False, timeout=30) as client:
        with client.stream("POST", base_url + "/v1/chat/completions", json=_BODY,
                           headers={"x-hopbench-request-id": f"r{i}"}) as r:
            return r.status_code


def test_full_queue_answers_503(tmp_path: Path) -> None:
    record = tmp_path / "gt.jsonl"
    # The first request holds the only slot until its client leaves (its TTFT outlasts the
    # test: the emulator sends the head when a request leaves the queue, then waits), so the
    # next two find the slot taken however slowly they are sent: one waits in the queue
    # (max_queue = 1), the other finds it full and gets its 503 at once. Closing the first
    # frees the slot for the queued one. No step depends on how fast the machine is.
    config = EmulatorConfig.from_mapping({"max_concurrency": 1, "max_queue": 1, "ttft_ms": 60_000,
                                          "tokens_per_s": 0, "output_tokens": 2})
    with EmbeddedEmulator(config, record_path=record) as emu, ThreadPoolExecutor(2) as pool:
        with httpx.Client(trust_env=False, timeout=30) as client:
            with client.stream("POST", emu.base_url + "/v1/chat/completions", json=_BODY,
                               headers={"x-hopbench-request-id": "r0"}) as first:
                assert first.status_code == 200  # in service: it holds the slot
                later = [pool.submit(_status_then_close, emu.base_url, i) for i in (1, 2)]
                # while the first holds the slot, only the refusal can come back
                refused = next(as_completed(later)).result()
                assert refused == 503 and sum(f.done() for f in later) == 1
        codes = sorted([first.status_code] + [f.result() for f in later])
    assert codes == [200, 200, 503]
    lines = read_ground_truth(record)
    faults = sorted(str(line["fault"]) for line in lines)
    assert faults == ["None", "None", "queue_full"]
    # the one served after the first waited in the queue until the first's client left
    served = {str(line["request_id"]): line for line in lines if line["fault"] is None}
    assert served["r0"]["end"] == "client_closed"
    waited = [line for rid, line in served.items() if rid != "r0"]
    # (stamps of two requests compare as CLOCK_MONOTONIC: t0_mono_ns + a duration)
    closed_ns = int(served["r0"]["t0_mono_ns"]) + int(served["r0"]["client_closed_ns"])  # type: ignore[call-overload]
    assert len(waited) == 1
    assert int(waited[0]["t0_mono_ns"]) + int(waited[0]["queue_ns"]) >= closed_ns  # type: ignore[call-overload]


def test_token_budget_slows_every_stream(tmp_path: Path) -> None:
    record = tmp_path / "gt.jsonl"
    # 2 streams of 6 tokens at 200 tokens/s (5 ms gaps) share 20 tokens/s: 100 ms gaps
    # while both are served, never less than 50 ms (one stream alone gets the whole budget)
    config = EmulatorConfig.from_mapping({"token_budget_per_s": 20, "ttft_ms": 50,
                                          "tokens_per_s": 200, "output_tokens": 6})
    with EmbeddedEmulator(config, record_path=record) as emu:
        _post_all(emu.base_url, 2)
    lines = read_ground_truth(record)
    gaps = [g for line in lines for g in line["gaps_ns"]]  # type: ignore[attr-defined]
    assert len(gaps) == 10
    # Deltas are due on an absolute schedule (hopbench/emulator/_app.py): a gap is
    # the budget's 50 ms plus this delta's lateness minus the one before's, so a
    # gap after a late delta is short by that lateness, never by more (the
    # emulator's own lag_max_ns: how late it handed any delta of that stream over)
    for line in lines:
        late_ns = int(line["lag_max_ns"])  # type: ignore[call-overload]
        assert min(line["gaps_ns"]) >= 50_000_000 - late_ns, line  # type: ignore[call-overload]
    assert math.fsum(gaps) / len(gaps) > 5_000_000 * 10
