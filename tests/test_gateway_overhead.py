"""Gateway overhead end to end: the emulator behind a real gateway on 127.0.0.1.

Gateways: the project's own delaying proxy (tests/_delay_proxy.py, a real
HTTP proxy in another process that holds every SSE event for a known delay,
and can retry behind the client's back) and nginx (Debian's package, with
proxy_buffering off and on). Bounded: a few dozen requests per run, each run
a few seconds. The nginx tests skip, saying why, only when nginx is not
installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _gateways import BUFFERING, STREAMING, binary, ports, start
from _servers import free_port

from hopbench import ProfileError
from hopbench.config._profile import parse_profile
from hopbench.driver._overhead import GENERIC_BUFFERING_ADVICE, buffering_advice, gateway_kind
from hopbench.driver._single import run_profile

HERE = Path(__file__).resolve().parent
MS = 1_000_000


def _profile(target: str, upstream: str, *, requests: int = 24, concurrency: int = 4,
             emulator: str = "ttft_ms = 40\ntokens_per_s = 100\noutput_tokens = 20\n") -> str:
    return (f'[run]\nrequests = {requests}\n[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = {concurrency}\n'
            f'[target]\nurl = "{target}"\n[upstream]\n{upstream}\n{emulator}'
            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello there"]\n')


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _p50_ms(summary: dict, metric: str, scope: str = "all") -> float:
    return float(summary["scopes"][scope]["metrics"][metric]["p50"])


# -- the profile ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ('[upstream]\nlisten = "127.0.0.1:9100"\n',
     "upstream: expected [target].url to be the gateway"),
    ('[target]\nurl = "http://127.0.0.1:1"\n[upstream]\nlisten = "127.0.0.1:9100"\nrecord = "gt.jsonl"\n',
     "upstream.listen: expected exactly one of listen"),
    ('[target]\nurl = "http://127.0.0.1:1"\n[upstream]\nttft_ms = 5\n',
     "upstream: expected exactly one of listen"),
    ('[target]\nurl = "http://127.0.0.1:1"\n[upstream]\nlisten = "127.0.0.1"\n',
     'upstream.listen: expected "HOST:PORT"'),
    ('[target]\nurl = "http://127.0.0.1:1"\n[upstream]\nlisten = "gw.example:9100"\n',
     "upstream.listen: expected an IP address of this host"),
    ('[target]\nurl = "http://127.0.0.1:1"\n[upstream]\nrecord = "gt.jsonl"\nttft_ms = 5\n',
     "upstream.ttft_ms: emulator keys go with listen only"),
    ('[target]\nurl = "http://127.0.0.1:1"\n[upstream]\nlisten = "127.0.0.1:9100"\nttft = 5\n',
     "upstream.ttft: unknown key"),
])
def test_upstream_profile_errors_name_the_key(text: str, expected: str) -> None:
    base = '[run]\nrequests = 1\n[load]\nconcurrency = 1\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n'
    with pytest.raises(ProfileError, match="p.toml:") as info:
        parse_profile(base + text, "p.toml", env={})
    assert expected in str(info.value)


def test_upstream_profile_reads_listen_and_emulator_keys(tmp_path: Path) -> None:
    p = parse_profile(_profile("http://127.0.0.1:1", 'listen = "127.0.0.1:9100"'), tmp_path / "p.toml", env={})
    assert p.upstream.listen == "127.0.0.1:9100"
    assert p.upstream.config.default.output_tokens == 20
    (tmp_path / "gt.jsonl").write_text("")  # `hopbench serve --record` creates it as it starts
    r = parse_profile(_profile("http://127.0.0.1:1", 'record = "gt.jsonl"', emulator=""), tmp_path / "p.toml",
                      env={})
    assert r.upstream.record == tmp_path / "gt.jsonl"


def test_upstream_address_in_use_names_the_key_and_still_writes_results(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        profile = parse_profile(_profile("http://127.0.0.1:1", f'listen = "127.0.0.1:{port}"'),
                                tmp_path / "p.toml", env={})
        with pytest.raises(ProfileError, match=r"upstream\.listen: 127\.0\.0\.1:\d+ is already in use"):
            run_profile(profile, out_dir=tmp_path / "run")
    assert (tmp_path / "run" / "summary.json").exists()


@pytest.mark.slow
def test_upstream_no_match_warns_naming_the_key(tmp_path: Path) -> None:
    """The 'gateway' is a second emulator, not the upstream: nothing matches, and the run says so."""
    from hopbench.emulator import EmbeddedEmulator

    cfg = parse_profile(_profile("http://127.0.0.1:1", 'listen = "127.0.0.1:1"'), "e.toml", env={}).upstream.config
    port = free_port()
    with EmbeddedEmulator(cfg, record_path=None) as other:
        profile = parse_profile(_profile(other.base_url, f'listen = "127.0.0.1:{port}"', requests=4),
                                tmp_path / "p.toml", env={})
        run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    assert s["gateway_overhead"]["match_rate"] == 0.0
    assert any("none of the 4 client streams reached the upstream emulator ([upstream].listen" in w
               for w in s["warnings"])


@pytest.mark.slow
def test_upstream_record_of_an_emulator_started_by_hand(tmp_path: Path) -> None:
    """``hopbench serve --record FILE`` started by hand (the same child process the
    embedded emulator runs): only what the file gained during the run counts."""
    from hopbench.emulator import EmbeddedEmulator

    record = tmp_path / "gt.jsonl"
    stale = {"request_id": "0-1", "t0_mono_ns": 1, "boot_id": "another-boot", "status": 200, "end": "completed"}
    record.write_text(json.dumps(stale) + "\n")  # an earlier run's line, same ids
    cfg = parse_profile(_profile("http://127.0.0.1:1", 'listen = "127.0.0.1:1"'), "e.toml", env={}).upstream.config
    with EmbeddedEmulator(cfg, record_path=record) as emu:
        profile = parse_profile(_profile(emu.base_url, 'record = "gt.jsonl"', emulator="", requests=8),
                                tmp_path / "p.toml", env={})
        run_profile(profile, out_dir=tmp_path / "run")
    g = _summary(tmp_path / "run")["gateway_overhead"]
    assert g["match_rate"] == 1.0 and g["upstream_requests_unmatched"] == 0
    assert g["per_event"] is True and g["upstream"] == f'[upstream].record = "{record}"'
    # an emulator hopbench did not start is not its own: no emulator CPU figure (a neighbour)
    assert _summary(tmp_path / "run")["generator"]["emulator_cpu_cores"] is None


# -- the delaying proxy --------------------------------------------------------------------------

class DelayProxy:
    """tests/_delay_proxy.py in a process: start, yield its URL, stop, read its self-measurement."""

    def __init__(self, tmp: Path, upstream_port: int, delay_ms: float, retry: bool = False,
                 answer_every: int = 0, swap_at: int = -1, keepalive_ms: float = 0.0,
                 hold: bool = False) -> None:
        self.port = free_port()
        self.ready, self.stats = tmp / "proxy.ready", tmp / "proxy.stats"
        argv = [sys.executable, str(HERE / "_delay_proxy.py"), "--port", str(self.port),
                "--upstream", f"127.0.0.1:{upstream_port}", "--delay-ms", str(delay_ms),
                "--ready", str(self.ready), "--stats", str(self.stats)]
        self.argv = argv + (["--retry"] if retry else []) + ["--answer-every", str(answer_every),
                                                             "--swap-at", str(swap_at), "--keepalive-ms", str(keepalive_ms)]
        self.argv += ["--hold"] if hold else []
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> DelayProxy:
        self.proc = subprocess.Popen(self.argv)
        deadline = time.monotonic() + 20
        while not self.ready.exists():
            assert self.proc.poll() is None, "the delaying proxy exited"
            assert time.monotonic() < deadline, "the delaying proxy did not start"
            time.sleep(0.02)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def pct_ns(self, key: str, q: float = 0.5) -> int:
        """The ``q`` quantile of the proxy's own measurement ``key`` ("late_ns", "forward_ns")."""
        values = sorted(json.loads(self.stats.read_text())[key])
        return values[min(len(values) - 1, int(q * len(values)))] if values else 0


