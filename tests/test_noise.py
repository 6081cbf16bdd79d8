"""Tests for hopbench.views._noise: three-valued verdicts against synthetic runs with known
shifts and known noise (seeded; no clock), Holm's adjustment, batch means, effective n."""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Sequence

import pytest

from hopbench.views._noise import (BETTER, FAIL, INCONCLUSIVE, NOT_JUDGED, PASS, SAME, WORSE, Figure, Limit,
                                   Noise, batch_means, batches, effective_n, holm, judge_family, judge_limits,
                                   relative_noise, spread_se)
from hopbench.views._stats import mann_whitney

ALPHA = 0.01


# -- a synthetic run ----------------------------------------------------------------


def _run(rng: random.Random, *, median_ms: float, intervals: int = 12, per_interval: int = 25,
         sigma: float = 0.12, drift_ms: float = 0.0, client_ms: float = 0.0) -> list[list[float]]:
    """A run's values per interval: lognormal around ``median_ms`` (spread ``sigma``), each
    interval shifted by its own drift ~ N(0, drift_ms) (what the machine does from second to
    second: shared by the interval's samples), plus a client delay ~ Exp(mean client_ms) per sample."""
    out = []
    for _ in range(intervals):
        d = rng.gauss(0.0, drift_ms) if drift_ms else 0.0
        out.append([median_ms * math.exp(rng.gauss(0.0, sigma)) + d
                    + (rng.expovariate(1 / client_ms) if client_ms else 0.0) for _ in range(per_interval)])
    return out


def _buckets(values: Sequence[float]) -> list[tuple[int, int]]:
    """Values at 10 us resolution as (value, count) ascending, as the HDR buckets feed Mann-Whitney."""
    return sorted(Counter(round(v * 100) for v in values).items())


def _median(vs: Sequence[float]) -> float:
    return statistics.median(vs)


def _figure(a: list[list[float]], b: list[list[float]], client_a: float = 0.0, client_b: float = 0.0) -> Figure:
    fa, fb = [v for g in a for v in g], [v for g in b for v in g]
    se_a, n_a = batch_means(a, 2, _median)
    se_b, n_b = batch_means(b, 2, _median)
    ma, mb = _median(fa), _median(fb)
    return Figure(mb - ma, (mb - ma) / ma, "ms", mann_whitney(_buckets(fa), _buckets(fb)).p_value,
                  Noise(se_a, n_a, client_a, "loop lag"), Noise(se_b, n_b, client_b, "loop lag"),
                  len(fa), len(fb))


def _old_verdict(f: Figure) -> str:
    """The verdict before issue 37: significant at alpha and past the fixed 5 % / 1 ms floors."""
    assert f.p_samples is not None and f.change is not None and f.rel is not None
    if f.p_samples < ALPHA and abs(f.rel) >= 0.05 and abs(f.change) >= 1.0:
        return WORSE if f.change > 0 else BETTER
    return SAME


# -- the statistics ------------------------------------------------------------------


def test_holm_adjusts_step_down_and_keeps_order() -> None:
    # m = 4: sorted 0.001 (x4 = 0.004), 0.01 (x3 = 0.03), 0.02 (x2 = 0.04), 0.5 (x1 = 0.5)
    assert holm([0.02, 0.001, 0.5, 0.01]) == pytest.approx([0.04, 0.004, 0.5, 0.03])
    # monotone: a larger raw p never gets a smaller adjusted one; capped at 1
    assert holm([0.3, 0.3, 0.3, 0.9]) == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert holm([]) == []


def test_batches_join_intervals_until_each_has_enough() -> None:
    assert batches([5, 5, 5, 5, 5], 10) == [[0, 1], [2, 3, 4]]  # the short tail folds into the last
    assert batches([30, 0, 30], 10) == [[0], [1, 2]]
    assert batches([3, 3], 10) == []


def test_spread_se_needs_three_batches() -> None:
    assert spread_se([1.0, 2.0]) is None
    assert spread_se([1.0, 2.0, 3.0]) == pytest.approx(1.0 / math.sqrt(3))


