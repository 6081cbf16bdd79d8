"""Load stages and the capacity search (hopbench/driver/_search.py, _stages.py, _stage_spec.py; docs/slo.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hopbench._errors import ProfileError
from hopbench.config._profile import parse_profile
from hopbench.driver._search import SATURATION_FIX, TOO_FEW, CapacitySearch, Probe, search, stage_probe
from hopbench.config._search_spec import SearchSpec
from hopbench.cli import main


def _spec(mode: str = "rate", lo: float = 1, hi: float = 1000, start: float | None = None,
          growth: float = 2.0, resolution: float = 0.05, max_probes: int = 30) -> SearchSpec:
    return SearchSpec(mode, lo, hi, lo if start is None else start, growth, resolution,  # type: ignore[arg-type]
                      1_000_000_000, 0, max_probes, "constant")


def _fake(knee: float, saturates_at: float = float("inf")) -> Any:
    """A gateway that holds every load up to ``knee``; hopbench saturates at ``saturates_at``."""
    def probe(load: float) -> Probe:
        if load >= saturates_at:
            return Probe(load, False, ("client saturated",), True)
        return Probe(load, load <= knee, () if load <= knee else ("slo",))
    return probe


@pytest.mark.parametrize("knee", [1.7, 13.0, 137.0, 420.5, 999.0])
def test_search_rate_finds_the_knee_within_resolution(knee: float) -> None:
    r = search(_spec(), _fake(knee))
    assert r.status == "found"
    assert r.capacity is not None and r.lowest_failing is not None
    assert r.capacity <= knee < r.lowest_failing
    assert r.lowest_failing - r.capacity <= 0.05 * r.capacity
    assert knee - r.capacity <= 0.05 * knee
    loads = [p.load for p in r.probes]
    assert len(loads) == len(set(loads))  # every probed point kept, none twice
    # geometric growth first: 1, 2, 4, ... until the first failure
    first_fail = next(i for i, p in enumerate(r.probes) if not p.passed)
    assert loads[:first_fail + 1] == [min(2.0 ** i, 1000) for i in range(first_fail + 1)]  # capped at max


@pytest.mark.parametrize("knee", [1, 2, 3, 7, 13, 64])
def test_search_concurrency_finds_the_exact_number_of_users(knee: int) -> None:
    r = search(_spec("concurrency", 1, 100), _fake(knee))
    assert r.status == "found" and r.capacity is not None and r.lowest_failing is not None
    assert r.capacity <= knee < r.lowest_failing
    # to the user where 5 % is less than one user; within 5 % above that
    assert r.lowest_failing - r.capacity <= max(1, 0.05 * r.capacity)
    if knee < 20:
        assert (r.capacity, r.lowest_failing) == (knee, knee + 1)
    assert all(p.load == int(p.load) for p in r.probes)


def test_search_edges_of_the_range() -> None:
    top = search(_spec(hi=50), _fake(1e9))
    assert (top.status, top.capacity) == ("at_max", 50)
    assert [p.load for p in top.probes] == [1, 2, 4, 8, 16, 32, 50]
    bottom = search(_spec(lo=10, start=40), _fake(5))
    assert (bottom.status, bottom.capacity) == ("below_min", None)
    assert [p.load for p in bottom.probes] == [40, 10]  # a failing start tries the bottom next
    budget = search(_spec(max_probes=4), _fake(137))
    assert budget.status == "max_probes" and budget.capacity == 8 and len(budget.probes) == 4


def test_search_client_saturation_reports_the_lower_bound_and_names_workers() -> None:
    """8 and 16 requests/s passed, 32 saturated hopbench: the answer was "no capacity
    reported" (issue 39 item 3); the bound that was measured comes first now."""
    r = search(_spec(), _fake(knee=500, saturates_at=100))
    assert r.status == "client_saturated" and r.capacity == 64
    assert r.probes[-1].load == 128 and r.probes[-1].client_saturated
    assert r.message.startswith("capacity at least 64 requests/s; the upper bound was not judged: at 128 "
                                "requests/s hopbench itself was saturated before the gateway's limit")
    assert "--workers" in r.message and SATURATION_FIX in r.message
    none = search(_spec(lo=100, start=100), _fake(knee=500, saturates_at=100))
    assert (none.status, none.capacity) == ("client_saturated", None)
    assert none.message.startswith("no capacity reported: at 100 requests/s")
    # beyond the gateway's knee first: the search finds it and never saturates hopbench
    ok = search(_spec(), _fake(knee=50, saturates_at=100))
    assert ok.status == "found" and ok.capacity is not None and 47.5 <= ok.capacity <= 50


