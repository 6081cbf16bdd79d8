"""SLOs and goodput (hopbench/measure/_slo.py, hopbench/config/_slo_spec.py; docs/slo.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hopbench._errors import ProfileError
from hopbench.measure._meter import StreamMeter
from hopbench.measure._rules import StreamRecord, measure
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import ALL, Recorder
from hopbench.measure._slo import itl_stat_ns, judge, record_verdict, slo_summary, wilson_lower
from hopbench.measure._slo import Slo
from hopbench.cli import main
from hopbench.emulator import read_ground_truth
from hopbench.protocols import ContentDelta, FirstContentToken, FirstToken, StreamEnd, StreamResult

MS = 1_000_000


def _record(gaps_ms: tuple[int, ...] = (10, 10, 10, 10), first_ms: int = 100, outcome: str = "completed",
            start_ns: int = 0) -> StreamRecord:
    """A text stream: first token at ``first_ms``, then one token after each gap, then its end."""
    m = StreamMeter(start_ns=start_ns, sent_ns=start_ns, itl_digest=True)
    m.on_headers(start_ns + 10 * MS)
    t = start_ns + first_ms * MS
    stamps = [t]
    for g in gaps_ms:
        t += g * MS
        stamps.append(t)
    for i, s in enumerate(stamps):
        m.on_read(s)
        m.on_observations(s, ([FirstToken("text"), FirstContentToken("text")] if i == 0 else [])
                          + [ContentDelta("text", 3)])
    n = len(stamps)
    if outcome == "completed":
        m.on_read(t)
        m.on_observations(t, [StreamEnd("completed")])
    m.close(t)
    return measure(m, t, outcome, "", StreamResult(outcome, input_tokens=3, output_tokens=n,
                                                   content_events=n,
                                                   events={"text": n, "reasoning": 0, "tool": 0, "refusal": 0}),
                   keepalive_budget_ns=10_000 * MS)


def test_judge_good_when_every_objective_holds() -> None:
    r = _record()
    slo = Slo(ttft_ns=100 * MS, itl_ns=10 * MS, tpot_ns=10 * MS, e2e_ns=140 * MS)
    v = judge(slo, r)
    assert v.good and v.failed == () and v.output_tokens == 5
    # one ns tighter on each: each fails alone, and all are named
    tight = Slo(ttft_ns=100 * MS - 1, itl_ns=10 * MS - 1, tpot_ns=10 * MS - 1, e2e_ns=140 * MS - 1)
    assert judge(tight, r).failed == ("ttft", "itl", "tpot", "e2e")


def test_judge_itl_statistic_is_the_requests_own() -> None:
    r = _record(gaps_ms=(10, 10, 10, 90))  # mean 30 ms, p50 10 ms, max 90 ms
    assert itl_stat_ns(r, None) == 30 * MS  # exact: the sum over the count
    assert itl_stat_ns(r, 100.0) == 90 * MS  # exact: the largest gap
    p50 = itl_stat_ns(r, 50.0)  # the digest's bucket: at most 1/128 above the gap
    assert p50 is not None and 10 * MS <= p50 <= 10 * MS * (1 + 1 / 128)
    p80 = itl_stat_ns(r, 80.0)
    assert p80 is not None and 90 * MS <= p80 <= 90 * MS * (1 + 1 / 128)
    assert itl_stat_ns(_record(gaps_ms=()), 50.0) is None  # one token: no gap
    with pytest.raises(ValueError, match="digest"):
        itl_stat_ns(dataclasses.replace(r, itl_digest=None), 50.0)
    assert judge(Slo(itl_ns=40 * MS), r).good
    assert judge(Slo(itl_ns=40 * MS, itl_stat="max"), r).failed == ("itl",)
    assert judge(Slo(itl_ns=40 * MS, itl_stat="p50"), r).good
    assert judge(Slo(itl_ns=40 * MS, itl_stat="p80"), r).failed == ("itl",)


def test_judge_interrupted_stream_is_never_good() -> None:
    r = _record(outcome="truncated")
    v = judge(Slo(), r)
    assert not v.good and v.failed == ("completed",)
    # its figures still count against the objectives they exceed
    assert judge(Slo(ttft_ns=50 * MS), r).failed == ("completed", "ttft")
    # a completed stream that never produced a token fails a TTFT objective
    empty = dataclasses.replace(_record(), ttft_ns=None)
    assert judge(Slo(ttft_ns=50 * MS), empty).failed == ("ttft",)


def test_judge_counts_from_the_intended_start() -> None:
    # open loop: start 1 s before the send; TTFT counts from the start (no coordinated omission)
    m = StreamMeter(start_ns=0, sent_ns=1_000 * MS)
    m.on_headers(1_010 * MS)
    m.on_read(1_100 * MS)
    m.on_observations(1_100 * MS, [FirstToken("text"), FirstContentToken("text"), ContentDelta("text", 1)])
    m.on_observations(1_100 * MS, [StreamEnd("completed")])
    m.close(1_100 * MS)
    r = measure(m, 1_100 * MS, "completed", "", StreamResult("completed", output_tokens=1, content_events=1,
                events={"text": 1, "reasoning": 0, "tool": 0, "refusal": 0}), keepalive_budget_ns=10_000 * MS)
    assert judge(Slo(ttft_ns=200 * MS), r).failed == ("ttft",)


def test_wilson_lower_bound() -> None:
    assert wilson_lower(0, 0, 0.95) is None
    assert wilson_lower(100, 100, 0.95) == pytest.approx(0.9736, abs=1e-4)  # n / (n + z^2)
    assert wilson_lower(99, 100, 0.95) == pytest.approx(0.9564, abs=1e-4)  # by hand, z = 1.6449
    assert wilson_lower(0, 10, 0.95) == 0.0
    assert wilson_lower(990, 1000, 0.95) > wilson_lower(99, 100, 0.95)  # type: ignore[operator]


def test_slo_summary_from_counters() -> None:
    rec = Recorder(["a", "b"])
    slo = Slo(ttft_ns=150 * MS, target=0.5)
    for first in (100, 100, 100, 200):
        record_verdict(rec, "a", judge(slo, _record(first_ms=first)))
    record_verdict(rec, "b", judge(slo, _record(outcome="truncated")))
    out = slo_summary({"a": slo, "b": slo}, rec.snapshot(), measured_s=2.0)
    assert out is not None
    a = out["a"]
    assert (a["judged"], a["good"], a["good_fraction"], a["failed"]) == (4, 3, 0.75, {"ttft": 1})
    assert a["goodput_rps"] == 1.5 and a["goodput_tokens_per_s"] == 7.5  # 3 x 5 tokens in 2 s
    assert a["limits_ms"] == {"ttft": 150.0} and a["target"] == 0.5
    assert out["b"]["failed"] == {"completed": 1} and out["b"]["met"] is False
    assert out[ALL]["judged"] == 5 and out[ALL]["good"] == 3 and out[ALL]["met"] is False
    assert slo_summary({"a": None}, rec.snapshot(), 1.0) is None


_PROFILE = """
[run]
duration_s = 5
[load]
concurrency = 1
[target]
embedded = true
[[scenario]]
protocol = "chat"
"""


def test_slo_table_profile_wide_and_per_scenario() -> None:
    p = parse_profile(_PROFILE + '[slo]\nttft_ms = 500\nitl_ms = 50\nitl_stat = "p99"\ntarget = 0.9\n'
                      '[[scenario]]\nname = "m"\nprotocol = "messages"\n[scenario.slo]\nttft_ms = 2000\n')
    a, b = p.scenarios
    assert a.slo == Slo(ttft_ns=500 * MS, itl_ns=50 * MS, itl_stat="p99", target=0.9)
    assert b.slo == Slo(ttft_ns=2000 * MS, itl_ns=50 * MS, itl_stat="p99", target=0.9)
    assert parse_profile(_PROFILE).scenarios[0].slo is None


@pytest.mark.parametrize(("text", "message"), [
    ("[slo]\nttft_ms = 0\n", "x.toml:11: slo.ttft_ms: expected a positive number, got 0"),
    ("[slo]\ne2e_ms = -5\n", "slo.e2e_ms: expected a positive number, got -5"),
    ('[slo]\nttft_ms = "500ms"\n', "slo.ttft_ms: expected a positive number of milliseconds"),
    ("[slo]\ntarget = 0\n", "slo.target: expected a good fraction in (0, 1], got 0"),
    ("[slo]\ntarget = 1.5\n", "slo.target: expected a good fraction in (0, 1], got 1.5"),
    ('[slo]\nitl_stat = "p100"\n', 'slo.itl_stat: expected "mean", "max" or a percentile'),
    ("[slo]\ncompleted = false\n", "slo.completed: a request that did not complete is never good"),
    ("[slo]\nttft = 5\n", "slo.ttft: unknown key"),
    ("[scenario.slo]\ntpot_ms = 0\n", "scenario[0].slo.tpot_ms: expected a positive number, got 0"),
])
def test_slo_bad_input_names_the_key(text: str, message: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(_PROFILE + text, "x.toml")
    assert message in str(info.value)


def test_slo_bad_input_exits_2_before_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(_PROFILE + "[slo]\ntarget = 1.01\n")
    assert main(["run", str(profile), "--out", str(tmp_path / "out")]) == 2
    assert "slo.target: expected a good fraction in (0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_goodput_matches_the_emulators_ground_truth(tmp_path: Path) -> None:
    # Faults split the requests by far more than any measuring error: a slow_headers
    # request (1 s late) misses the 500 ms TTFT objective, a midstream_error one never
    # completes, every other one (TTFT 20 ms) is good. hopbench's counts must equal
    # what the emulator says it did, request by request.
    profile = tmp_path / "gp.toml"
    profile.write_text("""