@pytest.mark.slow
def test_delay_proxy_overhead_is_the_injected_delay(tmp_path: Path) -> None:
    delay_ms = 5.0
    emu_port = free_port()
    with DelayProxy(tmp_path, emu_port, delay_ms) as proxy:
        profile = parse_profile(_profile(proxy.url, f'listen = "127.0.0.1:{emu_port}"'), tmp_path / "p.toml", env={})
        run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    g = s["gateway_overhead"]
    assert g["match_rate"] == 1.0 and g["per_event"] is True and g["clock"] == "same host"
    # the [upstream] emulator is hopbench's own: its CPU is measured apart from the neighbours'
    assert 0 <= s["generator"]["emulator_cpu_cores"] <= s["generator"]["cpus"]
    assert g["buffering"]["flag"] is False
    assert g["events"]["dropped"] == 0 and g["events"]["upstream"] == 24 * 20
    # the proxy holds each event delay_ms after it arrived, so no event can come sooner
    stats = s["scopes"]["all"]["metrics"]
    assert stats["event_delay"]["min"] >= delay_ms
    assert stats["added_ttft"]["min"] >= delay_ms
    # the claim is p50 within 1 ms of the injected delay; with both cores shared by
    # other work the proxy and the client run late too, so the bound adds what this run itself
    # measured of that: the proxy's own lateness and the client's loop lag, at p99 (a looser,
    # self-measured bound; the 1 ms claim is measured by benchmarks/bench_overhead.py)
    tol_ms = 1.0 + proxy.pct_ns("late_ns", 0.99) / MS + stats["loop_lag"]["p99"]
    assert abs(_p50_ms(s, "event_delay") - delay_ms) <= tol_ms, (stats["event_delay"], tol_ms)
    # added TTFT = the request's way up (request_delay: client -> proxy -> a new upstream
    # connection -> the emulator, real overhead of this Python proxy, ~1-2 ms here) + the
    # first content event's way down (the injected delay). A difference of two p50s is not
    # the p50 of the difference: the bound also allows the request path's own spread, as
    # this run measured it (p90 - p50). The 1 ms claim itself: benchmarks/bench_overhead.py.
    down_ms = _p50_ms(s, "added_ttft") - _p50_ms(s, "request_delay")
    spread_ms = stats["request_delay"]["p90"] - stats["request_delay"]["p50"]
    assert abs(down_ms - delay_ms) <= tol_ms + spread_ms, (stats["added_ttft"], stats["request_delay"], tol_ms)
    # the proxy's own part of it (request head read -> written upstream, stamped by the proxy
    # after its write: a proxy descheduled there stamps late; its lateness, as measured, allowed)
    assert stats["request_delay"]["p50"] + tol_ms >= proxy.pct_ns("forward_ns") / MS, \
        (stats["request_delay"], proxy.pct_ns("forward_ns"), tol_ms)