def test_search_stops_when_a_probe_has_too_few_requests_to_judge() -> None:
    """A probe whose good fraction met the target but not its lower bound is no
    evidence of the gateway's limit: never "below_min" nor a knee from it."""
    def probe(load: float) -> Probe:
        if load >= 8:  # a short stage: the fraction met the target, the bound did not
            return Probe(load, False, (TOO_FEW,), figures={"good_fraction": 1.0, "target": 0.75,
                                                            "judged": 6, "good_fraction_lower": 0.69})
        return Probe(load, True)
    r = search(_spec(), probe)
    assert (r.status, r.capacity, r.lowest_failing) == ("too_few_requests", 4, None)
    assert "inconclusive at 8 requests/s" in r.message and "duration_s" in r.message
    assert "capacity at least 4 requests/s" in r.message
    first = search(_spec(lo=2, start=2), lambda load: Probe(load, False, (TOO_FEW,), figures={}))
    assert (first.status, first.capacity) == ("too_few_requests", None)
    assert "capacity at least" not in first.message
    # a probe that also failed its objectives is a failing load, as before
    mixed = search(_spec(hi=50), lambda load: Probe(load, load <= 10, () if load <= 10 else (TOO_FEW, "load not held")))
    assert mixed.status == "found" and mixed.capacity is not None
    # a concurrency probe whose load was not held (the client's users waited on its side)
    # and whose point estimate met the target: inconclusive too, never "below_min"
    users = search(_spec("concurrency", 2, 12, 2),
                   lambda load: Probe(load, False, (TOO_FEW, "load not held"), figures={"judged": 8}))
    assert (users.status, users.capacity) == ("too_few_requests", None)
    assert "load was not held" in users.message and "duration_s" in users.message
    failed = search(_spec("concurrency", 2, 12, 2), lambda load: Probe(load, False, ("slo", "load not held")))
    assert failed.status == "below_min"


def test_search_state_machine_asks_nothing_after_the_end() -> None:
    s = CapacitySearch(_spec("concurrency", 1, 4))
    while (load := s.next_load()) is not None:
        s.record(Probe(load, True))
    assert s.next_load() is None and s.result().status == "at_max"


def _summary(good: int, judged: int, lower: float, target: float = 0.9, held: bool = True,
             saturated: bool = False) -> dict[str, Any]:
    block = {"judged": judged, "good": good, "good_fraction": good / judged,
             "good_fraction_lower": lower, "target": target, "met": lower >= target}
    return {"complete": True, "saturated": saturated, "load": {"held": held},
            "slo": {"chat": block, "all": dict(block)},
            "scopes": {"all": {"metrics": {"ttft": {"count": judged, "p50": 101.0, "p99": 130.0}}}}}


def test_stage_probe_judges_lower_bound_load_held_and_saturation() -> None:
    ok = stage_probe(20, _summary(100, 100, 0.97))
    assert ok.passed and ok.figures["ttft_p99_ms"] == 130.0 and ok.figures["target"] == 0.9
    few = stage_probe(4, _summary(15, 15, 0.84))
    assert not few.passed and "too few requests" in few.reasons[0]
    bad = stage_probe(30, _summary(50, 100, 0.42))
    assert bad.reasons == ("slo",)
    not_held = stage_probe(30, _summary(100, 100, 0.97, held=False))
    assert not not_held.passed and not_held.reasons == ("load not held",)
    summary = _summary(100, 100, 0.97, saturated=True)
    summary["warnings"] = ["load generator saturated: event-loop lag p99 30.0 ms (> 25 ms) ...; the client "
                           "used little CPU, so other processes on this machine (neighbours) ..."]
    sat = stage_probe(30, summary)
    assert not sat.passed and sat.client_saturated
    s = CapacitySearch(_spec())
    s.record(sat)
    assert s.next_load() is None
    # no structured verdict (an older summary): the warning, with its own advice, and no fix beside it
    assert s.result().message == ("no capacity reported: at 30 requests/s hopbench itself was saturated before "
                                  f"the gateway's limit ({summary['warnings'][0]})")


def _saturated(kind: str, figure: str, advice: str) -> dict[str, Any]:
    """A stage's summary saturated by one primary cause (generator.saturation)."""
    summary = _summary(100, 100, 0.97, saturated=True)
    summary["generator"] = {"saturation": {"saturated": True, "symptoms": ["lag"], "causes": [
        {"kind": "emulator", "figure": "hopbench's own emulator used 60% of one core", "advice": None,
         "role": "secondary"},
        {"kind": kind, "figure": figure, "advice": advice, "role": "primary"}]}}
    return summary