def test_batch_means_sees_drift_that_pooled_samples_hide() -> None:
    rng = random.Random(1)
    quiet = _run(rng, median_ms=100, drift_ms=0.0)
    drifting = _run(rng, median_ms=100, drift_ms=8.0)
    se_q, _ = batch_means(quiet, 2, _median)
    se_d, _ = batch_means(drifting, 2, _median)
    assert se_q is not None and se_d is not None
    assert se_d > 2 * se_q


def test_effective_n_counts_streams_for_per_event_metrics() -> None:
    assert effective_n(9300, 300, per_event=True) == 300  # ITL: 9,300 gaps from 300 streams
    assert effective_n(300, 300, per_event=False) == 300
    assert effective_n(9300, None, per_event=True) == 9300


# -- compare: known shifts, known noise ------------------------------------------------


def test_known_shift_beyond_noise_is_found() -> None:
    rng = random.Random(7)
    found = 0
    for _ in range(40):
        base = _run(rng, median_ms=120, drift_ms=2.0, client_ms=0.5)
        cand = _run(rng, median_ms=132, drift_ms=2.0, client_ms=0.5)  # +10 %
        (j,) = judge_family([_figure(base, cand, 1.2, 1.2)], ALPHA)
        found += j.verdict == WORSE
        assert j.verdict != BETTER
    assert found >= 36  # >= 90 % of the time


def test_aa_pairs_with_drift_are_not_called_worse_at_the_stated_rate() -> None:
    """A/A pairs whose runs drift from second to second: the old verdict (pooled samples,
    fixed floors) false-alarms; the noise-aware one stays within alpha."""
    rng = random.Random(11)
    pairs, new_alarms, old_alarms = 300, 0, 0
    for _ in range(pairs):
        base = _run(rng, median_ms=20, drift_ms=2.5)
        cand = _run(rng, median_ms=20, drift_ms=2.5)
        f = _figure(base, cand)
        (j,) = judge_family([f], ALPHA)
        new_alarms += j.verdict in (WORSE, BETTER)
        old_alarms += _old_verdict(f) in (WORSE, BETTER)
    # alpha = 1 %: 3 expected at most; 8 is past the binomial's 99.9th percentile
    assert new_alarms <= 8
    assert old_alarms >= 30


def test_aa_pairs_mostly_same_and_borderline_shifts_inconclusive() -> None:
    """Design point A of issue 37: a worse change within the noise floor but near its edge is
    inconclusive; A/A pairs (well inside the noise) still read same 9 times in 10 (279 of 300
    with seed 11), while a shift of about half the floor reads inconclusive far more often."""
    rng = random.Random(11)
    aa = Counter(judge_family([_figure(_run(rng, median_ms=20, drift_ms=2.5),
                                       _run(rng, median_ms=20, drift_ms=2.5))], ALPHA)[0].verdict
                 for _ in range(300))
    assert aa[SAME] >= 270 and aa[INCONCLUSIVE] >= 1
    shifted = Counter(judge_family([_figure(_run(rng, median_ms=20, drift_ms=2.5),
                                            _run(rng, median_ms=22, drift_ms=2.5))], ALPHA)[0].verdict
                      for _ in range(200))
    assert shifted[INCONCLUSIVE] >= 3 * aa[INCONCLUSIVE] * 200 / 300


def test_worse_change_near_the_floors_edge_is_inconclusive_well_inside_is_same() -> None:
    noise = Noise(2.0, 12, 0.5, "its loop lag p90")  # floor: 0.5 + t(0.995, ~22) * 2.83 = about 8.5 ms
    edge, inside, faster = judge_family([Figure(6.5, 0.065, "ms", 1e-6, noise, noise, 300, 300)], ALPHA) + \
        judge_family([Figure(3.0, 0.03, "ms", 1e-6, noise, noise, 300, 300)], ALPHA) + \
        judge_family([Figure(-6.5, -0.065, "ms", 1e-6, noise, noise, 300, 300)], ALPHA)
    assert edge.verdict == INCONCLUSIVE, edge.reason
    assert edge.reason.startswith("inconclusive: +6.5 ms (+6.5%) shows in the samples (p = 1e-06) but is "
                                  "within the runs' noise floor of ")
    assert "near its edge (p(noise) = 0.0" in edge.reason
    assert inside.verdict == SAME
    assert faster.verdict == SAME  # better within the floor: nothing to retry for


