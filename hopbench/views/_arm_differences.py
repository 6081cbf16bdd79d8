"""The A/B arms' differences: ``hopbench compare``'s statistics between the scopes of one run.

Role: after a run with ``[[arm]]`` tables (hopbench.config._arm_spec), compare every arm
with the first (the baseline) metric by metric and rate by rate, with exactly
the tests and verdict rules of ``hopbench compare`` (:func:`hopbench.views._compare.compare_summaries`:
Mann-Whitney U on the HDR histograms, order-statistic confidence intervals of
p90/p99, proportion tests for the rates; "same" when not significant or too
small), and write the result into summary.json as ``arm_differences``
(docs/results/summary-json.md, "A/B arms"). The terminal summary and report.html show it.

**Paired verdicts** (issue 37, item 3; docs/ab-arms.md, "Paired verdicts"): the arms'
requests go out in rounds, one per arm, adjacent in time and with the same drawn request,
so whatever the runner does (a neighbour, a GC pause, drift) hits both requests of a
round alike. :func:`pair_streams` pairs each arm's streams with the baseline arm's of
the same round (streams.jsonl), and :func:`paired_figures` judges each per-stream figure
(:data:`PAIRED_FIGURES`) on the pairs' differences: Wilcoxon's signed-rank test
(:func:`hopbench.views._stats.signed_rank`) for the samples, the spread over time of the
differences' median by batch means for the noise, then the three-valued verdicts of
:func:`hopbench.views._noise.judge_family` with Holm across every paired figure.

Invariants: reads and writes summary.json only (streams.jsonl for the pairs; no run, no clock); each arm's
scope is handed to ``compare_summaries`` as a one-scope summary, so no
statistics are re-implemented here.

A buffered stream is worse, never better, on every smoothness figure
(:data:`SMOOTHNESS_METRICS`): a buffer delivers a stream in one read, so its
inter-token gaps and silences shrink to nothing and the tests would call a
buffering gateway "better" on itl, tpot and max_silence (issue 38). When one arm
is buffered (half or more of its completed streams flagged
``proxy_buffering_suspected``) and the other is not, those figures' verdicts are
the buffered arm's loss, whatever the tests say, with ``buffered`` naming why.
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..config._arm_spec import arm_of_request
from ._compare import ALPHA, DEFAULT_METRICS, MIN_EFFECT, compare_summaries
from ._export import stream_rows
from ._noise import INCONCLUSIVE, NOT_JUDGED, WORSE, Figure, Judged, Noise, batch_means, judge_family, one_sentence
from ._stats import signed_rank
from .._errors import UsageError
from .._exit import EXIT_BREACH, EXIT_INCONCLUSIVE, EXIT_OK
from .._format import fmt_num as num
from .._units import NS_PER_MS
from ..config._gate_spec import ARMS_DIGEST_FIGURES, ARMS_FIGURES, ARMS_MIN_PAIRS
from ..driver._results import read_summary, replace_text
from ..measure._digest import bucket_width
from ..measure._metrics import UNIT_LABELS

__all__ = ["ARM_METRICS", "PAIRED_FIGURES", "arm_differences", "add_arm_differences", "arms_command",
           "pair_streams", "paired_exit_code", "paired_figures", "paired_headlines", "paired_verdict",
           "render_arm_differences", "render_arm_differences_markdown"]

ARM_METRICS: Final = (*DEFAULT_METRICS, "cancel_delay")
"""The metrics compared between arms: compare's defaults and the cancel-propagation delay."""
SMOOTHNESS_METRICS: Final = ("itl", "tpot", "max_silence")
"""The figures a buffer makes look better: gaps between tokens and silences inside a stream."""


def _buffered(scope: Any) -> bool:
    """Whether half or more of an arm's completed streams were flagged ``proxy_buffering_suspected``."""
    counters = scope.get("counters") if isinstance(scope, Mapping) else None
    if not isinstance(counters, Mapping):
        return False
    done, flagged = counters.get("completed", 0), counters.get("proxy_buffering_suspected", 0)
    return isinstance(done, int) and isinstance(flagged, int) and done > 0 and 2 * flagged >= done
_SCOPE: Final = "arm"