def test_search_saturation_message_gives_the_causes_own_advice() -> None:
    """The capacity message said "rerun with --workers" and then quoted a cause saying
    "more workers would not add CPU here": its advice is now the primary cause's only."""
    neighbours = _saturated("machine_busy", "the machine's 2 CPUs were 98% busy and other processes used 0.9 "
                            "cores", "neighbours took CPU the run needed: more workers would not add CPU here; use "
                            "a quieter machine")
    probe = stage_probe(128, neighbours)
    assert probe.figures["saturation_cause"] == {
        "kind": "machine_busy", "figure": "the machine's 2 CPUs were 98% busy and other processes used 0.9 cores",
        "advice": "neighbours took CPU the run needed: more workers would not add CPU here; use a quieter "
                  "machine"}
    r = search(_spec(), lambda load: probe if load >= 128 else Probe(load, True))
    assert r.status == "client_saturated"
    assert r.message == ("capacity at least 64 requests/s; the upper bound was not judged: at 128 requests/s "
                         "hopbench itself was saturated before the "
                         "gateway's limit; cause: the machine's 2 CPUs were 98% busy and other processes used 0.9 "
                         "cores: neighbours took CPU the run needed: more workers would not add CPU here; use a "
                         "quieter machine")
    assert "--workers" not in r.message and "rerun" not in r.message
    client = stage_probe(64, _saturated("client_cpu", "hopbench's event loop used 92% of one core",
                                        "the client itself was busy: add --workers or lower the load"))
    r = search(_spec(), lambda load: client if load >= 64 else Probe(load, True))
    assert r.message.endswith("cause: hopbench's event loop used 92% of one core: the client itself was busy: "
                              "add --workers or lower the load")
    assert "quieter" not in r.message
    # an unsaturated probe carries no cause
    assert stage_probe(8, _summary(100, 100, 0.97)).figures["saturation_cause"] is None


_BASE = """
[run]
duration_s = 5
[load]
concurrency = 1
[target]
embedded = true
[[scenario]]
protocol = "chat"
"""


def test_stages_and_search_parse() -> None:
    p = parse_profile(_BASE + "[[stage]]\nconcurrency = 2\nduration_s = 3\nwarmup_s = 1\n"
                      "[[stage]]\nrate_rps = 7.5\nduration_s = 2\n")
    a, b = p.stages
    assert (a.mode, a.load, a.duration_ns, a.warmup_ns, a.label) == ("concurrency", 2, 3e9, 1e9, "stage-01-c2")
    assert (b.mode, b.load, b.label) == ("rate", 7.5, "stage-02-r7.5")
    s = parse_profile(_BASE + "[slo]\nttft_ms = 100\n[search]\nmin = 1\nmax = 9\n").search
    assert s is not None and (s.mode, s.min, s.max, s.start, s.growth) == ("concurrency", 1, 9, 1, 2.0)