def test_aa_pair_busy_candidate_is_the_clients_delay_not_worse() -> None:
    """Baseline quiet, candidate on a busy runner: its client adds delay (the issue's normal CI
    case). The allowance (the candidate's loop lag) explains it: never worse."""
    rng = random.Random(3)
    worse = 0
    for _ in range(100):
        base = _run(rng, median_ms=2.0, sigma=0.05, drift_ms=0.05, client_ms=0.05)
        cand = _run(rng, median_ms=2.0, sigma=0.05, drift_ms=0.05, client_ms=2.0)
        lag_b = -2.0 * math.log(0.1)  # Exp(mean 2 ms)'s 90th percentile: the allowance at p50
        f = _figure(base, cand, 0.3, lag_b)
        (j,) = judge_family([f], ALPHA)
        worse += j.verdict == WORSE
        assert _old_verdict(f) == WORSE  # what compare read before: WORSE in 64 of 64 pairs
    assert worse == 0


def test_change_within_the_noise_floor_is_same_with_its_reason() -> None:
    f = Figure(3.0, 0.03, "ms", 1e-6, Noise(2.0, 12, 0.5, "its loop lag p90"),
               Noise(2.0, 12, 0.5, "its loop lag p90"), 300, 300)
    (j,) = judge_family([f], ALPHA)
    assert j.verdict == SAME
    assert j.reason.startswith("same: +3 ms (+3.0%) is within the runs' noise floor of ")
    assert "client delay up to 0.5 ms from its loop lag p90" in j.reason
    assert j.p_samples == 1e-6 and j.p_value is not None and j.p_value > ALPHA


def test_change_past_one_floor_but_not_the_familys_is_inconclusive() -> None:
    """Past the noise floor of one test at alpha, but one of 60 figures: Holm does not let it be a
    change, and it is no 'same' either."""
    noise = Noise(1.0, 12)
    fl = 2 * 3.106 * 2 ** 0.5 / 2  # t(0.995, ~22 df) * sqrt(2) * se: the floor is about 4.4 ms
    past = Figure(fl * 1.4, 0.06, "ms", 1e-9, noise, noise, 300, 300)
    nulls = [Figure(0.1, 0.001, "ms", 0.5, noise, noise, 300, 300) for _ in range(59)]
    j = judge_family([past, *nulls], ALPHA)[0]
    assert j.verdict == INCONCLUSIVE
    assert j.reason.startswith("inconclusive: +")
    assert "but not significant among the 60 figures judged" in j.reason
    assert judge_family([past], ALPHA)[0].verdict == WORSE  # alone, it is a change


def test_family_of_many_aa_tests_false_alarms_at_most_alpha() -> None:
    """60 null figures per compare (the issue's '~60 tests with no correction'): Holm keeps the
    chance of any false alarm in one compare near alpha; without it, about 1 - 0.99^60 = 45 %."""
    rng = random.Random(5)
    compares, any_alarm, raw_alarm = 200, 0, 0
    for _ in range(compares):
        figs = [Figure(1.0, 0.01, "ms", rng.random(), Noise(0.1, 10), Noise(0.1, 10), 300, 300)
                for _ in range(60)]
        # pair p = max(p_samples, p_noise): p_noise is ~0 here, so the samples' test decides
        any_alarm += any(j.verdict in (WORSE, BETTER) for j in judge_family(figs, ALPHA))
        raw_alarm += any((f.p_samples or 1) < ALPHA for f in figs)
    assert any_alarm <= 8
    assert raw_alarm >= 60


def test_too_few_samples_and_no_value_are_never_same() -> None:
    few = Figure(5.0, 0.5, "ms", 0.5, Noise(1.0, 5), Noise(1.0, 5), 40, 300, min_n=100)
    tail = Figure(5.0, 0.5, "ms", 0.5, Noise(1.0, 5), Noise(1.0, 5), 40, 300, min_n=100, few_is_inconclusive=False)
    none = Figure(None, None, "ms", None, Noise(None), Noise(None), 0, 300)
    j_few, j_tail, j_none = judge_family([few, tail, none], ALPHA)
    assert j_few.verdict == INCONCLUSIVE and "too few samples (n = 40 and 300, 100 needed" in j_few.reason
    assert j_tail.verdict == NOT_JUDGED and j_tail.reason.startswith("not judged: too few samples")
    assert j_none.verdict == NOT_JUDGED


