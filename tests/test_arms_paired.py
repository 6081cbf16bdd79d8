"""Tests for the A/B arms' paired verdicts (hopbench.views._arm_differences, issue 37 item 3):
Wilcoxon's signed-rank test, the pairing of streams by round, and the verdicts on synthetic
paired runs with a known shift and a known drift (seeded; no clock)."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hopbench.views._arm_differences import (PAIRED_FIGURES, arm_differences, pair_streams, paired_figures,
                                             paired_verdict, render_arm_differences,
                                             render_arm_differences_markdown)
from hopbench.views._noise import INCONCLUSIVE, NOT_JUDGED, SAME, WORSE
from hopbench.views._stats import signed_rank

ALPHA = 0.01
MS = 1_000_000
ROOT = Path(__file__).resolve().parents[1]


def test_signed_rank_matches_the_hand_computation() -> None:
    # n = 12, no ties: W+ = 73, mean 39, variance 12 * 13 * 25 / 24 = 162.5
    r = signed_rank([1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30, -0.1, 0.2, -0.7])
    assert (r.n, r.zeros, r.w_plus) == (12, 0, 73.0)
    assert r.z == pytest.approx((73 - 39 - 0.5) / math.sqrt(162.5))
    assert r.p_value == pytest.approx(0.00859, abs=1e-5)
    # ties share their mean rank and shrink the variance by sum(t^3 - t) / 48; zeros are dropped
    t = signed_rank([1, 1, -1, 2, 2, -2, 3, 0])
    assert (t.n, t.zeros, t.w_plus) == (7, 1, 21.0)
    assert t.z == pytest.approx((21 - 14 - 0.5) / math.sqrt(35 - 48 / 48))
    assert signed_rank([]).p_value == 1.0 and signed_rank([0, 0]).p_value == 1.0


def test_signed_rank_sign_follows_the_differences() -> None:
    assert signed_rank([5.0] * 20).z > 0 > signed_rank([-5.0] * 20).z


# -- a synthetic paired run ------------------------------------------------------------


def _lines(rng: random.Random, *, rounds: int = 120, shift: float = 0.0, drift_ms: float = 0.0,
           trend_ms: float = 0.0, arms: tuple[str, str] = ("a", "b")) -> list[dict[str, Any]]:
    """streams.jsonl lines of a two-arm run, as hopbench writes them: request n goes to arm
    ``arm_of_request(n, 2)`` in round (n - 1) // 2 (a, b; then b, a; ...), 25 ms apart. Each figure is lognormal (sigma 0.12) around
    its median; the runner's drift (N(0, drift_ms), new every 10 rounds, plus a trend rising by
    trend_ms over the run, both quoted for the 120 ms ttft and in proportion for the other figures)
    hits both requests of a round alike; arm b's values are (1 + shift) times."""
    out = []
    drift = 0.0
    for r in range(rounds):
        if r % 10 == 0:
            drift = rng.gauss(0.0, drift_ms) if drift_ms else 0.0
        common = drift + trend_ms * r / rounds
        for k, arm in enumerate(arms):
            scale = 1.0 + (shift if k else 0.0)
            n = 2 * r + (k if r % 2 == 0 else 1 - k) + 1

            def v(median_ms: float) -> int:  # the drift in proportion to the figure (quoted for ttft)
                return int((median_ms * math.exp(rng.gauss(0.0, 0.12)) * scale + common * median_ms / 120) * MS)

            out.append({"id": f"0-{n}", "arm": arm, "scenario": "chat", "outcome": "completed", "start_ns": (1000 + 25 * (n - 1)) * MS,
                        "ttft_ns": v(120.0), "e2e_ns": v(520.0), "tpot_ns": v(12.0), "itl_p50_ns": v(11.0),
                        "itl_p99_ns": v(25.0)})
    rng.shuffle(out)  # streams.jsonl holds them in the order they ended
    return out