@pytest.mark.slow
def test_buffering_flag_fires_behind_a_holding_proxy_and_not_without_one(tmp_path: Path) -> None:
    """Issue 20's done-when without nginx: the proxy holds every answer until its upstream
    body ends (``--hold``), so each stream reaches the client as one burst after its whole
    generation (40 ms + 20 tokens at 100/s): the streams are flagged
    ``proxy_buffering_suspected`` (or ``client_lagged`` when the client's own lag explains
    the burst; it is then not counted as buffering), the run warns, and gateway overhead
    flags the gateway. Without the proxy, against the same emulator: no stream is flagged
    but one the emulator itself wrote >= 10 ms late (its ground truth), and no warning."""
    emu_port = free_port()
    with DelayProxy(tmp_path, emu_port, 0.0, hold=True) as proxy:
        profile = parse_profile(_profile(proxy.url, f'listen = "127.0.0.1:{emu_port}"'), tmp_path / "p.toml", env={})
        run_profile(profile, out_dir=tmp_path / "held")
    s = _summary(tmp_path / "held")
    c = s["scopes"]["all"]["counters"]
    print("held:", {k: c.get(k, 0) for k in ("completed", "proxy_buffering_suspected", "client_lagged")})
    assert c["completed"] == 24
    assert c.get("proxy_buffering_suspected", 0) + c.get("client_lagged", 0) == 24, c
    assert c.get("proxy_buffering_suspected", 0) > 12, c  # the run's warning needs more than half
    # judged again against the upstream's record (hopbench.measure._burst): the emulator paced every
    # answer (10 ms between events) and the proxy held it: buffering confirmed. A stream the
    # emulator itself got to 150 ms late or more may count as the origin's instead.
    truth = [json.loads(x) for x in (tmp_path / "held" / "ground_truth.jsonl").read_text().splitlines()]
    late = sum(r.get("queue_ns", 0) + r.get("lag_max_ns", 0) >= 150 * MS or sum(r["gaps_ns"]) < 19 * MS
               for r in truth)
    print("held, re-judged:", {k: c.get(k, 0) for k in ("origin_burst", "proxy_buffering_confirmed",
                                                        "burst_unmatched")}, "late or unpaced upstream:", late)
    assert c.get("proxy_buffering_confirmed", 0) + c.get("origin_burst", 0) == c["proxy_buffering_suspected"], c
    assert c.get("origin_burst", 0) <= late, c
    if c.get("proxy_buffering_confirmed", 0) > 12:
        assert any(w.startswith("proxy buffering confirmed by the upstream's record: ")
                   for w in s["warnings"]), s["warnings"]
    else:  # only an upstream that was itself late on most streams takes the confirmation away
        assert late > 12 - c.get("proxy_buffering_confirmed", 0), (c, late)
    assert not any("proxy buffering suspected" in w for w in s["warnings"]), s["warnings"]
    assert s["gateway_overhead"]["buffering"]["flag"] is True, s["gateway_overhead"]["buffering"]
    # the proxy names no gateway kind (no Server header): the advice is generic, not nginx's (issue 38)
    (warn,) = [w for w in s["warnings"] if "buffers the stream" in w]
    assert GENERIC_BUFFERING_ADVICE in warn and "proxy_buffering" not in warn, warn

    # the same emulator, embedded (no [target]): hopbench talks to it directly
    direct = parse_profile('[run]\nrequests = 24\n[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = 4\n'
                           '[emulator]\nttft_ms = 40\ntokens_per_s = 100\noutput_tokens = 20\n'
                           '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello there"]\n',
                           tmp_path / "d.toml", env={})
    run_profile(direct, out_dir=tmp_path / "direct")
    s = _summary(tmp_path / "direct")
    c = s["scopes"]["all"]["counters"]
    truth = [json.loads(x) for x in (tmp_path / "direct" / "ground_truth.jsonl").read_text().splitlines()]
    held_by_the_emulator = sum(r.get("lag_max_ns", 0) >= 10 * MS for r in truth)
    print("direct:", {k: c.get(k, 0) for k in ("completed", "proxy_buffering_suspected", "client_lagged",
                                               "origin_burst", "burst_unexplained")},
          "held by the emulator", held_by_the_emulator)
    assert c["completed"] == 24
    # (a stream the emulator's record shows written at once, or got to late, is the origin's
    # burst when re-judged against it: on a busy machine that can be more than its lag_max says)
    assert c.get("proxy_buffering_suspected", 0) <= max(held_by_the_emulator, c.get("origin_burst", 0)), c
    assert not any("proxy buffering" in w for w in s["warnings"]), s["warnings"]
    assert not any(c.get(k, 0) for k in ("proxy_buffering_confirmed", "burst_unmatched")), c