def test_short_run_without_spread_is_inconclusive_not_worse() -> None:
    f = Figure(30.0, 0.3, "ms", 1e-9, Noise(None, 2), Noise(None, 2), 300, 300)
    (j,) = judge_family([f], ALPHA)
    assert j.verdict == INCONCLUSIVE and "fewer than 3 batches" in j.reason


def test_saturated_run_change_within_its_floor_is_inconclusive_beyond_it_worse() -> None:
    lagging = Noise(0.5, 10, 30.0, "its loop lag p99")  # a saturated run's allowance: its lag p99
    within = Figure(12.0, 0.1, "ms", 1e-9, Noise(0.5, 10), lagging, 300, 300, saturated="results/b")
    beyond = Figure(45.0, 0.4, "ms", 1e-9, Noise(0.5, 10), lagging, 300, 300, saturated="results/b")
    j_within, j_beyond = judge_family([within, beyond], ALPHA)
    assert j_within.verdict == INCONCLUSIVE and "of a saturated load generator (results/b)" in j_within.reason
    assert j_beyond.verdict == WORSE
    unsaturated = Figure(12.0, 0.1, "ms", 1e-9, Noise(0.5, 10), lagging, 300, 300)
    assert judge_family([unsaturated], ALPHA)[0].verdict == SAME
    # faster within a saturated base's floor: no doubt worth a retry
    faster = Figure(-12.0, -0.1, "ms", 1e-9, lagging, Noise(0.5, 10), 300, 300, saturated="results/a")
    assert judge_family([faster], ALPHA)[0].verdict == SAME


def test_better_uses_the_bases_client_allowance() -> None:
    # the base's client lagged 10 ms: a candidate 8 ms faster is the base's client, not better
    f = Figure(-8.0, -0.08, "ms", 1e-9, Noise(0.1, 10, 10.0, "its loop lag p90"), Noise(0.1, 10), 300, 300)
    (j,) = judge_family([f], ALPHA)
    assert j.verdict == SAME and "client delay up to 10 ms from its loop lag p90" in j.reason
    f2 = Figure(8.0, 0.08, "ms", 1e-9, Noise(0.1, 10, 10.0, "its loop lag at p90"), Noise(0.1, 10), 300, 300)
    assert judge_family([f2], ALPHA)[0].verdict == WORSE


def test_higher_is_better_figures_read_a_drop_as_worse() -> None:
    f = Figure(-4.0, -0.05, "tokens/s", 1e-12, Noise(0.15, 14), Noise(0.15, 14), 300, 300, higher_is_worse=False)
    (j,) = judge_family([f], ALPHA)
    assert j.verdict == WORSE and j.reason.startswith("worse: -4 tokens/s (-5.0%), beyond the noise floor")


# -- gate: limits ------------------------------------------------------------------


def test_limit_held_passes_breach_beyond_noise_fails_within_is_inconclusive() -> None:
    noise = Noise(1.0, 12, 2.0, "its loop lag at p90")
    held, far, near, unknown = judge_limits([
        Limit(99.0, 100.0, "<=", "ms", noise, 300, 2),
        Limit(110.0, 100.0, "<=", "ms", noise, 300, 2),  # 10 ms past: allowance 2 + 2.6 sigma
        Limit(102.5, 100.0, "<=", "ms", noise, 300, 2),  # 2.5 ms past: the client could explain it
        Limit(110.0, 100.0, "<=", "ms", Noise(None, 2), 300, 2),
    ], ALPHA)
    assert held.verdict == PASS and held.reason == "pass: 99 <= 100 ms"
    assert far.verdict == FAIL and far.reason.startswith("fail: 110 ms, limit <= 100 ms: over by 10 ms, beyond")
    assert near.verdict == INCONCLUSIVE and "within the run's noise" in near.reason
    assert unknown.verdict == INCONCLUSIVE and "fewer than 3 batches" in unknown.reason