def _judge(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pairs, how = pair_streams(lines, ["a", "b"], warmup_ns=1000 * MS)
    assert how == "round"
    return paired_figures(pairs, ALPHA)["b"]


def test_paired_shift_of_10_percent_is_found() -> None:
    """+10 % on every figure of arm b, under a drift that hits both arms (20 ms sd): found >= 90 %."""
    rng = random.Random(37)
    found: Counter[str] = Counter()
    trials = 50
    for _ in range(trials):
        figs = _judge(_lines(rng, shift=0.10, drift_ms=20.0))
        assert all(f["verdict"] != "better" for f in figs)
        found.update(f["figure"] for f in figs if f["verdict"] == WORSE)
    for name, _ in PAIRED_FIGURES:
        assert found[name] >= 0.9 * trials, (name, found)


def test_paired_aa_with_a_common_drift_reads_worse_at_most_1_percent() -> None:
    """A/A arms whose runner drifts (20 ms sd every 10 rounds, a 40 ms trend): the drift hits both
    requests of a round, so the paired differences cancel it; the arm reads worse (on any of its five
    figures) in at most 1 % of 300 runs."""
    rng = random.Random(38)
    verdicts: Counter[str] = Counter()
    for _ in range(300):
        verdicts[paired_verdict(_judge(_lines(rng, drift_ms=20.0, trend_ms=40.0)))] += 1
    assert verdicts[WORSE] <= 3, verdicts
    assert verdicts[SAME] >= 270, verdicts


def test_pairing_by_round_skips_warmup_and_unmatched_streams() -> None:
    lines = _lines(random.Random(1), rounds=6)
    lines = [ln for ln in lines if ln["id"] != "0-4"]  # round 1's a stream (b went first) never ended
    early = {"id": "0-1", "start_ns": 0}
    lines = [dict(ln, **early) if ln["id"] == "0-1" else ln for ln in lines]  # round 0's a: warm-up
    pairs, how = pair_streams(lines, ["a", "b"], warmup_ns=500 * MS)
    assert how == "round"
    assert [(p[0]["id"], p[1]["id"]) for p in pairs["b"]] == [("0-5", "0-6"), ("0-8", "0-7"), ("0-9", "0-10"),
                                                              ("0-12", "0-11")]
    # the fixed order (a, b in every round) is not hopbench's numbering: it pairs by start time
    fixed = [dict(ln, arm="a" if int(ln["id"][2:]) % 2 else "b") for ln in _lines(random.Random(1), rounds=6)]
    assert pair_streams(fixed, ["a", "b"])[1] == "nearest start"


def test_arm_of_request_reverses_the_order_every_other_round() -> None:
    """Counterbalanced rounds (docs/ab-arms.md): each arm goes first in half the rounds."""
    from hopbench.config._arm_spec import arm_of_request

    assert [arm_of_request(n, 2) for n in range(1, 9)] == [0, 1, 1, 0, 0, 1, 1, 0]
    assert [arm_of_request(n, 3) for n in range(1, 10)] == [0, 1, 2, 2, 1, 0, 0, 1, 2]
    firsts = [arm_of_request(n, 3) for n in range(1, 3 * 40, 3)]
    assert firsts.count(0) == firsts.count(2) == 20  # the first and last arm lead alike
    with pytest.raises(ValueError, match="at least 1"):
        arm_of_request(0, 2)


def test_pairing_falls_back_to_the_nearest_start() -> None:
    """Lines whose ids do not follow hopbench's numbering pair by the nearest start time."""
    lines = [{"id": f"x{i}", "arm": arm, "scenario": "chat", "start_ns": t * MS, "ttft_ns": MS}
             for i, (arm, t) in enumerate([("a", 10), ("b", 12), ("a", 50), ("b", 49), ("b", 90), ("a", 200)])]
    pairs, how = pair_streams(lines, ["a", "b"])
    assert how == "nearest start"
    assert sorted((p[0]["start_ns"] // MS, p[1]["start_ns"] // MS) for p in pairs["b"]) == [(10, 12), (50, 49),
                                                                                            (200, 90)]


def test_paired_figures_too_few_pairs_and_none() -> None:
    figs = _judge(_lines(random.Random(2), rounds=6, shift=0.5))
    assert {f["verdict"] for f in figs} == {INCONCLUSIVE}
    assert "inconclusive: too few pairs (6, 10 needed)" in figs[0]["reason"]
    no_tpot = [{k: v for k, v in ln.items() if k != "tpot_ns"} for ln in _lines(random.Random(3))]
    tpot = next(f for f in _judge(no_tpot) if f["figure"] == "tpot")
    assert tpot["verdict"] == NOT_JUDGED and tpot["n"] == 0
    assert paired_verdict([tpot]) == NOT_JUDGED


def test_a_one_bucket_shift_of_the_digest_figures_is_within_their_resolution() -> None:
    """CI once read itl_p50 ``worse`` between two identical emulators: per-stream itl_p50 is the top
    of a digest bucket (65.5 us wide at 10 ms), so a shift of a few microseconds moves the streams
    near a bucket's edge into the next one, and with every other pair tied at 0 the signed-rank test
    calls a one-bucket shift of two pairs in three significant. One bucket or less is ``same``, by the
    resolution; two buckets are judged (worse), and tpot (not a digest figure) keeps no such floor."""
    from hopbench.measure._digest import bucket_of
    from hopbench.views._arm_differences import digest_resolution_ms

    assert digest_resolution_ms(10.027007) == pytest.approx(0.065536)
    assert digest_resolution_ms(0.0001) == pytest.approx(1e-6)  # below 256 ns: exact
    rng = random.Random(5)

    def lines(buckets: int) -> list[dict[str, Any]]:
        out = _lines(rng, rounds=120)
        for ln in out:  # every stream's itl_p50 at the same bucket; two thirds of arm b's up
            v = bucket_of(10_000_000)
            n = int(ln["id"].rsplit("-", 1)[1])
            if ln["arm"] == "b" and n % 3 != 0:
                for _ in range(buckets):
                    v = bucket_of(v + 1)
            ln["itl_p50_ns"], ln["tpot_ns"] = v, v
        return out

    one = {f["figure"]: f for f in _judge(lines(1))}
    assert one["itl_p50"]["p_samples"] < 1e-6  # the test alone would call it
    assert one["itl_p50"]["verdict"] == SAME, one["itl_p50"]["reason"]
    assert "same: +0.0655 ms (+0.7%) is within one bucket, the resolution of the streams' ITL digests (a " \
           "bucket is 0.0655 ms wide near 10 ms)" in one["itl_p50"]["reason"], one["itl_p50"]["reason"]
    assert one["tpot"]["verdict"] == WORSE  # the same numbers as a tpot: no digest floor
    two = {f["figure"]: f for f in _judge(lines(2))}
    assert two["itl_p50"]["p50_diff"] == pytest.approx(2 * 0.065536)
    assert two["itl_p50"]["verdict"] == WORSE, two["itl_p50"]["reason"]  # past one bucket: judged


def test_failed_streams_leave_e2e_and_tpot_and_a_worse_error_rate_makes_the_arm_worse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate that answers most requests with an error at once: its failed streams' short e2e
    must not read "better" (e2e and tpot count pairs whose streams both completed), and its error
    rate (compare's proportion test over all requests) makes the arm's paired verdict worse, in the
    text, the markdown and the headline."""
    from hopbench.views._arm_differences import paired_headlines

    lines = _lines(random.Random(8))
    for ln in lines:
        if ln["arm"] == "b" and (int(ln["id"].rsplit("-", 1)[1]) - 1) // 2 % 4 != 0:  # 3 rounds in 4: failed at once
            ln.update(outcome="http_error", e2e_ns=2 * MS, tpot_ns=None, ttft_ns=None, itl_p50_ns=None,
                      itl_p99_ns=None)
    figs = {f["figure"]: f for f in _judge(lines)}
    completed_b = sum(1 for ln in lines if ln["arm"] == "b" and ln["outcome"] == "completed" and ln["start_ns"] >= 1000 * MS)
    assert figs["e2e"]["n"] == figs["ttft"]["n"] <= completed_b
    assert figs["e2e"]["verdict"] != "better", figs["e2e"]["reason"]
    rates = {"error_rate": {"base": {"value": 0.0}, "candidate": {"value": 0.75}, "verdict": WORSE,
                            "test": {"p_value": 1e-9}},
             "http_error.500": {"base": {"value": 0.0}, "candidate": {"value": 0.75}, "verdict": WORSE},
             "timeout_rate": {"base": {"value": 0.0}, "candidate": {"value": 0.0}, "verdict": SAME}}
    summary = {"arms": [{"name": "a"}, {"name": "b"}], "scopes": {"a": {}, "b": {}}, "profile": {"run": {"warmup_s": 1}}}
    import hopbench.views._arm_differences as ad

    real = ad.compare_summaries

    class _C:  # compare's result for the arms, its rates replaced by ``rates``
        def __init__(self, c: Any) -> None:
            self.c, self.any_worse = c, True

        def to_json(self) -> dict[str, Any]:
            out = self.c.to_json()
            out["scopes"].setdefault(ad._SCOPE, {"metrics": {}, "rates": {}})["rates"] = rates
            return out

    monkeypatch.setattr(ad, "compare_summaries", lambda *a, **k: _C(real(*a, **k)))
    block = arm_differences(summary, lines)
    assert block is not None
    paired = block["pairs"][0]["paired"]
    assert paired["verdict"] == WORSE and [r["rate"] for r in paired["rates_worse"]] == ["error_rate"]
    assert "  error_rate: worse: 0.0% -> 75.0% (p = 1e-09, two-proportion test over all its requests)" \
        in render_arm_differences(block)
    assert "| error_rate | | worse: 0.0% -> 75.0%" in render_arm_differences_markdown(block)
    assert paired_headlines(block)[0].endswith("WORSE (error_rate: worse: 0.0% -> 75.0% (p = 1e-09, "
                                               "two-proportion test over all its requests))")
    # a dead arm: no stream of it gave a paired figure (all "not judged"), its rates still make it worse
    for ln in lines:
        if ln["arm"] == "b":
            ln.update(outcome="connect_error", e2e_ns=MS, tpot_ns=None, ttft_ns=None, itl_p50_ns=None, itl_p99_ns=None)
    dead = arm_differences(summary, lines)
    assert dead is not None
    assert {f["verdict"] for f in dead["pairs"][0]["paired"]["figures"]} == {NOT_JUDGED}
    assert dead["pairs"][0]["paired"]["verdict"] == WORSE


def test_arm_differences_carry_the_paired_verdict_and_render_it_first() -> None:
    lines = _lines(random.Random(4), shift=0.10)
    summary = {"arms": [{"name": "a"}, {"name": "b"}], "scopes": {"a": {}, "b": {}},
               "profile": {"run": {"warmup_s": 1}}}
    block = arm_differences(summary, lines)
    assert block is not None and "paired_method" in block
    paired = block["pairs"][0]["paired"]
    assert paired["pairing"] == "round" and paired["n"] == 120 and paired["verdict"] == WORSE
    ttft = paired["figures"][0]
    assert ttft["figure"] == "ttft" and ttft["p50_diff"] == pytest.approx(12.0, rel=0.3)
    assert ttft["reason"].startswith("worse: +") and ttft["reason"].endswith("[n = 120]")
    assert ttft["p_adjusted"] < ALPHA and ttft["noise_floor"] > 0
    text = render_arm_differences(block)
    assert text.startswith("A/B arms, paired: b against a, 120 rounds (paired by round; p Holm-adjusted, family-wise alpha 0.01): WORSE")
    assert "\n  ttft     p50 diff " in text
    # the whole-sample table below it says it is not the paired one (as the markdown does)
    assert "\nA/B arms, unpaired: b against a (alpha 0.01 after Holm, the arms interleaved in one run): " in text
    assert "paired" not in arm_differences(summary)["pairs"][0]  # type: ignore[index]
    # --format markdown: headings and tables (it was the text in a fenced block)
    md = render_arm_differences_markdown(block)
    assert md.startswith("### A/B arms, paired: `b` against `a`: **WORSE**\n"), md
    assert "| figure | p50 diff | verdict |" in md and "\n| ttft | +" in md and "```" not in md
    rows = [line for line in md.splitlines() if line.startswith("|")]
    header = next(line for line in rows if line.startswith("| metric |"))
    assert all(line.count("|") == header.count("|") for line in rows[rows.index(header):]), md


@pytest.mark.slow
def test_paired_verdict_end_to_end_on_the_emulator(tmp_path: Path) -> None:
    """profiles/ab-arms.toml for 4 s, arm "slow"'s emulator adding 100 ms to each first token (the
    profile's 20 ms can read inconclusive when both cores are busy with neighbours: a client delay
    hits one request of a round and not the other, +-50 ms between the quartiles of the differences
    on such a machine). The paired verdict reads ttft worse, and the stream's own gaps (itl_p50,
    tpot) worse only as far as the two emulators' own write gaps differed: each arm's emulator is
    its own process, and on a busy machine one can be scheduled later than the other for a whole
    run (CI once read itl worse that way); the ground truth says whether it was."""
    import json

    from hopbench.config._profile import parse_profile
    from hopbench.driver._single import run_profile
    from hopbench.views._arm_differences import add_arm_differences

    text = (ROOT / "profiles" / "ab-arms.toml").read_text(encoding="utf-8").replace("duration_s = 8", "duration_s = 4")
    text = text.replace("emulator = { ttft_ms = 60 }", "emulator = { ttft_ms = 140 }")
    assert "duration_s = 4" in text and "emulator = { ttft_ms = 140 }" in text
    out = run_profile(parse_profile(text, tmp_path / "ab.toml", env={}), out_dir=tmp_path / "out")
    add_arm_differences(out.out_dir, out.summary)
    on_disk = json.loads((out.out_dir / "summary.json").read_text(encoding="utf-8"))
    paired = on_disk["arm_differences"]["pairs"][0]["paired"]
    figs = {f["figure"]: f for f in paired["figures"]}
    assert paired["pairing"] == "round" and paired["n"] >= 40
    assert paired["verdict"] == WORSE
    assert figs["ttft"]["verdict"] == WORSE, figs["ttft"]["reason"]
    assert 70 < figs["ttft"]["p50_diff"] < 130
    _worse_only_as_the_emulators_wrote(out.out_dir, figs)
    assert figs["itl_p50"]["n"] == figs["ttft"]["n"]  # every measured stream wrote its own ITL
    # counterbalanced: the engine sent round r's requests in the order arm_of_request gives
    from hopbench.config._arm_spec import arm_of_request
    names = [a["name"] for a in on_disk["arms"]]
    lines = [json.loads(x) for x in (out.out_dir / "streams.jsonl").read_text().splitlines()]
    assert lines and all(ln["arm"] == names[arm_of_request(int(ln["id"].rsplit("-", 1)[1]), 2)] for ln in lines)
    from hopbench.report._page import write_report

    page = write_report(out.out_dir).read_text(encoding="utf-8")
    assert f"slow against fast, paired over {paired['n']} rounds: worse" in page


def _worse_only_as_the_emulators_wrote(out_dir: Path, figs: dict[str, dict[str, Any]]) -> None:
    """A paired itl_p50 / tpot verdict of ``worse`` must be the emulators' doing: the same pairs'
    ground truth (each arm's ``ground_truth.<arm>.jsonl``: the gaps between the emulator's own
    writes, ns) shows the candidate's median gap (itl_p50) or mean gap (tpot) longer, and hopbench's
    median difference agrees with the truth's within what this run measured: the digest's
    resolution (1/128 of the gap, hopbench.measure._digest) plus 3 standard errors of the
    paired median (batch means). A difference the emulators did not write is hopbench's false alarm."""
    import json
    import statistics

    truth = {}
    for arm in ("fast", "slow"):
        for line in (out_dir / f"ground_truth.{arm}.jsonl").read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec["gaps_ns"]:
                truth[rec["request_id"]] = rec["gaps_ns"]
    lines = [json.loads(x) for x in (out_dir / "streams.jsonl").read_text(encoding="utf-8").splitlines()]
    pairs, how = pair_streams(lines, ["fast", "slow"], warmup_ns=1_000_000_000)
    assert how == "round"
    for name, of in (("itl_p50", statistics.median), ("tpot", statistics.mean)):
        f = figs[name]
        if f["verdict"] != WORSE:
            continue
        diffs = [(of(truth[c["id"]]) - of(truth[b["id"]])) / MS for b, c in pairs["slow"]
                 if b["id"] in truth and c["id"] in truth]
        assert len(diffs) >= 0.9 * f["n"], (name, len(diffs), f["n"])
        true_diff = statistics.median(diffs)
        tolerance = f["base_p50"] / 128 + 3 * (f["se"] or 0.0)
        assert true_diff > 0 and abs(f["p50_diff"] - true_diff) <= tolerance, (name, f, true_diff, tolerance)


# -- gate: budgets on the paired difference ----------------------------------------------


def _arms_summary(shift: float, seed: int) -> dict[str, Any]:
    summary: dict[str, Any] = {"arms": [{"name": "a"}, {"name": "b"}], "scopes": {"a": {}, "b": {}},
                               "profile": {"run": {"warmup_s": 1}}, "complete": True}
    block = arm_differences(summary, _lines(random.Random(seed), shift=shift, drift_ms=20.0))
    return dict(summary, arm_differences=block)


def _budget_verdicts(summary: dict[str, Any], budget: dict[str, str]) -> dict[str, str]:
    from hopbench.views._gate import evaluate_gate

    report = evaluate_gate(summary, budget)
    return {key: j.verdict for key, j, _ in report.verdicts.budgets}


def test_gate_arms_budget_fails_a_shift_beyond_noise_and_passes_aa() -> None:
    budget = {"arms.ttft.p50_diff": "<= 5ms", "arms.e2e.p50_diff": "<= 100ms", "arms.itl_p50.p50_diff": "<= -0.5ms"}
    shifted = _budget_verdicts(_arms_summary(0.10, 5), budget)  # ttft +12 ms, e2e +52 ms, itl +1.1 ms
    assert shifted == {"arms.ttft.p50_diff": "fail", "arms.e2e.p50_diff": "pass", "arms.itl_p50.p50_diff": "fail"}
    aa = _budget_verdicts(_arms_summary(0.0, 6), budget)
    assert aa["arms.ttft.p50_diff"] == "pass" and aa["arms.e2e.p50_diff"] == "pass"
    assert aa["arms.itl_p50.p50_diff"] in ("fail", "inconclusive")  # asked to be 0.5 ms faster: it is not
    # a limit within one bucket of the difference (itl_p50 ~11 ms: buckets of 0.0655 ms) is beyond the
    # digests' resolution: inconclusive, saying so, whether the value passes or breaches it
    from hopbench.views._gate import evaluate_gate

    summary = _arms_summary(0.0, 6)
    diff = next(f["p50_diff"] for f in summary["arm_differences"]["pairs"][0]["paired"]["figures"]
                if f["figure"] == "itl_p50")
    for limit in (diff - 0.01, diff + 0.01):
        (_, j, _), = evaluate_gate(summary, {"arms.itl_p50.p50_diff": f"<= {limit:.6f}ms"}).verdicts.budgets
        assert j.verdict == INCONCLUSIVE and "within the resolution of the streams' ITL digests (0.0655 ms): no " \
            "run can tell it" in j.reason, (limit, j.reason)
        # the headline's cure is the limit's, not "retry on a quieter runner" (no runner cures it)
        reason = evaluate_gate(summary, {"arms.itl_p50.p50_diff": f"<= {limit:.6f}ms"}).verdicts.reason()
        assert reason.startswith("gate INCONCLUSIVE (exit 5: move the limit: no runner can tell it)"), reason
    (_, j, _), = evaluate_gate(summary, {"arms.itl_p50.p50_diff": f"<= {diff + 0.2:.6f}ms"}).verdicts.budgets
    assert j.verdict == "pass", j.reason  # two buckets and more away: judged as any other
    # a run without A/B arms: bad input (exit 2), never exit 5's "retry on a quieter runner",
    # which no runner could cure (a new user's finding); an arms run without the pairs (no
    # streams.jsonl): inconclusive, with why
    from hopbench._errors import ProfileError
    from hopbench.views._gate import evaluate_gate

    plain = {"scopes": {"all": {}}, "complete": True}
    with pytest.raises(ProfileError, match="not an A/B arms run .no arm_differences."):
        evaluate_gate(plain, {"arms.ttft.p50_diff": "<= 5ms"})
    unpaired = dict(plain, arm_differences={"pairs": [{"base": "a", "candidate": "b"}]})
    (r,) = evaluate_gate(unpaired, {"arms.ttft.p50_diff": "<= 5ms"}).results
    assert r.status == "inconclusive" and "no paired ttft (no paired verdicts: the run kept no streams.jsonl" in r.reason
    # an arm whose requests all failed: pairs, but none with a ttft on both streams (a new user's dead arm)
    failed = dict(plain, arm_differences={"pairs": [{"base": "a", "candidate": "b", "paired": {
        "figures": [{"figure": "ttft", "p50_diff": None, "n": 0}]}}]})
    (r,) = evaluate_gate(failed, {"arms.ttft.p50_diff": "<= 5ms"}).results
    assert r.status == "inconclusive" and "no round had it on both arms' streams: an arm's requests failed" in r.reason


@pytest.mark.parametrize(("budget", "message"), [
    ('"arms.ttfx.p50_diff" = "<= 5ms"', r"unknown A/B arms budget: did you mean 'ttft'\?"),
    ('"arms.ttft.p90" = "<= 5ms"', r"expected \"arms.<figure>.p50_diff\""),
    ('"arms.ttft.p50_diff" = "<= baseline + 1ms"', r"already a difference against the first arm"),
    ('"arms.ttft.p50_diff" = "<= 5"', r"expected a time with a unit"),
    ('[gate.scenario.chat]\n"arms.ttft.p50_diff" = "<= 5ms"', r"put it in \[gate\]"),
])
def test_gate_arms_budget_bad_input_names_the_key(budget: str, message: str) -> None:
    from hopbench._errors import ProfileError
    from hopbench._toml import parse_toml
    from hopbench.config._gate_spec import parse_budgets

    doc = parse_toml(f"[gate]\n{budget}\n", Path("b.toml"))
    with pytest.raises(ProfileError, match=r"b.toml:\d+: .*" + message):
        parse_budgets(doc.root().table("gate"))


def test_gate_arms_budget_parses_a_negative_limit_and_needs_arms_in_a_profile() -> None:
    from hopbench._errors import ProfileError
    from hopbench._toml import parse_toml
    from hopbench.config._gate_spec import parse_budgets
    from hopbench.config._profile import parse_profile

    doc = parse_toml('[gate]\n"arms.tpot.p50_diff" = "<= -0.5ms"\n', Path("b.toml"))
    (b,), _ = parse_budgets(doc.root().table("gate"))
    assert (b.arms_figure, b.limit, b.unit, b.min_count, b.metric) == ("tpot", -0.5, "ms", 10, None)
    text = ('[run]\nduration_s = 1\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:9"\n[[scenario]]\nprotocol = "chat"\n'
            'model = "m"\n[gate]\n"arms.ttft.p50_diff" = "<= 5ms"\n')
    with pytest.raises(ProfileError, match=r"p.toml:\d+: .*needs \[\[arm\]\] tables"):
        parse_profile(text, Path("p.toml"), env={})


# -- hopbench compare ARMS_DIR -----------------------------------------------------------


def _arms_folder(tmp_path: Path, shift: float, seed: int) -> Path:
    import json

    from hopbench.driver._results import SCHEMA

    summary = {"schema": SCHEMA, "arms": [{"name": "a"}, {"name": "b"}], "scopes": {"a": {}, "b": {}},
               "profile": {"run": {"warmup_s": 1}}, "complete": True}
    folder = tmp_path / f"arms-{seed}"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    lines = _lines(random.Random(seed), shift=shift, drift_ms=20.0)
    (folder / "streams.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in lines), encoding="utf-8")
    return folder


def test_compare_one_arms_folder_prints_the_paired_verdict_and_exits_by_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hopbench.cli import main

    worse = _arms_folder(tmp_path, 0.10, 7)
    assert main(["compare", str(worse), "--fail-on-worse"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("A/B arms, paired: b against a, 120 rounds (paired by round; p Holm-adjusted, family-wise alpha 0.01): WORSE")
    assert main(["compare", str(worse)]) == 0  # without --fail-on-worse: a report only
    capsys.readouterr()
    same = _arms_folder(tmp_path, 0.0, 8)
    assert main(["compare", str(same), "--fail-on-worse", "--format", "json"]) == 0
    import json

    block = json.loads(capsys.readouterr().out)
    assert block["pairs"][0]["paired"]["verdict"] == SAME
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "summary.json").write_text(json.dumps({"schema": json.loads((same / "summary.json").read_text())["schema"],
                                                    "scopes": {"all": {}}}), encoding="utf-8")
    assert main(["compare", str(plain)]) == 2
    assert "one folder is compared only when it holds an A/B arms run" in capsys.readouterr().err
    # two folders' options are refused, not ignored (they would read as applied)
    for extra in (["--min-effect", "0.5"], ["--min-abs-ms", "30"], ["--alpha", "0.2"], ["--metric", "ttft"]):
        assert main(["compare", str(worse), "--fail-on-worse", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert f"error: {extra[0]} applies to two folders; one A/B arms folder is judged by its own rules" in err


def test_paired_headlines_one_sentence_per_arm() -> None:
    from hopbench.views._arm_differences import paired_headlines

    block = _arms_summary(0.10, 9)["arm_differences"]
    (line,) = paired_headlines(block)
    assert line.startswith("A/B arms, paired: b against a, 120 rounds: WORSE (ttft: worse: +")
    (same,) = paired_headlines(_arms_summary(0.0, 10)["arm_differences"])
    assert same == "A/B arms, paired: b against a, 120 rounds: SAME"
    assert paired_headlines({"pairs": [{"base": "a", "candidate": "b"}]}) == []


def test_gate_warns_that_scope_all_of_an_arms_run_mixes_the_arms() -> None:
    # an arms version of ci-gate: the candidate arm alone over its ttft budget, "all" (half
    # the base's streams) under it, and nothing said (a new user's finding)
    from hopbench.views._gate import evaluate_gate

    s = {"scopes": {"all": {}, "main": {}, "cand": {}}, "complete": True, "saturated": False,
         "arm_differences": {"pairs": []}, "profile": {"arm": [{"name": "main"}, {"name": "cand"}]}}
    report = evaluate_gate(s, {"ttft.p50": "<= 135ms", "scenario": {"cand": {"ttft.p50": "<= 135ms"}}})
    assert report.warnings == ("ttft.p50: scope all of an A/B arms run mixes the arms' streams (main, cand): gate "
                               "an arm's own scope ([scenario.<arm>] budgets) or the paired difference "
                               "(arms.<figure>.p50_diff)",)
    assert not evaluate_gate(s, {"scenario": {"cand": {"ttft.p50": "<= 135ms"}}}).warnings