def _arm_names(summary: Mapping[str, Any]) -> list[str]:
    arms = summary.get("arms")
    if not isinstance(arms, list):
        return []
    return [a["name"] for a in arms if isinstance(a, Mapping) and isinstance(a.get("name"), str)]


PAIRED_FIGURES: Final = tuple((name, f"{name}_ns") for name in ARMS_FIGURES)
"""The per-stream figures judged on paired differences, with their streams.jsonl field (ns):
the time to first token, the stream's own median and p99 inter-token gap, its time per output
token and its end-to-end time. Each is judged by the median of the pairs' differences (gate
key ``arms.<figure>.p50_diff``)."""
COMPLETED_FIGURES: Final = ("tpot", "e2e")
"""The paired figures a pair counts for only when both its streams completed: an error answered
at once has a short e2e, and a candidate failing most requests would read "better"."""
PAIRED_MIN: Final = ARMS_MIN_PAIRS
"""Pairs a paired figure needs for a verdict (fewer: ``inconclusive``, too few samples)."""
PAIRED_BATCH: Final = 5
"""Pairs per batch, at least, for the spread over time of the differences' median (at most
:data:`PAIRED_BATCHES_MAX` batches: a long run's batches grow instead)."""
PAIRED_BATCHES_MAX: Final = 30
PAIRED_METHOD: Final = ("paired: each stream with the baseline arm's stream of the same round; median of the "
                        "differences; Wilcoxon signed-rank test, batch means of the differences over time, "
                        "Holm across the paired figures (docs/ab-arms.md)")


def _request_number(request_id: Any) -> int | None:
    """The running number of a request id (``"<prefix><n>"``, e.g. ``"0-17"``), or None."""
    if not isinstance(request_id, str):
        return None
    digits = request_id.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else None


def _start(line: Mapping[str, Any]) -> int:
    t = line.get("start_ns")
    return t if isinstance(t, int) else 0