@pytest.mark.slow
def test_delay_proxy_retries_and_fault_matrix(tmp_path: Path) -> None:
    emu_port = free_port()
    faults = ("[upstream.faults]\nhttp_429 = 0.15\nhttp_500 = 0.15\ndisconnect = 0.1\nmidstream_error = 0.1\n"
              "fault_after_tokens = 3\n")
    with DelayProxy(tmp_path, emu_port, 0.0, retry=True) as proxy:
        profile = parse_profile(_profile(proxy.url, f'listen = "127.0.0.1:{emu_port}"', requests=40,
                                         emulator="ttft_ms = 10\ntokens_per_s = 500\noutput_tokens = 8\n" + faults),
                                tmp_path / "p.toml", env={})
        run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    g = s["gateway_overhead"]
    truth = [json.loads(x) for x in (tmp_path / "run" / "ground_truth.jsonl").read_text().splitlines()]
    retried_truth = sum(1 for t in truth if t["status"] in (429, 500))
    assert g["match_rate"] == 1.0
    assert g["retried_streams"] >= 1
    # every 429/500 the upstream sent triggered a retry (the proxy retries once: a second
    # 429/500 in a row reaches the client)
    assert sum(g["retry_triggers"].values()) == g["retried_streams"]
    assert set(g["retry_triggers"]) <= {"http_429", "http_500"}
    assert retried_truth >= g["retried_streams"]
    matrix = g["fault_matrix"]
    assert sum(sum(row.values()) for row in matrix.values()) == g["matched"] == 40
    for row in ("http_429", "http_500"):
        for col in matrix.get(row, {}):
            assert "after 2 upstream requests" in col
    # a broken upstream stream reaches the client as a truncated one (this proxy passes the break on)
    assert all(col.startswith("truncated") for col in matrix.get("disconnect", {})), matrix
    assert all(col.startswith("failed") for col in matrix.get("midstream_error", {})), matrix
    # report.html: the section, its spectra, the over-time figure and the fault table
    from hopbench.report._page import write_report

    page = write_report(tmp_path / "run").read_text(encoding="utf-8")
    for needle in ("<h2>Gateway overhead</h2>", 'id="fig-overhead"', 'id="fig-overhead-time"',
                   "Fault translation: upstream fault -> what the client saw",
                   "<td class=\"l\">http_429</td>" if "http_429" in matrix else "<td class=\"l\">none</td>"):
        assert needle in page, needle


