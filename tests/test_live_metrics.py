"""Live figures out (hopbench.observe._live_metrics): read hopbench's /metrics mid-run with
prometheus_client's parsers and find the summary's counts at the end, split by scenario and
protocol; histogram_quantile over the buckets (Prometheus's own formula) within 5 % of the
HDR percentile; nothing unknown reads 0; the run's info metric holds no secret; a port in
use is bad input before any load."""

from __future__ import annotations

import dataclasses
import math
import random
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

from hopbench.measure._metrics import LIVE_BUCKETS_S, log_buckets_s
from hopbench.measure._outcomes import output_tokens
from hopbench.measure._recorder import ALL, Recorder
from hopbench.observe._live_metrics import LiveMetrics, RunLabels, run_labels, safe_url
from hopbench.config._profile import parse_profile
from hopbench.driver._single import run_profile

PROFILE = """
[run]
duration_s = {duration}
warmup_s = 0.5
workers = {workers}
[load]
concurrency = 4
[target]
embedded = true
[emulator]
ttft_ms = 30
tokens_per_s = 200
output_tokens = 12
[emulator.faults]
midstream_error = 0.2
[[scenario]]
name = "chat"
protocol = "chat"
[[scenario]]
name = "claude"
protocol = "messages"
[[scrape]]
url = "embedded"
interval_s = 0.5
timeout_s = 10
"""


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _parse(text: str, openmetrics: bool = False) -> Series:
    """Every sample of an exposition, read by prometheus_client's own parser (the text
    format 0.0.4, or OpenMetrics 1.0): (name, labels) -> value. A malformed exposition raises."""
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families  # type: ignore[assignment]
    out: Series = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def _read(url: str) -> Series:
    return _parse(httpx.get(url, timeout=10).text)


def _total(series: Series, name: str, **labels: str) -> float | None:
    """``sum by () (name{labels})`` as PromQL sums it: None when no series matches."""
    want = set(labels.items())
    values = [v for (n, ls), v in series.items() if n == name and want <= ls]
    return sum(values) if values else None


def _check_final(figures: Series, summary: dict[str, Any], scopes: dict[str, str]) -> None:
    """The exposition's counts are summary.json's exact counts, per scenario and summed."""
    for scope, protocol in [*scopes.items(), (ALL, "")]:
        c = summary["scopes"][scope]["counters"]
        m = summary["scopes"][scope]["metrics"]
        labels = {} if scope == ALL else {"scenario": scope, "protocol": protocol}
        assert _total(figures, "hopbench_streams_started_total", **labels) == c["started"] > 0
        for outcome in ("completed", "failed"):
            assert _total(figures, "hopbench_streams_ended_total", outcome=outcome, **labels) == c.get(outcome, 0)
        for key, n in c.items():
            if key.startswith("failed."):
                assert _total(figures, "hopbench_streams_broken_total", outcome="failed", detail=key[7:],
                              **labels) == n
        assert _total(figures, "hopbench_input_tokens_total", **labels) == c.get(
            "tokens.input.completed", 0) + c.get("tokens.input.broken", 0)
        # usage, else the output events counted (docs/results/counters.md)
        assert _total(figures, "hopbench_output_tokens_total", **labels) == output_tokens(c) > 0
        assert _total(figures, "hopbench_output_token_streams_total", source="usage", **labels) == c.get(
            "output_tokens_from.usage", 0)
        for metric in ("ttft", "itl", "e2e"):
            assert _total(figures, f"hopbench_{metric}_seconds_count", **labels) == m[metric]["count"]
            assert _total(figures, f"hopbench_{metric}_seconds_bucket", le="+Inf", **labels) == m[metric]["count"]
    assert summary["scopes"]["all"]["counters"]["tokens.input.completed"] > 0
    # the buckets are served as documented, for every scope
    assert _total(figures, "hopbench_itl_seconds_bucket", le="0.0005", scenario="claude") is not None


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_live_metrics_mid_run_and_final_counts_match_summary(workers: int, tmp_path: Path) -> None:
    profile = parse_profile(PROFILE.format(duration=3 if workers == 1 else 4, workers=workers), env={})
    result: dict[str, Any] = {}

    def run() -> None:
        if workers == 1:
            result["outcome"] = run_profile(profile, out_dir=tmp_path / "run", progress=live.on_interval)
        else:
            from hopbench.driver._workers import run_profile_workers

            result["outcome"] = run_profile_workers(profile, out_dir=tmp_path / "run", progress=live.on_interval)

    with LiveMetrics(0, run_labels(profile, "mixed-run")) as live:
        thread = threading.Thread(target=run)
        thread.start()
        mid: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while thread.is_alive() and time.monotonic() < deadline:
            figures = _read(live.url)
            if (_total(figures, "hopbench_streams_started_total") or 0) > 0:
                mid = figures
                break
            time.sleep(0.1)
        thread.join()
        final = _read(live.url)
    outcome = result["outcome"]
    assert outcome.complete, outcome.summary["warnings"]
    assert mid, "no stream was counted while the run went"
    started = "hopbench_streams_started_total"
    assert _total(mid, started) <= _total(final, started)  # type: ignore[operator]
    elapsed = "hopbench_run_elapsed_seconds"
    assert 0 < _total(mid, elapsed) <= _total(final, elapsed)  # type: ignore[operator]
    _check_final(final, outcome.summary, {"chat": "chat", "claude": "messages"})
    # the driver scraped the embedded emulator too (with --workers as well)
    (scraped,) = outcome.summary["scrape"]
    assert scraped["ok"] == scraped["scrapes"] >= 2, scraped
    assert (tmp_path / "run" / "scrape.jsonl").stat().st_size > 0