def _nearest(base: list[Mapping[str, Any]], others: list[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Each of ``others`` with the unused ``base`` stream of its scenario nearest in start time."""
    pairs = []
    by_scenario: dict[Any, list[Mapping[str, Any]]] = {}
    for b in sorted(base, key=_start):
        by_scenario.setdefault(b.get("scenario"), []).append(b)
    used: set[int] = set()
    for o in sorted(others, key=_start):
        pool = by_scenario.get(o.get("scenario"), [])
        starts = [_start(b) for b in pool]
        t = _start(o)
        i = bisect.bisect_left(starts, t)
        left = next((j for j in range(i - 1, -1, -1) if id(pool[j]) not in used), None)
        right = next((j for j in range(i, len(pool)) if id(pool[j]) not in used), None)
        sides = [j for j in (left, right) if j is not None]
        if sides:
            best = min(sides, key=lambda j: abs(starts[j] - t))
            used.add(id(pool[best]))
            pairs.append((pool[best], o))
    return pairs


def pair_streams(lines: Iterable[Mapping[str, Any]], arms: Sequence[str],
                 warmup_ns: int = 0) -> tuple[dict[str, list[tuple[Mapping[str, Any], Mapping[str, Any]]]], str]:
    """Pair each arm's measured streams with the baseline arm's (``arms[0]``) of the same round.

    A round is one request per arm, planned in turn, with one drawn request (same scenario
    and prompt): hopbench numbers requests as it plans them, so request ``n`` (1-based) went
    to ``arms[arm_of_request(n, len(arms))]`` in round ``(n - 1) // len(arms)`` (the arms'
    order reversed every other round: ``hopbench.config._arm_spec.arm_of_request``). When every line's
    number and arm agree with that, streams pair by round; otherwise (lines from another
    writer) each stream pairs with the baseline's unused stream of the same scenario
    nearest in start time.

    Args:
        lines: streams.jsonl lines (``id``, ``arm``, ``scenario``, ``start_ns``: ns from the
            run's start); lines without an ``arm`` are skipped.
        arms: the arms' names, baseline first.
        warmup_ns: streams started before it are warm-up (not measured): a pair needs both measured.

    Returns:
        ({arm: [(baseline line, arm line)] in start order} for each arm after the first,
        ``"round"`` or ``"nearest start"``). Never raises.
    """
    k = len(arms)
    mine = [ln for ln in lines if ln.get("arm") in arms and _start(ln) >= warmup_ns]
    numbers = [_request_number(ln.get("id")) for ln in mine]
    by_round = all(n is not None and n >= 1 and arms[arm_of_request(n, k)] == ln["arm"] for n, ln in zip(numbers, mine))
    out: dict[str, list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {a: [] for a in arms[1:]}
    if by_round:
        rounds: dict[int, dict[str, Mapping[str, Any]]] = {}
        for n, ln in zip(numbers, mine):
            assert n is not None
            rounds.setdefault((n - 1) // k, {})[ln["arm"]] = ln
        for r in sorted(rounds):
            got = rounds[r]
            if arms[0] in got:
                for a in arms[1:]:
                    if a in got and got[a].get("scenario") == got[arms[0]].get("scenario"):
                        out[a].append((got[arms[0]], got[a]))
        return out, "round"
    base = [ln for ln in mine if ln["arm"] == arms[0]]
    for a in arms[1:]:
        out[a] = sorted(_nearest(base, [ln for ln in mine if ln["arm"] == a]), key=lambda p: _start(p[0]))
    return out, "nearest start"


def digest_resolution_ms(value_ms: float) -> float:
    """The width of the stream-ITL digest's bucket that holds ``value_ms``, ms: how far apart two
    streams' ``itl_p50`` / ``itl_p99`` can truly be while reading the same value, and how close
    while reading adjacent ones (1/256 to 1/128 of the value; hopbench.measure._digest)."""
    return bucket_width(int(value_ms * NS_PER_MS)) / NS_PER_MS


def _paired_figure(rows: Sequence[tuple[float, float]], digest: bool = False) -> Figure:
    """One paired figure from its pairs' (base, candidate) values in ms, in time order.

    ``digest``: the values are stream-ITL digest percentiles (``itl_p50``, ``itl_p99``): a
    median difference of one digest bucket or less is within the figure's resolution, so
    ``same`` whatever its p (a few microseconds' shift can move every stream near a bucket's
    edge into the next bucket, which the signed-rank test reads as significant)."""
    diffs = [c - b for b, c in rows]
    n = len(diffs)
    if n == 0:
        return Figure(None, None, "ms", None, Noise(None), Noise(None), 0, 0, min_n=PAIRED_MIN)
    change = statistics.median(diffs)
    base_mid = statistics.median(b for b, _ in rows)
    size = max(PAIRED_BATCH, math.ceil(n / PAIRED_BATCHES_MAX))
    se, k = batch_means([[d] for d in diffs], size, statistics.median)
    floor, why = 0.0, ""
    if digest:
        width = digest_resolution_ms(base_mid)
        floor, why = width, (f"one bucket, the resolution of the streams' ITL digests (a "
                                             f"bucket is {width:.3g} ms wide near {base_mid:.3g} ms)")
    # the two requests of a pair share the runner's state: no client allowance, one spread
    return Figure(change, change / base_mid if base_mid else None, "ms", signed_rank(diffs).p_value,
                  Noise(se, k), Noise(None if se is None else 0.0, k), n, n, min_n=PAIRED_MIN, whose="pairs'",
                  min_change=floor, min_change_why=why, min_change_asked=False)


def paired_figures(pairs: Mapping[str, Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]],
                   alpha: float = ALPHA) -> dict[str, list[dict[str, Any]]]:
    """The paired verdicts of every arm against the baseline, Holm across all of them.

    Args:
        pairs: :func:`pair_streams`' pairs per arm.
        alpha: family-wise significance level.

    Returns:
        per arm a list, one object per :data:`PAIRED_FIGURES` entry: ``figure``, ``unit``
        (``"ms"``), ``n`` (the pairs with the figure on both sides, both completed for
        :data:`COMPLETED_FIGURES`: the effective n),
        ``base_p50`` / ``candidate_p50`` (the medians over those pairs, ms),
        ``p50_diff`` (the median difference candidate - baseline, ms; None without pairs),
        ``rel`` (over ``base_p50``), ``se`` (its standard error by batch means, ms, None
        below 3 batches), ``batches``, ``verdict`` (better / worse / same / inconclusive /
        not judged), ``reason`` (one sentence with the effective n), ``p_samples``
        (Wilcoxon), ``p_noise``, ``p_value``, ``p_adjusted`` (Holm) and ``noise_floor`` (ms).
        Never raises.
    """
    keys: list[tuple[str, str, list[tuple[float, float]]]] = []
    for arm, ps in pairs.items():
        for name, field in PAIRED_FIGURES:
            done = name in COMPLETED_FIGURES  # a failed stream's e2e is how fast it failed
            rows = [(b[field] / NS_PER_MS, c[field] / NS_PER_MS) for b, c in ps
                    if isinstance(b.get(field), int) and isinstance(c.get(field), int)
                    and (not done or (b.get("outcome") == "completed" and c.get("outcome") == "completed"))]
            keys.append((arm, name, rows))
    figs = [_paired_figure(rows, digest=name in ARMS_DIGEST_FIGURES) for _, name, rows in keys]
    judged = judge_family(figs, alpha)
    out: dict[str, list[dict[str, Any]]] = {arm: [] for arm in pairs}
    for (arm, name, rows), f, j in zip(keys, figs, judged):
        out[arm].append(_paired_json(name, rows, f, j))
    return out


def _paired_json(name: str, rows: Sequence[tuple[float, float]], f: Figure, j: Judged) -> dict[str, Any]:
    return {"figure": name, "unit": "ms", "n": len(rows),
            "base_p50": statistics.median(b for b, _ in rows) if rows else None,
            "candidate_p50": statistics.median(c for _, c in rows) if rows else None,
            "p50_diff": f.change, "rel": f.rel, "se": f.base.se, "batches": f.base.batches,
            "verdict": j.verdict, "reason": one_sentence(j), "p_samples": j.p_samples, "p_noise": j.p_noise,
            "p_value": j.p_value, "p_adjusted": j.p_adjusted, "noise_floor": j.floor}


def paired_verdict(figures: Sequence[Mapping[str, Any]]) -> str:
    """An arm's paired verdict: worse when any figure is, else inconclusive when one that
    points the worse way is, else better when any is, else same (docs/compare.md's rule);
    ``not judged`` when no figure was (no pairs)."""
    verdicts = [f["verdict"] for f in figures]
    if all(v == NOT_JUDGED for v in verdicts):
        return NOT_JUDGED
    if WORSE in verdicts:
        return WORSE
    if any(f["verdict"] == INCONCLUSIVE and (f["p50_diff"] is None or f["p50_diff"] > 0 or f["n"] < PAIRED_MIN)
           for f in figures):
        return INCONCLUSIVE
    return "better" if "better" in verdicts else "same"


def _worse_rates(rates: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's rates (error_rate, completion_rate, ...: compare's proportion tests, the same
    for paired and unpaired requests) that read worse for the candidate, as ``{"rate", "base",
    "candidate", "p_value"}``: an arm that fails its requests is worse whatever its latency (its
    failed streams leave the paired figures, docs/ab-arms.md, "Paired verdicts")."""
    out = []
    for name, r in rates.items():
        if isinstance(r, Mapping) and r.get("verdict") == WORSE and "." not in name:  # not the per-kind rows
            def of(key: str, field: str) -> Any:
                part = r.get(key)
                return part.get(field) if isinstance(part, Mapping) else None
            out.append({"rate": name, "base": of("base", "value"), "candidate": of("candidate", "value"),
                        "p_value": of("test", "p_value")})
    return out


ONE_RUN: Final = ("the arms share one run, interleaved request by request: what the runner does falls on "
                  "both alike, so the samples' own test judges")
"""Why the unpaired arms table has no between-run noise floor (its verdicts' sentences say it)."""


def arm_differences(summary: Mapping[str, Any],
                    streams: Iterable[Mapping[str, Any]] | None = None) -> dict[str, Any] | None:
    """Compare each arm of a run with its first arm.

    Args:
        summary: a summary.json dict with ``arms`` (the list of arms) and
            ``scopes`` (one per arm).
        streams: the run's streams.jsonl lines, for the paired verdicts (None: none).

    Returns:
        None without two arms; else ``{"baseline", "alpha", "min_effect",
        "method", "pairs": [{"base", "candidate", "worse", "metrics", "rates"}]}``
        where ``metrics`` and ``rates`` are ``hopbench compare --format json``'s
        per-scope objects (docs/compare.md): per metric the base's and the
        candidate's count/p50/p90/p99/p999/max (ms), the change, the test, the
        tail confidence intervals and the verdict ("better", "worse", "same").
        With ``streams``, the block also has ``paired_method`` and each pair a
        ``paired``: ``{"pairing": "round" | "nearest start", "n": pairs, "verdict",
        "figures": paired_figures' objects}`` (docs/ab-arms.md, "Paired verdicts").

    Raises:
        ResultsError: a malformed histogram in the summary.
    """
    names = _arm_names(summary)
    scopes = summary.get("scopes")
    if len(names) < 2 or not isinstance(scopes, Mapping):
        return None
    base = names[0]
    pairs: list[dict[str, Any]] = []
    for other in names[1:]:
        # one-scope summaries: compare's shape check sees no difference (same run)
        c = compare_summaries({"complete": True, "scopes": {_SCOPE: scopes.get(base, {})}},
                              {"complete": True, "scopes": {_SCOPE: scopes.get(other, {})}},
                              metrics=ARM_METRICS, base_dir=Path(base), candidate_dir=Path(other),
                              one_run=ONE_RUN)
        scope = c.to_json()["scopes"].get(_SCOPE, {"metrics": {}, "rates": {}})
        worse = c.any_worse
        buffered_base, buffered_other = _buffered(scopes.get(base)), _buffered(scopes.get(other))
        if buffered_base != buffered_other:  # the buffered arm loses on smoothness, whatever the tests say
            verdict = "worse" if buffered_other else "better"
            for name in SMOOTHNESS_METRICS:
                row = scope["metrics"].get(name)
                if isinstance(row, dict):
                    row["verdict"] = verdict
                    row["buffered"] = other if buffered_other else base
            worse = any(isinstance(r, Mapping) and r.get("verdict") == "worse"
                        for r in [*scope["metrics"].values(), *scope["rates"].values()])
        pairs.append({"base": base, "candidate": other, "worse": worse,
                      "metrics": scope["metrics"], "rates": scope["rates"]})
    block = {"baseline": base, "alpha": ALPHA, "min_effect": MIN_EFFECT,
             "method": "hopbench compare's tests between the arms' scopes (docs/compare.md)",
             "pairs": pairs}
    if streams is not None:
        run = summary.get("profile", {}).get("run", {}) if isinstance(summary.get("profile"), Mapping) else {}
        warmup_s = run.get("warmup_s", 0) if isinstance(run, Mapping) else 0
        matched, how = pair_streams(streams, names, int((warmup_s or 0) * 1e9))
        figures = paired_figures(matched)
        for pair in pairs:
            figs = figures.get(pair["candidate"], [])
            rates = _worse_rates(pair["rates"])
            verdict = paired_verdict(figs)
            pair["paired"] = {"pairing": how, "n": len(matched.get(pair["candidate"], [])),
                              "verdict": WORSE if rates else verdict,
                              "figures": figs, "rates_worse": rates}
        block["paired_method"] = PAIRED_METHOD
    return block


def add_arm_differences(results_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Add ``arm_differences`` to a run's summary.json (atomically) and return the new summary.

    A summary without two arms is returned unchanged and nothing is written. The
    paired verdicts read the folder's streams.jsonl (none without it: ``run.stream_log = false``).

    Raises:
        ResultsError: summary.json could not be written, a malformed histogram, or a
            streams.jsonl line (other than a cut last one) that is not a JSON object.
    """
    has_streams = (results_dir / "streams.jsonl").is_file()
    block = arm_differences(summary, stream_rows(results_dir) if has_streams else None)
    if block is None:
        return summary
    out = dict(summary, arm_differences=block)
    replace_text(results_dir / "summary.json", json.dumps(out, indent=2, allow_nan=False) + "\n")
    return out


def arms_command(results_dir: Path) -> dict[str, Any]:
    """``hopbench compare ARMS_DIR``: an A/B arms run's differences, paired verdicts first,
    judged again from its folder (summary.json and streams.jsonl; nothing is written).

    Returns:
        the ``arm_differences`` block (:func:`arm_differences`).

    Raises:
        UsageError: the folder's run has fewer than two arms.
        ResultsError: an unreadable folder, summary.json or streams.jsonl line.
    """
    summary = read_summary(results_dir)
    has_streams = (results_dir / "streams.jsonl").is_file()
    block = arm_differences(summary, stream_rows(results_dir) if has_streams else None)
    if block is None:
        raise UsageError(f"{results_dir}: one folder is compared only when it holds an A/B arms run ([[arm]] "
                         "tables: docs/ab-arms.md); give two folders to compare two runs")
    return block


def paired_exit_code(block: Mapping[str, Any], fail_on_worse: bool) -> int:
    """The exit code of ``hopbench compare ARMS_DIR``: with ``fail_on_worse``, 1 when an arm's
    paired verdict is worse, else 5 when one is inconclusive (retry on a quieter runner), else 0;
    without paired verdicts (no streams.jsonl), the unpaired table's ``worse`` decides 1 or 0."""
    if not fail_on_worse:
        return EXIT_OK
    pairs = [p for p in block.get("pairs", []) if isinstance(p, Mapping)]
    verdicts = [p["paired"]["verdict"] for p in pairs if isinstance(p.get("paired"), Mapping)]
    if not verdicts:
        return EXIT_BREACH if any(p.get("worse") for p in pairs) else EXIT_OK
    if WORSE in verdicts:
        return EXIT_BREACH
    return EXIT_INCONCLUSIVE if INCONCLUSIVE in verdicts else EXIT_OK


def paired_headlines(block: Mapping[str, Any]) -> list[str]:
    """One sentence per arm (what ``hopbench run -q`` prints for an arms run): its paired verdict
    and the first figure that has that verdict, with its reason. [] without paired verdicts."""
    out = []
    for pair in block.get("pairs", []):
        paired = pair.get("paired") if isinstance(pair, Mapping) else None
        if not isinstance(paired, Mapping):
            continue
        v = str(paired.get("verdict"))
        why = next((f"{f['figure']}: {f['reason']}" for f in paired.get("figures", []) if f.get("verdict") == v), "")
        if not why and v == WORSE and paired.get("rates_worse"):
            why = _rate_sentence(paired["rates_worse"][0])
        out.append(f"A/B arms, paired: {pair['candidate']} against {pair['base']}, {paired.get('n')} rounds: "
                   f"{v.upper()}" + (f" ({why})" if why and v != "same" else ""))
    return out


def _rate_sentence(r: Mapping[str, Any]) -> str:
    """A worse rate's line under the paired figures."""
    def pct(v: Any) -> str:
        return f"{v:.1%}" if isinstance(v, (int, float)) else "-"
    p = r.get("p_value")
    return (f"{r['rate']}: worse: {pct(r.get('base'))} -> {pct(r.get('candidate'))}"
            + (f" (p = {p:.2g}, two-proportion test over all its requests)" if isinstance(p, (int, float)) else ""))


def _diff(f: Mapping[str, Any]) -> str:
    d, rel = f.get("p50_diff"), f.get("rel")
    if d is None:
        return "-"
    return f"{d:+.3g} ms" + (f" ({rel:+.1%})" if rel is not None else "")


def render_arm_differences(block: Mapping[str, Any]) -> str:
    """The differences as plain text: per pair first its paired verdict (one line per
    paired figure: the median difference and its sentence), then one line per metric
    (p50 and p99 of both arms, the p50 change, the verdict) and the rates that differ; units
    as the summary table labels them (``tok/s``: ``hopbench.measure._metrics.UNIT_LABELS``).

    Args:
        block: ``summary["arm_differences"]``.
    """
    lines: list[str] = []
    for pair in block.get("pairs", []):
        b, c = pair["base"], pair["candidate"]
        paired = pair.get("paired")
        if isinstance(paired, Mapping):
            lines.append(f"A/B arms, paired: {c} against {b}, {paired['n']} rounds (paired by {paired['pairing']}; "
                         f"p Holm-adjusted, family-wise alpha {block.get('alpha')}): {str(paired['verdict']).upper()}")
            lines += [f"  {f['figure']:<8} p50 diff {_diff(f):>22}  {f['reason']}" for f in paired["figures"]]
            lines += [f"  {_rate_sentence(r)}" for r in paired.get("rates_worse") or ()]
        lines.append(f"A/B arms, unpaired: {c} against {b} (alpha {block.get('alpha')} after Holm, the arms "
                     "interleaved in one run): " + ("WORSE on at least one figure" if pair["worse"] else "not worse"))
        rates = [(name, r) for name, r in pair["rates"].items()
                 if r["verdict"] != "same" or r["base"]["value"] != r["candidate"]["value"]]
        w = max([20, *(len(name) for name in pair["metrics"]), *(len(name) for name, _ in rates)])
        lines.append(f"  {'metric':<{w}} {'unit':<7} {b + ' p50':>12} {c + ' p50':>12} {'change':>8} "
                     f"{b + ' p99':>12} {c + ' p99':>12}  verdict")
        for name, m in pair["metrics"].items():
            rel = m["change"]["p50"]["rel"]
            lines.append(f"  {name:<{w}} {UNIT_LABELS.get(m['unit'], m['unit']):<7} {num(m['base']['p50']):>12} "
                         f"{num(m['candidate']['p50']):>12} "
                         f"{'-' if rel is None else f'{rel:+.1%}':>8} {num(m['base']['p99']):>12} "
                         f"{num(m['candidate']['p99']):>12}  {m['verdict']}"
                         + (f" ({m['buffered']} buffered)" if m.get("buffered") else ""))
        for name, r in rates:  # (a long name, e.g. http_error_code.server_error, widens the column)
            lines.append(f"  {name:<{w}} {'rate':<7} {num(r['base']['value']):>12} {num(r['candidate']['value']):>12} "
                         f"{'':>8} {'':>12} {'':>12}  {r['verdict']}")
    return "\n".join(lines)


def render_arm_differences_markdown(block: Mapping[str, Any]) -> str:
    """The differences as GitHub Markdown (``hopbench compare ARMS_DIR --format markdown``, e.g.
    for a pull request's comment): per pair a heading with its paired verdict, a table of the
    paired figures, a table of the metrics (as :func:`render_arm_differences`'s lines) and the
    rates that differ.

    Args:
        block: ``summary["arm_differences"]``.
    """
    out: list[str] = []
    for pair in block.get("pairs", []):
        b, c = pair["base"], pair["candidate"]
        paired = pair.get("paired")
        if isinstance(paired, Mapping):
            out += [f"### A/B arms, paired: `{c}` against `{b}`: **{str(paired['verdict']).upper()}**", "",
                    f"{paired['n']} rounds, paired by {paired['pairing']}; p Holm-adjusted, family-wise alpha "
                    f"{block.get('alpha')}",
                    "", "| figure | p50 diff | verdict |", "|---|---|---|"]
            out += [f"| {f['figure']} | {_diff(f)} | {f['reason']} |" for f in paired["figures"]]
            out += [f"| {r['rate']} | | {_rate_sentence(r).split(': ', 1)[1]} |" for r in paired.get("rates_worse") or ()]
            out.append("")
        out += [f"### A/B arms, unpaired: `{c}` against `{b}`: "
                + ("**WORSE** on at least one figure" if pair["worse"] else "not worse"), "",
                f"alpha {block.get('alpha')} after Holm, the arms interleaved in one run", "",
                f"| metric | unit | {b} p50 | {c} p50 | change | {b} p99 | {c} p99 | verdict |",
                "|---|---|---|---|---|---|---|---|"]
        for name, m in pair["metrics"].items():
            rel = m["change"]["p50"]["rel"]
            out.append(f"| {name} | {UNIT_LABELS.get(m['unit'], m['unit'])} | {num(m['base']['p50'])} | "
                       f"{num(m['candidate']['p50'])} | {'-' if rel is None else f'{rel:+.1%}'} | "
                       f"{num(m['base']['p99'])} | {num(m['candidate']['p99'])} | {m['verdict']}"
                       + (f" ({m['buffered']} buffered)" if m.get("buffered") else "") + " |")
        for name, r in pair["rates"].items():
            if r["verdict"] != "same" or r["base"]["value"] != r["candidate"]["value"]:
                out.append(f"| {name} | rate | {num(r['base']['value'])} | {num(r['candidate']['value'])} | "
                           f"| | | {r['verdict']} |")
        out.append("")
    return "\n".join(out)