@pytest.mark.parametrize(("text", "message"), [
    ("[[stage]]\nduration_s = 3\n", "stage[0]: expected a load: concurrency (users) or rate_rps "
                                    "(requests/s), exactly one, got none"),
    ("[[stage]]\nconcurrency = 2\nrate_rps = 3\nduration_s = 3\n", "exactly one, got both"),
    ("[[stage]]\nconcurrency = 0\nduration_s = 3\n", "stage[0].concurrency: expected a positive integer (at most 1000000), got 0"),
    ("[[stage]]\nrate_rps = 5\n", "stage[0].duration_s: required key is missing"),
    ("[[stage]]\nrate_rps = 5\nduration_s = 2\nwarmup_s = 2\n", "stage[0].warmup_s: expected less than"),
    ('[[stage]]\nconcurrency = 2\narrival = "constant"\nduration_s = 3\n',
     "stage[0].arrival: only valid with rate_rps"),
    ("[slo]\n[search]\nmin = 10\nmax = 10\n", "search.max: expected max > min (10), got 10"),
    ("[slo]\n[search]\nmin = 10\nmax = 5\n", "search.max: expected max > min (10), got 5"),
    ("[slo]\n[search]\nmin = 0\nmax = 5\n", "search.min: expected a positive number, got 0"),
    ("[slo]\n[search]\nmin = 1\nmax = 5\ngrowth = 1\n", "search.growth: expected a factor > 1"),
    ("[slo]\n[search]\nmin = 1\nmax = 5\nresolution = 0\n", "search.resolution: expected a fraction in (0, 1)"),
    ("[slo]\n[search]\nmin = 1.5\nmax = 5\n", "a concurrency search needs whole numbers"),
    ("[search]\nmin = 1\nmax = 5\n", "search: a capacity search judges stages by their objectives"),
    ("[slo]\n[search]\nmin = 1\nmax = 5\n[[stage]]\nrate_rps = 1\nduration_s = 1\n",
     "expected [search] or [[stage]] entries, not both"),
])
def test_stage_and_search_bad_input(text: str, message: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(_BASE + text, "p.toml")
    assert message in str(info.value) and "p.toml:" in str(info.value)


def test_search_bad_input_exits_2_before_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(_BASE + "[slo]\ntarget = 0.9\n[search]\nmin = 8\nmax = 4\n")
    assert main(["search", str(profile), "--out", str(tmp_path / "out")]) == 2
    assert "search.max: expected max > min (8), got 4" in capsys.readouterr().err
    plain = tmp_path / "plain.toml"
    plain.write_text(_BASE)
    assert main(["search", str(plain), "--out", str(tmp_path / "out")]) == 2
    assert "no [search] table" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_search_end_to_end_finds_the_emulators_knee(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # The knee moved to 3 users (3 slots; 420 ms service time): a fourth user waits
    # about a third of a service time (~140 ms) for a slot, past the 100 ms TTFT
    # objective; below the knee the TTFT is 20 ms, 80 ms of room for a busy machine.
    # Three probes of 2.5 s each (2, 4, 3 users): bounded to ~15 s with start-ups.
    profile = tmp_path / "knee.toml"
    profile.write_text("""
[run]
name = "knee"
[load]
concurrency = 1
[target]
embedded = true
[emulator]
ttft_ms = 20
tokens_per_s = 100
output_tokens = 41
max_concurrency = 3
[slo]
ttft_ms = 100
target = 0.75
confidence = 0.9
[search]
min = 2
max = 12
duration_s = 2.5
warmup_s = 0.5
[[scenario]]
protocol = "chat"
name = "c"
[gate]
"capacity.concurrency" = ">= 3"
""")
    out = tmp_path / "out"
    code = main(["search", str(profile), "--out", str(out), "--no-report"])
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    cap = summary["capacity"]
    knee = json.loads((out / "probe-01-c2" / "ground_truth.knee.json").read_text())["knee_concurrency"]
    assert knee == 3
    if cap["status"] == "client_saturated":
        # A machine so busy that hopbench's own event loop fell behind (loop lag p99
        # over 25 ms) cannot measure the gateway: the search must say so and name the
        # fix instead of reporting a capacity. (Seen with 3 copies of this test at once.)
        assert "hopbench itself was saturated" in cap["message"]
        assert summary["saturated"] is True and code == (1 if cap["concurrency"] is None else 5)
        assert summary["stages"][-1]["saturated"] is True
        pytest.skip("this machine saturated hopbench itself: reported as such, knee not judged")
    if cap["status"] == "too_few_requests":
        # A machine so slow that a 2.5 s probe held too few requests for the confidence
        # asked: the search must say so (not "below min"), exit 1, gate inconclusive.
        assert cap["concurrency"] in (None, 2, 3) and "duration_s" in cap["message"]
        assert code == (1 if cap["concurrency"] is None else 5)
        pytest.skip("this machine fitted too few requests in a probe: reported as such, knee not judged")
    if cap["status"] == "found" and cap["concurrency"] == 2:
        # The 3-user probe met the objectives and failed for the machine (seen with both cores
        # busy: its load not held, or hopbench saturated): the probe must say which, never "slo".
        at3 = next(s for s in summary["stages"] if s["load"] == 3)
        assert not at3["passed"] and at3["reasons"], summary["stages"]
        assert set(at3["reasons"]) <= {"load not held", "client saturated", "run incomplete"}, at3
        assert at3["good_fraction_lower"] >= 0.75, at3
        pytest.skip(f"this busy machine failed the 3-user probe itself ({', '.join(at3['reasons'])}): knee not judged")
    assert (cap["status"], cap["concurrency"], cap["lowest_failing"]) == ("found", 3, 4), summary["stages"]
    assert [s["load"] for s in summary["stages"]] == [2, 4, 3]
    assert summary["stage_of_record"] == "probe-03-c3"
    for s in summary["stages"]:  # every probe is a complete results folder of its own
        assert (out / s["folder"] / "summary.json").exists()
    assert code == 0 and "capacity: 3 users" in printed and "3 ◀" in printed
    assert "capacity.concurrency" in printed and "held" in printed


@pytest.mark.slow
def test_stages_run_into_one_folder_each_its_own_scopes(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # Two short stages, one closed and one open loop; each is a complete results folder
    # with its own scenario scopes, and the open-loop stage counts latency from the
    # scheduled arrival (queue_delay recorded beside ttft).
    profile = tmp_path / "st.toml"
    profile.write_text("""
[run]
name = "st"
[load]
concurrency = 1
[target]
embedded = true
[emulator]
ttft_ms = 60
tokens_per_s = 0
output_tokens = 4
[slo]
ttft_ms = 500
target = 0.5
[[stage]]
concurrency = 2
duration_s = 1
[[stage]]
rate_rps = 20
arrival = "constant"
duration_s = 1.2
warmup_s = 0.2
[[scenario]]
protocol = "chat"
name = "a"
[[scenario]]
protocol = "messages"
name = "b"
""")
    out = tmp_path / "out"
    assert main(["run", str(profile), "--out", str(out), "--no-report"]) == 0
    top = json.loads((out / "summary.json").read_text())
    assert [(s["folder"], s["mode"], s["load"]) for s in top["stages"]] == [
        ("stage-01-c2", "concurrency", 2), ("stage-02-r20", "rate", 20)]
    assert top["stages_kind"] == "stages"
    assert top["capacity"] is None  # stages mixing users and requests/s have no one capacity
    for s in top["stages"]:  # (a machine busy enough to lag hopbench's loop says so instead:
        # late reads shorten what the gateway saw in flight, so the load was not held either;
        # one slow enough to fit few requests in a 1 s stage cannot judge it either)
        assert s["passed"] or set(s["reasons"]) <= {"client saturated", "load not held", TOO_FEW}, s
        assert s["passed"] or s["reasons"], s
    assert top["stage_of_record"] in ("stage-01-c2", "stage-02-r20")
    for s in top["stages"]:
        sub = json.loads((out / s["folder"] / "summary.json").read_text())
        assert set(sub["scopes"]) == {"a", "b", "all"}
        assert sub["slo"]["all"]["judged"] == sub["headline"]["started"] > 0
    rate = json.loads((out / "stage-02-r20" / "summary.json").read_text())
    assert rate["resolved_load"]["load.rate_rps"] == 20 and rate["resolved_load"]["run.warmup_s"] == 0.2
    assert rate["scopes"]["all"]["metrics"]["queue_delay"]["count"] > 0
    assert (out / "stage-02-r20" / "ground_truth.knee.json").exists()
    assert "latency (ms) vs offered load (c: users, r: requests/s)" in capsys.readouterr().out


@pytest.mark.slow
def test_search_rate_end_to_end_finds_the_knee_within_10_percent(tmp_path: Path) -> None:
    # Open loop, constant arrivals: the knee is 20 requests/s (4 slots, 0.2 s service).
    # Past it the queue grows by (rate - 20) requests/s and TTFT with it; below it a busy
    # machine delays a few first tokens past 250 ms (target 0.7 leaves room). Five probes
    # of 2 s at most (16, 20, 25, then bisection): bounded to ~20 s with start-ups.
    profile = tmp_path / "rate.toml"
    profile.write_text("""
[run]
name = "rate"
[load]
mode = "rate"
rate_rps = 10
[target]
embedded = true
[emulator]
ttft_ms = 100
tokens_per_s = 100
output_tokens = 11
max_concurrency = 4
[slo]
ttft_ms = 250
target = 0.7
confidence = 0.9
[search]
min = 16
max = 40
growth = 1.25
resolution = 0.1
duration_s = 2
warmup_s = 0.5
max_probes = 6
[[scenario]]
protocol = "chat"
name = "c"
""")
    out = tmp_path / "out"
    code = main(["search", str(profile), "--out", str(out), "--no-report", "--quiet"])
    summary = json.loads((out / "summary.json").read_text())
    cap = summary["capacity"]
    assert cap["emulator_knee"]["rate_rps"] == pytest.approx(20.0)
    if cap["status"] == "client_saturated":
        assert "hopbench itself was saturated" in cap["message"]
        assert code == (1 if cap["rate_rps"] is None else 5)
        pytest.skip("this machine saturated hopbench itself: reported as such, knee not judged")
    if cap["status"] == "too_few_requests":
        # At the knee itself the good fraction sits near the target: on a busy machine it met
        # 0.7 with a lower bound below it (seen: 0.77, lower 0.63 over 31 requests). The honest
        # answer is "cannot tell here", and only within 10 % of the knee; the gate then fails.
        stop = summary["stages"][-1]
        assert abs(stop["load"] - 20.0) <= 0.10 * 20.0, summary["stages"]
        assert stop["good_fraction"] >= 0.7 > stop["good_fraction_lower"]
        assert code == (1 if cap.get("rate_rps") is None else 5) and (cap.get("rate_rps") or 0) < stop["load"]
        return
    assert cap["status"] == "found", summary["stages"]
    assert abs(cap["rate_rps"] - 20.0) <= 0.10 * 20.0, summary["stages"]
    assert len(summary["stages"]) <= 6 and code == 0


def test_stages_saturated_message_gives_the_causes_own_advice(tmp_path: Path) -> None:
    """Plain [[stage]] entries with [slo]: a saturated stage's capacity message (and the
    folder's first warning) carry its primary cause's advice, not a fixed "(--workers)"
    (a fake runner: no load)."""
    from hopbench.driver._common import RunOutcome
    from hopbench.driver._stages import run_stages

    profile = parse_profile(_BASE + "[slo]\nttft_ms = 500\ntarget = 0.9\n"
                            "[[stage]]\nrate_rps = 10\nduration_s = 2\n[[stage]]\nrate_rps = 20\nduration_s = 2\n")
    advice = "neighbours took CPU the run needed: more workers would not add CPU here; use a quieter machine"

    def runner(p: Any, out_dir: Path, progress: Any = None) -> RunOutcome:
        rate = p.load.rate_rps
        summary = (_saturated("machine_busy", "other processes used 1.2 cores", advice) if rate >= 20
                   else _summary(100, 100, 0.97))
        summary.update(started_at_unix_s=0.0, duration_s=2.0, warnings=[])
        return RunOutcome(summary, out_dir, True, None)

    outcome = run_stages(profile, tmp_path / "out", runner)
    cap = outcome.summary["capacity"]
    assert cap["status"] == "client_saturated"
    assert cap["message"] == ("no capacity reported: at 20 requests/s hopbench itself was saturated before the "
                              f"gateway's limit; cause: other processes used 1.2 cores: {advice}")
    assert outcome.summary["warnings"][0] == "load generator saturated: " + cap["message"]
    assert outcome.summary["stages"][1]["saturation_cause"]["kind"] == "machine_busy"


# -- a stage or probe that measured nothing is neither held nor a capacity point ----------


def _empty(interrupted: str | None = None) -> dict[str, Any]:
    """A stage's summary with nothing measured: no arrival due (or interrupted at its start)."""
    block = {"judged": 0, "good": 0, "good_fraction": None, "good_fraction_lower": None,
             "goodput_rps": 0.0, "met": None}
    return {"complete": interrupted is None, "interrupted_by": interrupted, "saturated": False,
            "load": {"mode": "rate", "held": None, "due": 0, "sent": 0, "requested_rate_rps": 24.0,
                     "achieved_rate_rps": 0.0, "measured_s": 0.0},
            "headline": {"started": 0, "completed": 0}, "slo": {"chat": block, "all": dict(block)},
            "scopes": {"all": {"metrics": {}}}, "started_at_unix_s": 0.0, "duration_s": 1.0,
            "warnings": ["no stream was measured: 0 started during the warm-up and none after it"]}


def test_stage_probe_that_measured_nothing_is_neither_held_nor_failing() -> None:
    from hopbench.driver._search import NOT_MEASURED, probe_line

    p = stage_probe(5, _empty())
    assert not p.measured and not p.passed and p.reasons == (NOT_MEASURED,)
    assert p.figures["held"] is None and p.figures["measured"] is False  # was True: "held"
    line = probe_line(p)
    assert "None" not in line and line.startswith("  -> not measured: no stream started after the warm-up")
    assert "0 of 0 due arrivals sent" in line
    s = CapacitySearch(_spec())
    s.record(stage_probe(8, _summary(100, 100, 0.97)))
    s.record(p)
    r = s.result()
    assert s.next_load() is None and r.status == "too_few_requests"
    assert r.lowest_failing is None and r.capacity == 8  # no evidence either way
    assert "nothing was measured" in r.message and "None" not in r.message
    # a measured probe's line never prints None either (a fraction without a bound)
    assert "None" not in probe_line(stage_probe(8, _summary(100, 100, 0.97)))


def test_search_interrupted_in_an_empty_probe_is_not_a_failing_capacity_point(tmp_path: Path) -> None:
    """Ctrl-C 1 s into probe 2 (0 requests): it was "held" and capacity.lowest_failing 24;
    the terminal printed "good fraction None (lower bound -), goodput None req/s"."""
    from hopbench.driver._common import RunOutcome
    from hopbench.driver._stages import run_search

    profile = parse_profile(_BASE + "[slo]\nttft_ms = 500\ntarget = 0.9\n"
                            "[search]\nmode = \"rate\"\nmin = 12\nmax = 48\nduration_s = 2\n")

    def runner(p: Any, out_dir: Path, progress: Any = None) -> RunOutcome:
        if p.load.rate_rps >= 24:
            return RunOutcome(_empty("SIGINT"), out_dir, False, None)
        summary = _summary(100, 100, 0.97)
        summary.update(started_at_unix_s=0.0, duration_s=2.0, warnings=[], headline={"started": 100})
        return RunOutcome(summary, out_dir, True, None)

    lines: list[str] = []
    outcome = run_search(profile, tmp_path / "out", runner, on_line=lines.append)
    top = outcome.summary
    assert [st["load"] for st in top["stages"]] == [12, 24]
    assert top["stages"][1]["held"] is None and top["stages"][1]["measured"] is False
    assert top["capacity"]["status"] == "interrupted" and top["capacity"]["lowest_failing"] is None
    assert top["stage_of_record"] == "probe-01-r12"
    assert not any("None" in line for line in lines), lines
    assert "stage probe-02-r24: interrupted (SIGINT): not judged, neither a passing nor a failing load" in top["warnings"]


def test_search_a_probe_cut_mid_way_is_interrupted_not_failed(tmp_path: Path) -> None:
    """Ctrl-C 3 s into probe 2, after its warm-up: its partial figures (a good fraction whose
    lower bound missed the target on the few requests so far) were judged "FAIL (slo, run
    incomplete)" and made capacity.lowest_failing 24 (issue 39 follow-up): a probe cut short
    is interrupted, not judged, in every view."""
    from hopbench.driver._common import RunOutcome
    from hopbench.driver._search import INTERRUPTED, probe_line
    from hopbench.driver._stages import run_search
    from hopbench.views._capacity_table import capacity_rows

    profile = parse_profile(_BASE + "[slo]\nttft_ms = 500\ntarget = 0.9\n"
                            "[search]\nmode = \"rate\"\nmin = 12\nmax = 48\nduration_s = 5\n")

    def runner(p: Any, out_dir: Path, progress: Any = None) -> RunOutcome:
        cut = p.load.rate_rps >= 24
        summary = _summary(30, 40, 0.6) if cut else _summary(100, 100, 0.97)
        summary.update(started_at_unix_s=0.0, duration_s=5.0, warnings=[],
                       headline={"started": 40 if cut else 100})
        if cut:
            summary.update(complete=False, interrupted_by="SIGINT")
        return RunOutcome(summary, out_dir, not cut, None)

    lines: list[str] = []
    top = run_search(profile, tmp_path / "out", runner, on_line=lines.append).summary
    assert top["capacity"]["status"] == "interrupted" and top["capacity"]["lowest_failing"] is None
    assert top["capacity"]["rate_rps"] == 12 and top["stage_of_record"] == "probe-01-r12"
    cut = top["stages"][1]
    assert cut["reasons"] == [INTERRUPTED] and cut["interrupted_by"] == "SIGINT" and cut["passed"] is False
    assert lines[-1] == "  -> interrupted (SIGINT): not judged, neither a pass nor a fail; not a capacity point"
    assert not any("FAIL" in line for line in lines), lines
    assert [r["verdict"] for r in capacity_rows(top)] == ["pass", "interrupted (SIGINT): not judged"]
    p = stage_probe(24, dict(_summary(30, 40, 0.6), complete=False, interrupted_by="SIGINT"))
    assert (p.passed, p.interrupted, p.reasons) == (False, "SIGINT", (INTERRUPTED,))
    assert probe_line(p).startswith("  -> interrupted (SIGINT)")


@pytest.mark.slow
def test_stages_empty_stage_end_to_end_is_not_held_and_exits_4(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """[[stage]] rate_rps = 0.5 for 0.3 s, Poisson, seed 1: no arrival due (the seeded
    schedule), then a stage that measures: the empty stage was "held" and a failing
    capacity point, and the run exited 0."""
    profile = tmp_path / "empty.toml"
    profile.write_text("""
[run]
name = "empty"
seed = 1
[load]
concurrency = 1
[target]
embedded = true
[emulator]
ttft_ms = 10
tokens_per_s = 0
output_tokens = 2
[slo]
ttft_ms = 2000
target = 0.5
[[stage]]
rate_rps = 0.5
arrival = "poisson"
duration_s = 0.3
[[stage]]
rate_rps = 10
arrival = "constant"
duration_s = 0.5
[[scenario]]
protocol = "chat"
""")
    out = tmp_path / "out"
    code = main(["run", str(profile), "--out", str(out), "--no-report", "-q"])
    top = json.loads((out / "summary.json").read_text())
    first = json.loads((out / "stage-01-r0.5" / "summary.json").read_text())
    assert first["load"]["due"] == 0 and first["load"]["held"] is None  # the seeded schedule's ground truth
    empty = top["stages"][0]
    assert empty["held"] is None and empty["measured"] is False and not empty["passed"]
    assert top["capacity"]["lowest_failing"] != 0.5
    assert top["stage_of_record"] == "stage-02-r10"
    assert any(w.startswith("stage stage-01-r0.5: no stream was measured") for w in top["warnings"])
    assert code == 4, capsys.readouterr().err
    assert "no stream was measured in stage stage-01-r0.5" in capsys.readouterr().err


# -- exit codes of a plain [[stage]] run against a search (docs/slo.md, "Exit codes") ------


def _fake_runs(monkeypatch: pytest.MonkeyPatch, saturate_at: float, fail_at: float = float("inf")) -> None:
    """Replace the single-run runner: stages at ``saturate_at`` requests/s or more are
    saturated, those at ``fail_at`` or more miss their objectives (no load is offered)."""
    from hopbench.driver._common import RunOutcome

    def fake(p: Any, out_dir: Path, progress: Any = None) -> RunOutcome:
        rate = p.load.rate_rps
        summary = _summary(100, 100, 0.97 if rate < fail_at else 0.2, saturated=rate >= saturate_at)
        summary.update(started_at_unix_s=0.0, duration_s=0.5, headline={"started": 100, "completed": 100},
                       warnings=["load generator saturated: event-loop lag p99 30.0 ms (> 25 ms)"]
                       if rate >= saturate_at else [])
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary))
        return RunOutcome(summary, out_dir, True, None)

    monkeypatch.setattr("hopbench.driver._single.run_profile", fake)


def test_stages_exit_code_is_the_gates_a_saturated_stage_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Stages 600/s then 10/s: a saturated stage exited 1 ("hopbench: error: no capacity
    reported"), a failing one 0. As k6's thresholds: the [gate] decides the exit code;
    saturation is a warning (the gate's run.not_saturated fails it)."""
    stages = "[[stage]]\nrate_rps = 600\nduration_s = 0.5\n[[stage]]\nrate_rps = 10\nduration_s = 0.5\n"
    slo = "[slo]\nttft_ms = 500\ntarget = 0.9\n"
    _fake_runs(monkeypatch, saturate_at=600)
    path = tmp_path / "p.toml"
    path.write_text(_BASE + slo + stages)
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--no-report", "-q"]) == 0
    err = capsys.readouterr().err
    assert "hopbench: warning: no capacity reported: at 600 requests/s" in err and "error" not in err
    _fake_runs(monkeypatch, saturate_at=float("inf"), fail_at=600)  # a failing stage: 0 as well
    assert main(["run", str(path), "--out", str(tmp_path / "b"), "--no-report", "-q"]) == 0
    # with a [gate], its checks decide: the saturated stage makes run.not_saturated inconclusive (exit 5)
    _fake_runs(monkeypatch, saturate_at=600)
    path.write_text(_BASE + slo + "[gate]\n\"error_rate\" = \"<= 0.5\"\n" + stages)
    assert main(["run", str(path), "--out", str(tmp_path / "c"), "--no-report", "-q"]) == 5
    # a search's result is its capacity: none measured is exit 1
    path.write_text(_BASE + slo + "[search]\nmode = \"rate\"\nmin = 300\nmax = 1200\nstart = 600\nduration_s = 0.5\nwarmup_s = 0\n")
    assert main(["search", str(path), "--out", str(tmp_path / "d"), "--no-report", "-q"]) == 1
    assert "hopbench: error: no capacity reported: at 600 requests/s" in capsys.readouterr().err
    # 300 passed below it: a lower bound only, inconclusive (5), the bound said first (issue 39 item 3)
    path.write_text(_BASE + slo + "[search]\nmode = \"rate\"\nmin = 300\nmax = 1200\nstart = 300\nduration_s = 0.5\n"
                    "warmup_s = 0\n")
    assert main(["search", str(path), "--out", str(tmp_path / "e"), "--no-report", "-q"]) == 5
    err = capsys.readouterr().err
    assert ("hopbench: warning: capacity at least 300 requests/s; the upper bound was not judged: at 600 "
            "requests/s hopbench itself was saturated") in err
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["capacity"]["rate_rps"] == 300 and summary["capacity"]["status"] == "client_saturated"


def test_a_stage_without_objectives_is_judged_on_its_load_alone() -> None:
    """A [[stage]] profile without [slo] (summary.json "slo": null): no stage
    fails on "slo"; held, saturated and complete still count."""
    from hopbench.driver._search import probe_line
    load = {"mode": "rate", "held": True, "requested_rate_rps": 10.0, "achieved_rate_rps": 10.0, "due": 50,
            "sent": 50}
    summary = {"slo": None, "load": load, "complete": True, "saturated": False,
               "headline": {"started": 50, "completed_per_s": 10.0}}
    p = stage_probe(10.0, summary)
    assert p.passed and p.reasons == () and p.measured
    assert probe_line(p) == "  -> pass: no objectives set (slo): judged on the load alone"
    held_not = stage_probe(10.0, {**summary, "load": {**load, "held": False, "sent": 20}})
    assert not held_not.passed and held_not.reasons == ("load not held",)
    assert probe_line(held_not).startswith("  -> FAIL (load not held): no objectives")


def test_search_saturation_cause_is_printed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A search stopped by hopbench's saturation printed the cause and its advice six times
    (warnings, capacity line, two gate checks, the gate's headline, the exit line: issue 39
    item 7): once now, on the capacity line; the others name the bound and the saturation."""
    from hopbench.driver._common import RunOutcome

    advice = "neighbours took CPU the run needed: more workers would not add CPU here; use a quieter machine"

    def fake(p: Any, out_dir: Path, progress: Any = None) -> RunOutcome:
        rate = p.load.rate_rps
        summary = _saturated("machine_busy", "other processes used 1.2 cores", advice) if rate >= 32 else \
            _summary(100, 100, 0.97)
        summary.update(started_at_unix_s=0.0, duration_s=0.5, headline={"started": 100, "completed": 100},
                       warnings=[f"load generator saturated: lag; cause: other processes used 1.2 cores: {advice}"]
                       if rate >= 32 else [])
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary))
        return RunOutcome(summary, out_dir, True, None)

    monkeypatch.setattr("hopbench.driver._single.run_profile", fake)
    path = tmp_path / "p.toml"
    path.write_text(_BASE + "[slo]\nttft_ms = 500\ntarget = 0.9\n[search]\nmode = \"rate\"\nmin = 8\nmax = 64\n"
                    "start = 8\nduration_s = 0.5\nwarmup_s = 0\n[gate]\n\"capacity.rate_rps\" = \">= 15\"\n")
    assert main(["search", str(path), "--out", str(tmp_path / "o"), "--no-report"]) == 5
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert printed.count(advice) == 1, printed
    assert "capacity: at least 16 requests/s; the upper bound was not judged: at 32" in captured.out
    assert "hopbench: warning: capacity at least 16 requests/s" in captured.err
    # --quiet prints no capacity line: the exit line then carries the cause
    assert main(["search", str(path), "--out", str(tmp_path / "q"), "--no-report", "-q"]) == 5
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count(advice) == 1