def test_live_metrics_port_in_use_is_exit_2_before_any_load(hopbench_cli: Any, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = hopbench_cli(["run", "profiles/smoke.toml", "--out", str(tmp_path / "run"),
                             "--metrics-port", str(port)], timeout_s=60)
    assert proc.returncode == 2, proc.stderr
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert not (tmp_path / "run").exists()  # no load was sent, no folder made


def test_live_metrics_profile_key_is_validated() -> None:
    from hopbench import ProfileError

    base = "[run]\nduration_s = 1\n{key}[load]\nconcurrency = 1\n[target]\nembedded = true\n[[scenario]]\nprotocol = \"chat\"\n"
    assert parse_profile(base.format(key="metrics_port = 9464\n"), env={}).run.metrics_port == 9464
    assert parse_profile(base.format(key=""), env={}).run.metrics_port is None
    with pytest.raises(ProfileError, match=r"p.toml:3: run.metrics_port: expected a positive integer \(at most 65535\), got 70000"):
        parse_profile(base.format(key="metrics_port = 70000\n"), "p.toml", env={})


def test_live_metrics_serves_metrics_only_and_404_elsewhere() -> None:
    with LiveMetrics(0) as live:
        base = live.url.removesuffix("/metrics")
        ok = httpx.get(live.url, timeout=10)
        assert ok.status_code == 200 and "hopbench_streams_started_total" in ok.text
        assert ok.headers["content-type"].startswith("text/plain")
        assert httpx.get(live.url + "?name[]=hopbench_streams_started_total", timeout=10).status_code == 200
        for path in ("/", "/metricsx", "/metrics/", "/favicon.ico", "/foo/metrics"):
            r = httpx.get(base + path, timeout=10)
            assert r.status_code == 404 and "/metrics" in r.text, path
        om = httpx.get(live.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}, timeout=10)
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert om.text.endswith("# EOF\n") and _parse(om.text, openmetrics=True)
        # Prometheus asks for gzip: served gzipped, the same text
        assert ok.headers.get("content-encoding") == "gzip" and ok.text == live.text()
        plain = httpx.get(live.url, headers={"Accept-Encoding": "identity"}, timeout=10)
        assert "content-encoding" not in plain.headers and plain.text == ok.text


# -- buckets: histogram_quantile against the HDR percentile --------------------------------

def _histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """PromQL's ``histogram_quantile`` over one classic histogram, as Prometheus computes it
    (prometheus/prometheus promql/quantile.go, ``bucketQuantile``): buckets sorted by upper
    bound, equal bounds coalesced, counts made monotonic; rank = q x count; the first bucket
    whose cumulative count reaches the rank; linear interpolation inside it, from 0 for the
    first bucket; the +Inf bucket answers the highest finite bound.

    Args:
        q: the quantile, 0..1.
        buckets: (upper bound ``le``, cumulative count) pairs, +Inf included.
    """
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for le, count in buckets:
        merged[le] = merged.get(le, 0.0) + count
    b = sorted(merged.items())
    if not b or b[-1][0] != math.inf:
        return math.nan
    b = [(le, max(c for _, c in b[: i + 1])) for i, (le, _) in enumerate(b)]  # ensureMonotonic
    if len(b) < 2 or b[-1][1] == 0:
        return math.nan
    rank = q * b[-1][1]
    i = next((i for i in range(len(b) - 1) if b[i][1] >= rank), len(b) - 1)
    if i == len(b) - 1:
        return b[-2][0]
    if i == 0 and b[0][0] <= 0:
        return b[0][0]
    start, end, count = 0.0, b[i][0], b[i][1]
    if i > 0:
        start = b[i - 1][0]
        count -= b[i - 1][1]
        rank -= b[i - 1][1]
    return start + (end - start) * (rank / count)