# -- nginx -----------------------------------------------------------------------------------------

NGINX = binary("nginx")

BUFFERING_OFF = STREAMING
# the emulator sends X-Accel-Buffering: no; a gateway that ignores it (and gzips) buffers
BUFFERING_ON = BUFFERING


@pytest.fixture
def nginx_binary() -> str:
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install -y nginx-light; .ci/run tries that)")
    return NGINX


@pytest.fixture
def nginx(nginx_binary: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """(nginx URL, the upstream port it proxies to) with ``request.param`` as its buffering line."""
    listen, upstream = ports(2)  # the config of docs/gateway-overhead.md (tests/_gateways.py)
    with start("nginx", tmp_path / "nginx", upstream, {listen: request.param}) as urls:
        yield urls[0], upstream


@pytest.mark.slow
@pytest.mark.parametrize("nginx", [BUFFERING_OFF], indirect=True)
def test_nginx_streaming_overhead_is_small_and_not_flagged(nginx: tuple[str, int], tmp_path: Path) -> None:
    url, upstream = nginx
    profile = parse_profile(_profile(url, f'listen = "127.0.0.1:{upstream}"'), tmp_path / "p.toml", env={})
    run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    g = s["gateway_overhead"]
    assert g["match_rate"] == 1.0 and g["matched_by"]["header"] == 24
    assert g["buffering"]["flag"] is False, g["buffering"]
    assert not any("buffers the stream" in w for w in s["warnings"])
    assert g["events"]["dropped"] == 0 and g["events"]["merged"] <= g["events"]["upstream"] // 10
    # near zero: well under one inter-token gap (10 ms), beyond what this run's own loop lag explains
    assert _p50_ms(s, "event_delay") <= 10.0 + _p50_ms(s, "loop_lag")


@pytest.mark.slow
@pytest.mark.parametrize("nginx", [BUFFERING_ON], indirect=True)
def test_nginx_buffering_is_flagged(nginx: tuple[str, int], tmp_path: Path) -> None:
    url, upstream = nginx
    profile = parse_profile(_profile(url, f'listen = "127.0.0.1:{upstream}"', requests=12), tmp_path / "p.toml",
                            env={})
    run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    g = s["gateway_overhead"]
    assert g["match_rate"] == 1.0
    assert g["buffering"]["flag"] is True, g["buffering"]
    assert any("buffers the stream" in w and "nginx: proxy_buffering off" in w for w in s["warnings"])
    # the first event of a buffered stream waits for the flush: most of the stream's length
    assert s["scopes"]["all"]["metrics"]["event_delay"]["max"] >= 100.0


def test_upstream_with_workers_is_refused_naming_the_keys(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(_profile("http://127.0.0.1:1", 'listen = "127.0.0.1:1"'))
    proc = subprocess.run([sys.executable, "-m", "hopbench", "run", str(tmp_path / "p.toml"), "--workers", "2",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "[upstream] (gateway overhead) runs in one process: drop --workers / run.workers" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_upstream_analysis_failure_still_writes_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hopbench.driver._gateway

    def broken(*args: object, **kw: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(hopbench.driver._gateway, "gateway_overhead", broken)
    port = free_port()
    profile = parse_profile(_profile(f"http://127.0.0.1:{port}", f'listen = "127.0.0.1:{port}"', requests=4),
                            tmp_path / "p.toml", env={})
    run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    assert s["scopes"]["all"]["counters"]["completed"] == 4
    assert s["gateway_overhead"]["error"] == "ValueError: boom"
    assert "gateway overhead could not be computed: ValueError: boom" in s["warnings"]


@pytest.mark.slow
def test_streams_the_gateway_answered_itself_are_unseen(tmp_path: Path) -> None:
    emu_port = free_port()
    with DelayProxy(tmp_path, emu_port, 0.0, answer_every=4) as proxy:
        profile = parse_profile(_profile(proxy.url, f'listen = "127.0.0.1:{emu_port}"', requests=20),
                                tmp_path / "p.toml", env={})
        run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    g = s["gateway_overhead"]
    assert g["unseen_by_upstream"] == 5 and g["matched"] == 15 and g["match_rate"] == 0.75
    assert g["unseen_outcomes"] == {"http_error 503": 5}
    assert any("5 of 20 client streams never reached the upstream" in w for w in s["warnings"])


@pytest.mark.slow
def test_per_event_figures_refused_across_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An emulator on another boot (here: this host pretending to have another boot id)."""
    import hopbench.driver._gateway

    monkeypatch.setattr(hopbench.driver._gateway, "boot_id", lambda: "another-host-boot-id")
    port = free_port()
    profile = parse_profile(_profile(f"http://127.0.0.1:{port}", f'listen = "127.0.0.1:{port}"', requests=4),
                            tmp_path / "p.toml", env={})
    run_profile(profile, out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    g = s["gateway_overhead"]
    assert g["per_event"] is False and g["clock"].startswith("other host") and g["matched"] == 4
    assert "added_ttft" not in s["scopes"]["all"]["metrics"]
    assert any(w.startswith(f'gateway overhead: per-event figures refused ([upstream].listen = "127.0.0.1:{port}")')
               for w in s["warnings"])


@pytest.mark.slow
def test_client_cancels_behind_a_gateway_are_joined_with_the_upstream_record(tmp_path: Path) -> None:
    """Cancellation (issue 15 item 5) through [upstream]: the upstream emulator's record
    gives each cancelled stream its cancel_delay (no gateway here: the emulator itself)."""
    port = free_port()
    text = _profile(f"http://127.0.0.1:{port}", f'listen = "127.0.0.1:{port}"', requests=6)
    text = text.replace('prompts = ["hello there"]\n', 'prompts = ["hello there"]\ncancel = { after_events = 3 }\n')
    run_profile(parse_profile(text, tmp_path / "p.toml", env={}), out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    assert s["scopes"]["all"]["metrics"]["cancel_delay"]["count"] == 6
    assert s["gateway_overhead"]["matched"] == 6


@pytest.mark.slow
def test_cancelled_streams_are_no_gateway_loss(tmp_path: Path) -> None:
    """A stream the client cancelled is never a gateway loss (issue 38): the events and usage the
    upstream wrote after the client left are `not_seen_after_cancel`, never `dropped`. The emulator
    runs each stream on to its end (on_client_close = "finish"), as behind a gateway that keeps
    the upstream going."""
    port = free_port()
    text = _profile(f"http://127.0.0.1:{port}", f'listen = "127.0.0.1:{port}"', requests=6,
                    emulator='ttft_ms = 40\ntokens_per_s = 100\noutput_tokens = 20\non_client_close = "finish"\n')
    text = text.replace('prompts = ["hello there"]\n', 'prompts = ["hello there"]\ncancel = { after_events = 3 }\n')
    run_profile(parse_profile(text, tmp_path / "p.toml", env={}), out_dir=tmp_path / "run")
    g = _summary(tmp_path / "run")["gateway_overhead"]
    assert g["matched"] == 6
    assert g["events"]["dropped"] == 0 and g["events"]["not_seen_after_cancel"] >= 6 * 10, g["events"]
    assert g["usage"]["dropped"] == 0 and g["usage"]["not_seen_after_cancel"] == 6, g["usage"]


def test_buffering_advice_names_the_gateways_own_setting() -> None:
    """Buffering advice per gateway kind where the headers tell (Server, LiteLLM's version header),
    generic otherwise: haproxy writes no Server header of its own (issue 38)."""
    assert gateway_kind({"server": "nginx/1.22.1"}) == "nginx"
    assert gateway_kind({"server": "Caddy"}) == "caddy" and gateway_kind({"server": "envoy"}) == "envoy"
    assert gateway_kind({"server": "uvicorn", "x-litellm-version": "1.108.7"}) == "litellm"
    assert gateway_kind({}) == "" and gateway_kind({"server": "uvicorn"}) == ""
    assert buffering_advice({"nginx": 10, "": 2}).startswith("nginx: proxy_buffering off")
    assert buffering_advice({"caddy": 3}).startswith("caddy: flush_interval -1")
    assert buffering_advice({"": 12}) == buffering_advice({}) == GENERIC_BUFFERING_ADVICE
    assert "proxy_buffering" not in GENERIC_BUFFERING_ADVICE


# A cancel before the response head leaves the client's socket to the collector (a ResourceWarning,
# seen here; the runner's, not this join's): reported, ignored in this test only.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_streams_cancelled_before_the_upstream_are_no_gateway_answer(tmp_path: Path) -> None:
    """A stream the client cancelled before its request reached the upstream is the client's doing:
    counted in cancelled_before_upstream, never in unseen_by_upstream ("the gateway answered them
    itself") and never "none reached the upstream" (issue 38). The delaying proxy holds each event
    20 ms; the client cancels 1 ms after its send, before any response."""
    emu_port = free_port()
    with DelayProxy(tmp_path, emu_port, 20.0) as proxy:
        text = _profile(proxy.url, f'listen = "127.0.0.1:{emu_port}"', requests=4, concurrency=1)
        text = text.replace('prompts = ["hello there"]\n', 'prompts = ["hello there"]\ncancel = { after_ms = 1 }\n')
        run_profile(parse_profile(text, tmp_path / "p.toml", env={}), out_dir=tmp_path / "run")
    s = _summary(tmp_path / "run")
    g = s["gateway_overhead"]
    assert g["unseen_by_upstream"] == 0 and g["matched"] + g["cancelled_before_upstream"] == 4, g
    assert not any("never reached the upstream" in w or "none of the" in w for w in s["warnings"]), s["warnings"]
