"""Gateway metrics in: [[scrape]] validation, the scraper against bad endpoints,
the emulator's /metrics, and a run whose scrapes land in the results folder and
report.html (hopbench.config._scrape_spec, hopbench.observe._scrape, hopbench.report._section_scrape)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hopbench import ProfileError
from hopbench.config._profile import parse_profile
from hopbench.report._section_scrape import scrape_series
from hopbench.driver._single import run_profile
from hopbench.observe._scrape import Scraper, parse_exposition
from hopbench.emulator import EmulatorConfig
from hopbench.emulator._app import EmulatorApp

BASE = """
[run]
duration_s = 1
[load]
concurrency = 2
[target]
embedded = true
[[scenario]]
protocol = "chat"
"""


def test_scrape_profile_valid_keys() -> None:
    p = parse_profile(BASE + """
[[scrape]]
url = "http://127.0.0.1:4000/metrics"
interval_s = 0.5
metrics = ["litellm_", "process_"]
[scrape.header_env]
authorization = "MY_METRICS_KEY"
""", env={"MY_METRICS_KEY": "Bearer s3cret"})
    (s,) = p.scrape
    assert s.interval_ns == 500_000_000 and s.timeout_ns == 500_000_000
    assert s.keeps("litellm_requests") and not s.keeps("go_gc")
    assert dict(s.header_env) == {"authorization": "MY_METRICS_KEY"}
    assert "s3cret" not in json.dumps(p.raw)


@pytest.mark.parametrize("body, line, needle", [
    ('url = "ftp://x/metrics"', 11, "expected an http:// or https:// URL"),
    ('url = "http://u:p@h/metrics"', 11, "credentials"),
    ('url = "http://h/metrics?token=1"', 11, "query string"),
    ('url = "http://h/m"\ninterval_s = 0', 12, "interval_s"),
    ('url = "http://h/m"\nmetrics = ["bad name"]', 12, "metric-name prefixes"),
    ('url = "http://h/m"\n[scrape.headers]\nAuthorization = "Bearer x"', 13, "secret headers"),
    ('url = "http://h/m"\n[scrape.headers]\nX-Vault-Token = "hvs.x"', 13, "secret headers"),
    ('url = "http://h/m"\n[scrape.header_env]\nx-key = "UNSET_VAR_HB"', 13, "UNSET_VAR_HB is not set"),
    ('url = "http://h/m"\nintervl_s = 1', 12, "unknown key"),
    ('interval_s = 1', 10, "required key is missing"),
])
def test_scrape_profile_bad_input_names_file_line_key(body: str, line: int, needle: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(BASE + "[[scrape]]\n" + body + "\n", "p.toml", env={})
    msg = str(info.value)
    assert needle in msg and "scrape[0]" in msg
    assert msg.startswith(f"p.toml:{line}:") or (needle == "required key is missing" and "p.toml" in msg)


def test_scrape_parse_exposition_types_filters_and_rejects_html() -> None:
    text = ('# TYPE req_total counter\nreq_total{code="200",path="/a"} 3\n# TYPE q gauge\nq NaN\n'
            '# TYPE other gauge\nother 1\n')
    spec = parse_profile(BASE + '[[scrape]]\nurl = "http://h/m"\nmetrics = ["req", "q"]\n', env={}).scrape[0]
    samples, types = parse_exposition(text, spec)
    assert samples == {'req_total{code="200",path="/a"}': 3.0, "q": "nan"}
    assert types == {"req": "counter", "q": "gauge"}
    with pytest.raises(ValueError):
        parse_exposition("<!DOCTYPE html><html><body>login</body></html>")
    with pytest.raises(ValueError):
        parse_exposition("this is { not metrics\n")


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/ok":
            body, ctype = b"# TYPE up gauge\nup 1\n", "text/plain; version=0.0.4"
        elif self.path == "/html":
            body, ctype = b"<html><body>Sign in</body></html>", "text/html"
        elif self.path == "/garbage":
            body, ctype = b"{\"not\": \"metrics\"}", "text/plain"
        elif self.path == "/huge":
            body, ctype = b"# TYPE x gauge\n" + b"x 1\n" * 100_000, "text/plain"
        elif self.path == "/endless":  # no Content-Length: the bound must stop the read itself
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"# TYPE x gauge\n" + b"x 1\n" * 1000)
            except OSError:
                pass
            return
        elif self.path == "/slow":
            time.sleep(1.5)
            body, ctype = b"up 1\n", "text/plain"
        else:
            self.send_response(503)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.slow
def test_scrape_bad_endpoints_are_counted_not_raised(metrics_server: str, tmp_path: Path) -> None:
    paths = ["ok", "html", "garbage", "huge", "endless", "slow", "missing"]
    # generous timeouts (a loaded CI machine) except for the endpoint that must time out
    toml = BASE + "".join(f'[[scrape]]\nurl = "{metrics_server}/{p}"\ninterval_s = 0.2\n'
                          f'timeout_s = {0.3 if p == "slow" else 10}\nmax_body_bytes = 65536\n' for p in paths)
    toml += '[[scrape]]\nurl = "http://127.0.0.1:9/metrics"\ninterval_s = 0.2\n'  # discard port: refused
    specs = parse_profile(toml, env={}).scrape
    scraper = Scraper(specs, tmp_path, time.monotonic_ns())
    jsonl = tmp_path / "scrape.jsonl"
    with scraper:  # a child process writes scrape.jsonl, a line per scrape, flushed
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            urls = [json.loads(x)["url"] for x in jsonl.read_text().splitlines()] if jsonl.exists() else []
            if all(urls.count(s.url) >= 2 for s in scraper.stats):
                break
            time.sleep(0.05)
    by_url = {s["url"].rsplit("/", 1)[1]: s for s in scraper.summary()}
    expect = {"ok": "ok", "html": "not_metrics", "garbage": "not_metrics", "huge": "oversize", "endless": "oversize",
              "slow": "timeout", "missing": "http_error", "metrics": "failed"}
    for name, outcome in expect.items():
        s = by_url[name]
        assert s[outcome] == s["scrapes"] >= 2, (name, s)
    warnings = scraper.warnings()
    assert len(warnings) == 7 and not any("/ok" in w for w in warnings)
    lines = [json.loads(x) for x in (tmp_path / "scrape.jsonl").read_text().splitlines()]
    assert {x.get("error") for x in lines} == {None, *set(expect.values()) - {"ok"}}
    assert all(x["s"] == {"up": 1.0} for x in lines if "error" not in x)


async def test_scrape_emulator_metrics_endpoint_counts_requests() -> None:
    app = EmulatorApp(EmulatorConfig.from_mapping({"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 5,
                                                   "models": {"bad": {"faults": {"http_500": 1.0}}}}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://emu") as client:
        for model in ("m", "m", "m", "bad"):
            r = await client.post("/v1/chat/completions", json={"model": model, "stream": True,
                                                                "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == (500 if model == "bad" else 200)
        r = await client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    samples, types = parse_exposition(r.text)
    assert samples['hopbench_emulator_requests_total{status="200"}'] == 3.0
    assert samples["hopbench_emulator_output_tokens_sent_total"] == 15.0
    assert samples["hopbench_emulator_events_sent_total"] >= 15.0
    assert samples["hopbench_emulator_streams_in_flight"] == 0.0
    assert samples['hopbench_emulator_requests_total{status="500"}'] == 1.0
    assert samples['hopbench_emulator_faults_injected_total{fault="http_500"}'] == 1.0
    assert types["hopbench_emulator_faults_injected"] == types["hopbench_emulator_requests"] == "counter"


def test_scrape_series_counters_as_rates_with_reset_gap() -> None:
    recs = [{"url": "u", "t_ms": 0, "s": {"c_total": 0.0, "g": 5.0}, "types": {"c": "counter", "g": "gauge"}},
            {"url": "u", "t_ms": 1000, "s": {"c_total": 10.0, "g": 6.0}},
            {"url": "u", "t_ms": 1500, "error": "timeout"},
            {"url": "u", "t_ms": 2000, "s": {"c_total": 2.0, "g": 7.0}}]
    series = scrape_series(recs)["u"]
    assert series["c / c_total (per s)"] == ([1.0, 2.0], [10.0, None])
    assert series["g / g"] == ([0.0, 1.0, 2.0], [5.0, 6.0, 7.0])


@pytest.mark.slow
def test_scrape_run_embedded_emulator_series_in_results_and_report(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.report._page import write_report

    secret = "Bearer hb-secret-7f3a9c"
    monkeypatch.setenv("HB_TEST_SCRAPE_AUTH", secret)
    profile = parse_profile(BASE + '[emulator]\nttft_ms = 20\ntokens_per_s = 200\noutput_tokens = 10\n'
                            '[[scrape]]\nurl = "embedded"\ninterval_s = 0.25\ntimeout_s = 10\n'
                            '[scrape.header_env]\nauthorization = "HB_TEST_SCRAPE_AUTH"\n'
                            '[[scrape]]\nurl = "http://127.0.0.1:9/metrics"\ninterval_s = 0.5\n')
    outcome = run_profile(profile, out_dir=tmp_path / "run")
    summary = outcome.summary
    assert outcome.complete
    emu, dead = summary["scrape"]
    assert emu["ok"] == emu["scrapes"] >= 2 and dead["failed"] == dead["scrapes"] >= 1
    assert any(w.startswith("scrape http://127.0.0.1:9/metrics") for w in summary["warnings"])
    lines = [json.loads(x) for x in (tmp_path / "run" / "scrape.jsonl").read_text().splitlines()]
    last = [x for x in lines if x["url"] == emu["url"]][-1]["s"]
    # the emulator counted what hopbench sent (the run's last streams may end after the last scrape)
    started = summary["scopes"]["all"]["counters"]["started"]
    assert 0 < last['hopbench_emulator_requests_total{status="200"}'] <= started
    report = write_report(tmp_path / "run").read_text(encoding="utf-8")
    assert "Gateway metrics" in report and "hopbench_emulator_requests_total" in report
    for path in (tmp_path / "run").iterdir():  # the header's value reached no file
        assert secret not in path.read_text(encoding="utf-8", errors="replace"), path.name


def test_scrape_series_long_run_is_thinned_to_max_points() -> None:
    """An hour of scrapes keeps at most max_points points per series (the last sample of
    each time bucket); a counter's rate is then its mean rate over each span."""
    recs = [{"url": "u", "t_ms": 1000 * i, "s": {"c_total": 10.0 * i, "g": float(i % 7)},
             **({"types": {"c": "counter", "g": "gauge"}} if i == 0 else {})} for i in range(3600)]
    series = scrape_series(recs, max_points=100)["u"]
    xs, ys = series["c / c_total (per s)"]
    assert len(xs) < 100 and all(y == pytest.approx(10.0) for y in ys)
    gx, gy = series["g / g"]
    assert len(gx) <= 100 and gx[-1] == 3599.0 and gy[-1] == float(3599 % 7)
    # a short run keeps every scrape
    assert len(scrape_series(recs[:50])["u"]["g / g"][0]) == 50