def test_histogram_quantile_reference_matches_prometheus_examples() -> None:
    # prometheus promql/testdata/histograms.test, "testhistogram" positive: 0.1:50 0.2:70 1:110 +Inf:120
    b = [(0.1, 50.0), (0.2, 70.0), (1.0, 110.0), (math.inf, 120.0)]
    assert _histogram_quantile(0.2, b) == pytest.approx(0.048)
    assert _histogram_quantile(0.5, b) == pytest.approx(0.15)
    assert _histogram_quantile(0.8, b) == pytest.approx(0.72)
    assert _histogram_quantile(0.99, b) == 1.0  # in +Inf: the highest finite bound
    assert math.isnan(_histogram_quantile(0.5, [(0.1, 5.0)]))  # no +Inf bucket


def _buckets_of(series: Series, name: str, **labels: str) -> list[tuple[float, float]]:
    want = set(labels.items())
    return [(float(dict(ls)["le"]), v) for (n, ls), v in series.items()
            if n == f"{name}_bucket" and want <= ls]


#: name -> seconds drawn from it (seeded): the shapes a gateway's TTFT, ITL and E2E take
_DISTRIBUTIONS = {
    "exact 201 ms": lambda rng: 0.201,
    "lognormal ttft (median 200 ms)": lambda rng: rng.lognormvariate(math.log(0.2), 0.6),
    "lognormal itl (median 20 ms, wide)": lambda rng: rng.lognormvariate(math.log(0.02), 1.2),
    "lognormal e2e (median 8 s)": lambda rng: rng.lognormvariate(math.log(8), 0.5),
    "bimodal (cache hits 3 ms, misses 900 ms)": lambda rng: (rng.gauss(0.003, 0.0003) if rng.random() < 0.7
                                                              else rng.gauss(0.9, 0.05)),
    "uniform 0.6 ms .. 150 s (log)": lambda rng: math.exp(rng.uniform(math.log(0.0006), math.log(150))),
}


@pytest.mark.parametrize("name", list(_DISTRIBUTIONS))
def test_live_metrics_histogram_quantile_within_5_percent_of_hdr(name: str) -> None:
    rng = random.Random(name)
    draw = _DISTRIBUTIONS[name]
    rec = Recorder(["a"])
    n_per_interval = 20_000
    for interval in range(3):  # the endpoint adds intervals up
        for _ in range(n_per_interval):
            value_ns = max(1, round(draw(rng) * 1e9))
            for metric in ("ttft", "itl", "e2e"):
                rec.record("a", metric, value_ns)
        iv = rec.take_interval(interval * 10**9, (interval + 1) * 10**9)
        live = live if interval else LiveMetrics(0, RunLabels(protocols={"a": "chat"}))
        live.on_interval(iv, {"in_flight_now": 0, "end_ns": (interval + 1) * 10**9})
    series = _parse(live.text())
    snap = rec.snapshot()
    for metric in ("ttft", "itl", "e2e"):
        buckets = _buckets_of(series, f"hopbench_{metric}_seconds", scenario="a")
        assert len(buckets) == len(LIVE_BUCKETS_S) + 1
        for q in (0.5, 0.9, 0.99, 0.999):
            exact_s = snap.histogram("a", metric).percentile(q * 100) / 1e9
            estimate_s = _histogram_quantile(q, buckets)
            assert abs(estimate_s - exact_s) <= 0.05 * exact_s, (metric, q, estimate_s, exact_s)


def test_live_metrics_buckets_are_log_spaced_at_most_5_percent_apart() -> None:
    b = LIVE_BUCKETS_S
    assert b[0] == 0.0005 and b[-1] == 200.0 and len(b) == 281  # docs/observability.md says 281
    assert max(y / x for x, y in zip(b, b[1:])) < 1.048
    for anchor in (0.001, 0.002, 0.005, 0.01, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 60.0 / 60, 100.0):
        assert anchor in b  # SLO-style le="0.2", le="1" exist
    assert log_buckets_s(0.0007, 0.0009) == (0.0007236, 0.0007579, 0.0007937, 0.0008312, 0.0008706, 0.0009117)
    with pytest.raises(ValueError, match="expected 0 < low_s <= high_s"):
        log_buckets_s(1.0, 0.5)