def test_limit_rate_drop_beyond_the_clients_allowance_fails() -> None:
    # tokens/s >= 76: the client's delay lowers a rate, so 3 of the 6 tokens/s may be the client's;
    # the other 3 are 15 standard errors
    (j,) = judge_limits([Limit(70.0, 76.0, ">=", "tokens/s", Noise(0.2, 12, 3.0, "x"), 300, 2,
                               higher_is_worse=False)], ALPHA)
    assert j.verdict == FAIL
    (j,) = judge_limits([Limit(73.5, 76.0, ">=", "tokens/s", Noise(0.2, 12, 3.0, "x"), 300, 2,
                               higher_is_worse=False)], ALPHA)
    assert j.verdict == INCONCLUSIVE


def test_limit_too_few_and_no_value() -> None:
    few, none = judge_limits([Limit(900.0, 800.0, "<=", "ms", Noise(1.0, 5), 40, 100),
                              Limit(None, 800.0, "<=", "ms", Noise(None), 0, 100)], ALPHA)
    assert few.verdict == INCONCLUSIVE and "too few samples (40, 100 needed)" in few.reason
    assert none.verdict == NOT_JUDGED


def test_relative_noise_adds_the_baselines_spread() -> None:
    n = relative_noise(Noise(3.0, 10, 1.0, "a"), Noise(4.0, 10, 9.0, "b"), factor=1.0)
    assert n.se == pytest.approx(5.0) and n.client == 1.0


def test_gate_aa_runs_against_a_calibrated_limit_rarely_fail() -> None:
    """A budget set at the A/A runs' p50 plus the noise floor: quiet A/A runs fail it at most
    alpha of the time; a +10 % regression fails it almost always."""
    rng = random.Random(21)
    fails = caught = 0
    for _ in range(200):
        run = _run(rng, median_ms=120, drift_ms=2.0)
        se, k = batch_means(run, 2, _median)
        v = _median([x for g in run for x in g])
        (j,) = judge_limits([Limit(v, 126.0, "<=", "ms", Noise(se, k, 0.5, "lag"), 300, 2)], ALPHA)
        fails += j.verdict == FAIL
        reg = _run(rng, median_ms=138, drift_ms=2.0)
        se, k = batch_means(reg, 2, _median)
        v = _median([x for g in reg for x in g])
        (j,) = judge_limits([Limit(v, 126.0, "<=", "ms", Noise(se, k, 0.5, "lag"), 300, 2)], ALPHA)
        caught += j.verdict == FAIL
    assert fails <= 2
    assert caught >= 180


def test_student_t_matches_the_tables() -> None:
    from hopbench.views._noise import t_isf, t_sf

    assert t_sf(2.228, 10) == pytest.approx(0.025, abs=2e-4)  # Student's t table, df 10
    assert t_sf(3.169, 10) == pytest.approx(0.005, abs=1e-4)
    assert t_sf(-1.812, 10) == pytest.approx(0.95, abs=2e-4)
    assert t_sf(2.576, math.inf) == pytest.approx(0.005, abs=1e-4)
    assert t_isf(0.005, 11) == pytest.approx(3.106, abs=1e-3)


def test_budget_table_takes_client_included() -> None:
    from pathlib import Path

    from hopbench._errors import ProfileError
    from hopbench._toml import parse_toml
    from hopbench.config._gate_spec import parse_budgets

    doc = parse_toml('[gate]\n"ttft.p50" = { limit = "<= 135ms", client_included = 5.64 }\n', Path("b.toml"))
    (b,), _ = parse_budgets(doc.root().table("gate"))
    assert b.client_included == 5.64 and b.limit == 135.0
    doc = parse_toml('[gate]\n"ttft.p50" = { limit = "<= 135ms", client_included = -1 }\n', Path("b.toml"))
    with pytest.raises(ProfileError, match=r"b.toml:2: .*client_included"):
        parse_budgets(doc.root().table("gate"))