[run]
requests = 60
warmup_s = 0
[load]
concurrency = 12
[target]
embedded = true
[emulator]
seed = 3
ttft_ms = 20
tokens_per_s = 0
output_tokens = 7
output_tokens_jitter = 3
[emulator.faults]
slow_headers = 0.25
slow_headers_ms = 1000
midstream_error = 0.15
fault_after_tokens = 2
[slo]
ttft_ms = 500
[[scenario]]
protocol = "chat"
name = "c"
""")
    out = tmp_path / "out"
    assert main(["run", str(profile), "--out", str(out)]) in (0, 1)
    truth = read_ground_truth(out / "ground_truth.jsonl")
    assert len(truth) == 60
    good = [t for t in truth if t["end"] == "completed" and t["fault"] != "slow_headers"]
    slow = [t for t in truth if t["fault"] == "slow_headers"]
    broken = [t for t in truth if t["end"] != "completed"]
    assert good and slow and broken  # the seed gives all three kinds
    summary = json.loads((out / "summary.json").read_text())
    block = summary["slo"]["c"]
    assert block["judged"] == 60
    assert block["good"] == len(good)
    assert block["failed"]["completed"] == len(broken)
    assert block["failed"]["ttft"] == len([t for t in slow if t["end"] == "completed"]) + len(
        [t for t in slow if t["end"] != "completed" and t["ttft_ns"] is not None])
    window = summary["load"]["measured_s"]
    assert block["goodput_rps"] == pytest.approx(len(good) / window, rel=1e-3)
    tokens = sum(int(t["output_tokens_sent"]) for t in good)  # type: ignore[call-overload]
    assert block["goodput_tokens_per_s"] == pytest.approx(tokens / window, rel=1e-3)