# -- labels, totals, what is unknown -------------------------------------------------------

_MIXED = """
[run]
name = "mixed"
duration_s = 1
[load]
concurrency = 1
[target]
url = "http://127.0.0.1:4000/v1"
[[scenario]]
name = "a"
protocol = "chat"
model = "m"
[[scenario]]
name = "b"
protocol = "messages"
model = "m"
"""


def _mixed() -> Any:
    return parse_profile(_MIXED, "profiles/mixed.toml", env={})


def test_live_metrics_labels_split_a_mixed_run_and_sum_to_the_total() -> None:
    profile = _mixed()
    rec = Recorder(profile.scopes)
    live = LiveMetrics(0, run_labels(profile, "mixed-20261203T093000Z"))
    for scope, started, completed, failed, tokens_in, tokens_out in (("a", 5, 4, 1, 100, 40), ("b", 3, 3, 0, 30, 9)):
        rec.incr(scope, "started", started)
        rec.incr(scope, "completed", completed)
        if failed:
            rec.incr(scope, "failed", failed)
            rec.incr(scope, "failed.rate_limit_error", failed)
        rec.incr(scope, "tokens.input.completed", tokens_in)
        rec.incr(scope, "tokens.output.completed", tokens_out)
        rec.record(scope, "ttft", 50_000_000)
    rec.incr_global("dispatched", 8)  # a global counter: no scope, never a per-stream series
    live.on_interval(rec.take_interval(0, 10**9), {"in_flight_now": 2, "end_ns": 10**9})
    for openmetrics in (False, True):
        series = _parse(live.text(openmetrics), openmetrics)
        total = rec.snapshot().scopes[ALL].counters
        assert _total(series, "hopbench_streams_started_total") == total["started"] == 8
        assert _total(series, "hopbench_streams_started_total", scenario="a", protocol="chat") == 5
        assert _total(series, "hopbench_streams_started_total", scenario="b", protocol="messages") == 3
        assert _total(series, "hopbench_streams_ended_total", outcome="completed") == total["completed"]
        assert _total(series, "hopbench_streams_broken_total", detail="rate_limit_error", scenario="a") == 1
        assert _total(series, "hopbench_input_tokens_total") == total["tokens.input.completed"] == 130
        assert _total(series, "hopbench_input_tokens_total", scenario="b", protocol="messages") == 30
        assert _total(series, "hopbench_output_tokens_total") == 49
        assert _total(series, "hopbench_ttft_seconds_count") == 2
        # every per-stream series has both labels: no unlabelled total to count twice
        for (name, labels), _ in series.items():
            if name.startswith(("hopbench_streams_started", "hopbench_streams_ended", "hopbench_streams_broken",
                                "hopbench_input_tokens", "hopbench_output_tokens", "hopbench_ttft", "hopbench_itl",
                                "hopbench_e2e")):
                assert {"scenario", "protocol"} <= dict(labels).keys(), name


def test_live_metrics_nothing_unknown_reads_zero() -> None:
    profile = _mixed()
    live = LiveMetrics(0, run_labels(profile))
    series = _parse(live.text())
    # counters start at 0 legitimately, per scenario; gauges and histograms are unknown: absent
    assert _total(series, "hopbench_streams_started_total", scenario="a", protocol="chat") == 0
    assert _total(series, "hopbench_streams_ended_total", scenario="b", outcome="completed") == 0
    for absent in ("hopbench_streams_in_flight", "hopbench_run_elapsed_seconds", "hopbench_ttft_seconds_count",
                   "hopbench_ttft_seconds_bucket", "hopbench_itl_seconds_count", "hopbench_e2e_seconds_count"):
        assert _total(series, absent) is None, absent
    rec = Recorder(profile.scopes)
    live.on_interval(rec.take_interval(0, 10**9), {"in_flight_now": 0, "end_ns": 10**9})  # a warm-up interval
    series = _parse(live.text())
    assert _total(series, "hopbench_streams_in_flight") == 0  # known now: 0 in flight is a value
    assert _total(series, "hopbench_run_elapsed_seconds") == 1.0
    assert _total(series, "hopbench_ttft_seconds_count") is None
    rec.record("b", "ttft", 201_000_000)
    live.on_interval(rec.take_interval(10**9, 2 * 10**9), {"in_flight_now": 1, "end_ns": 2 * 10**9})
    series = _parse(live.text())
    assert _total(series, "hopbench_ttft_seconds_count", scenario="b") == 1
    assert _total(series, "hopbench_ttft_seconds_count", scenario="a") is None  # a has no sample yet
    assert _total(series, "hopbench_itl_seconds_count") is None