def test_a_compare_that_judged_nothing_is_not_judged_and_never_passes_a_gate() -> None:
    # (compare --force across runs that share no figure, or --metric naming one neither has:
    # it read "same" and exited 0 under --fail-on-worse, a gate that checked nothing passing)
    from hopbench.views._noise import Judged
    from hopbench.views._verdicts import FigureVerdict, Verdicts

    nothing = Verdicts((), 0.01)
    assert nothing.verdict == NOT_JUDGED and nothing.exit_code(True) == 5 and nothing.exit_code(False) == 0
    one = FigureVerdict("all", "ttft.p50", "ms", 120.0, None, Judged(NOT_JUDGED, "not judged: a side has no value"))
    assert Verdicts((one,), 0.01).verdict == NOT_JUDGED
    same = FigureVerdict("all", "ttft.p90", "ms", 120.0, 121.0, Judged(SAME, "same: +1 ms is within sampling noise"))
    assert Verdicts((one, same), 0.01).verdict == SAME and Verdicts((one, same), 0.01).exit_code(True) == 0


def test_the_p_a_sentence_shows_is_in_the_json() -> None:
    # "same: ... within sampling noise (p = X)": X is the samples' p after Holm; it was in no
    # JSON field (p_adjusted is the pair's)
    import re

    from hopbench.views._verdicts import FigureVerdict

    quiet = Noise(0.5, 10, 0.1, "its loop lag mean")
    figs = [Figure(0.2, 0.002, "ms", 0.3, quiet, quiet, 200, 200), Figure(9.0, 0.09, "ms", 1e-9, quiet, quiet, 200, 200)]
    for f, j in zip(figs, judge_family(figs, ALPHA)):
        m = re.search(r"\(p = ([0-9.e-]+)", j.reason)
        assert m is not None, j.reason
        d = FigureVerdict("all", "ttft.p50", "ms", 1.0, 1.0, j).to_json()
        shown = float(m.group(1))
        key = "p_samples_adjusted" if "sampl" in j.reason else "p_adjusted"
        assert d[key] is not None and f"{d[key]:.2g}" == f"{shown:.2g}", (j.reason, d)


def test_runner_line_says_an_unmeasured_loop_lag_is_unmeasured() -> None:
    from hopbench.views._noise_record import runner_line

    g = {"neighbours_cpu_cores": 0.5, "cpus": 2, "steal_share": 0.0}
    assert runner_line({"generator": {**g, "loop_lag_p99_ms": 12.5}}).startswith("loop lag p99 12.5 ms, ")
    # summary.json keeps 0 when the probe took no sample (a run shorter than its period)
    assert runner_line({"generator": {**g, "loop_lag_p99_ms": 0}}) == \
        "loop lag not measured, neighbours 0.50 cores of 2, steal 0.0%"


def test_a_gateway_overhead_figure_has_its_sampling_error_over_streams_not_two_degrees_of_freedom() -> None:
    # event_delay & co. are computed after the run (joined with the upstream's record), so
    # intervals.hlog has none: with "fewer than 3 batches" a gate needed a breach of ~7 standard
    # errors, and a proxy holding every event 1.5 ms more (event_delay p50 0.7 -> 3.7 ms against a
    # calibrated 1.8 ms) read inconclusive in 12 runs of 12 (benchmarks/bench_gate_gateway.py)
    from hopbench.driver._results import summary_scopes
    from hopbench.measure._recorder import Recorder
    from hopbench.views._noise_record import RunNoise

    rng = random.Random(3)
    rec = Recorder(["chat"])
    for _ in range(80):  # 80 streams of 40 events
        rec.incr("chat", "started")
        rec.incr("chat", "completed")
        base = rng.gauss(3.7, 0.3)
        for _ in range(40):
            rec.record("chat", "event_delay", int(max(0.05, base + rng.gauss(0, 0.5)) * 1e6))
    summary = {"scopes": summary_scopes(rec.snapshot())}
    rn = RunNoise("run", {"all.ttft": [], "all.event_delay": []}, summary)
    n = rn.noise("all", "event_delay", "p50")
    assert n.batches == 80 and n.se is not None and 0.0 < n.se < 0.5, n  # streams, not events
    assert "sampling error over its 80 streams" in n.note
    # per event the sample is 40 times larger; the design effect keeps the error a stream's
    flat = RunNoise("run", {}, summary)._post_run_noise("all", "event_delay", "p50", 0.0, "")
    assert flat.se == n.se
    # a figure the run records per interval keeps the old rule (here: no intervals, no samples)
    assert rn.noise("all", "ttft", "p50").batches < 3
