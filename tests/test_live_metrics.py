"""Live figures out (hopbench.observe._live_metrics): read hopbench's /metrics mid-run with
prometheus_client's parser and find the summary's counts at the end; a port in
use is bad input before any load."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from hopbench.measure._metrics import ITL_BUCKETS_S
from hopbench.measure._outcomes import output_tokens
from hopbench.observe._live_metrics import LiveMetrics
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
protocol = "chat"
[[scrape]]
url = "embedded"
interval_s = 0.5
timeout_s = 10
"""


def _read(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url, timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def _check_final(figures: dict[str, float], summary: dict[str, Any]) -> None:
    c = summary["scopes"]["all"]["counters"]
    m = summary["scopes"]["all"]["metrics"]
    assert figures["hopbench_streams_started_total"] == c["started"] > 0
    assert figures["hopbench_streams_ended_total{outcome=completed}"] == c.get("completed", 0)
    assert figures["hopbench_streams_ended_total{outcome=failed}"] == c.get("failed", 0)
    for key, n in c.items():
        if key.startswith("failed."):
            assert figures[f"hopbench_streams_broken_total{{detail={key[7:]},outcome=failed}}"] == n
    assert figures["hopbench_output_tokens_total"] == output_tokens(c) > 0
    assert figures["hopbench_output_token_streams_total{source=usage}"] == c.get("output_tokens_from.usage", 0)
    for metric in ("ttft", "itl", "e2e"):
        assert figures[f"hopbench_{metric}_seconds_count"] == m[metric]["count"]
        assert figures[f"hopbench_{metric}_seconds_bucket{{le=+Inf}}"] == m[metric]["count"]
    # the fixed buckets are served as documented
    assert f"hopbench_itl_seconds_bucket{{le={ITL_BUCKETS_S[0]}}}" in figures


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

    with LiveMetrics(0) as live:
        thread = threading.Thread(target=run)
        thread.start()
        mid: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while thread.is_alive() and time.monotonic() < deadline:
            figures = _read(live.url)
            if figures["hopbench_streams_started_total"] > 0:
                mid = figures
                break
            time.sleep(0.1)
        thread.join()
        final = _read(live.url)
    outcome = result["outcome"]
    assert outcome.complete, outcome.summary["warnings"]
    assert mid, "no stream was counted while the run went"
    assert mid["hopbench_streams_started_total"] <= final["hopbench_streams_started_total"]
    assert 0 < mid["hopbench_run_elapsed_seconds"] <= final["hopbench_run_elapsed_seconds"]
    _check_final(final, outcome.summary)
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