def test_live_metrics_run_info_names_the_run_without_secrets() -> None:
    profile = _mixed()
    series = _parse(LiveMetrics(0, run_labels(profile, "mixed-20261203T093000Z")).text())
    ((name, labels), value), = [(k, v) for k, v in series.items() if k[0] == "hopbench_run_info"]
    from hopbench import __version__

    assert value == 1 and dict(labels) == {"version": __version__, "profile": "mixed.toml", "name": "mixed",
                                           "run_id": "mixed-20261203T093000Z",
                                           "target": "http://127.0.0.1:4000/v1"}
    # a URL built another way (the profile refuses credentials): only scheme, host, port, path
    leaky = dataclasses.replace(profile, target=dataclasses.replace(
        profile.target, url="https://user:s3cret@gw.example:8443/v1?api_key=sk-1#frag"))
    info = run_labels(leaky).info
    assert info["target"] == "https://gw.example:8443/v1"
    text = LiveMetrics(0, run_labels(leaky)).text()
    assert "s3cret" not in text and "sk-1" not in text and "user" not in text
    assert safe_url("http://[::1]:9/x?y=1") == "http://[::1]:9/x"
    assert safe_url("http://[::1") == "<not a url>"
    embedded = parse_profile("[run]\nduration_s = 1\n[load]\nconcurrency = 1\n[target]\nembedded = true\n"
                             "[[scenario]]\nprotocol = \"responses\"\n", env={})
    labels = run_labels(embedded)
    assert labels.info["target"] == "embedded" and labels.info["profile"] == ""
    assert dict(labels.protocols) == {s.name: "responses" for s in embedded.scenarios}


def test_live_metrics_arms_are_labelled_arm_with_their_protocol() -> None:
    from hopbench.config._profile import load_profile

    profile = load_profile(Path(__file__).parent.parent / "profiles" / "ab-arms.toml")
    labels = run_labels(profile, "ab-arms-1")
    assert labels.scope_label == "arm" and dict(labels.protocols) == {"fast": "chat", "slow": "chat"}
    assert labels.info["target"] == "embedded,embedded" and labels.info["profile"] == "ab-arms.toml"
    series = _parse(LiveMetrics(0, labels).text())
    assert _total(series, "hopbench_streams_started_total", arm="slow", protocol="chat") == 0
    assert all("scenario" not in dict(ls) for _, ls in series)


def test_live_metrics_label_values_are_escaped() -> None:
    odd = 'a "quoted" \\ back\nslash'
    labels = RunLabels(protocols={"s.1-x": "chat"}, info={"profile": odd, "version": "v"})
    for openmetrics in (False, True):
        series = _parse(LiveMetrics(0, labels).text(openmetrics), openmetrics)
        assert ("hopbench_run_info", frozenset({("profile", odd), ("version", "v")})) in series


def test_live_metrics_run_command_names_the_run_by_its_results_folder(tmp_path: Path) -> None:
    """``hopbench run --metrics-port``: the served info carries the results folder's name as
    ``run_id`` and the scenarios' labels (hopbench._run_command._run_live's wiring)."""
    import io

    from rich.console import Console

    from hopbench._run_command import _run_live

    err = io.StringIO()
    seen: dict[str, Series] = {}

    def runner(profile: Any, out_dir: Path, progress: Any) -> Any:
        url = err.getvalue().split("live metrics on ", 1)[1].split()[0]
        seen["before"] = _read(url)
        rec = Recorder(profile.scopes)
        rec.incr("b", "started")
        progress(rec.take_interval(0, 10**9), {"in_flight_now": 1, "end_ns": 10**9})
        seen["after"] = _read(url)
        return "outcome"

    out = tmp_path / "mixed-20261203T093000Z"
    assert _run_live(_mixed(), runner, out, Console(file=err), quiet=False, no_progress=True,
                     metrics_port=0) == "outcome"
    info = [dict(ls) for (name, ls) in seen["before"] if name == "hopbench_run_info"]
    assert info and info[0]["run_id"] == "mixed-20261203T093000Z" and info[0]["profile"] == "mixed.toml"
    assert _total(seen["before"], "hopbench_streams_in_flight") is None
    assert _total(seen["after"], "hopbench_streams_started_total", scenario="b", protocol="messages") == 1
    assert _total(seen["after"], "hopbench_streams_in_flight") == 1
