"""The main job end to end on the embedded emulator, checked against its ground truth."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from hopbench import ResultsError
from hopbench.measure._hdr import Histogram
from hopbench.config._profile import load_profile, parse_profile
from hopbench.driver._results import read_summary
from hopbench.driver._single import run_profile

ROOT = Path(__file__).resolve().parent.parent


def _ground_truth(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "ground_truth.jsonl").read_text().splitlines()]


IDLE_NS = 1_000_000_000  # profiles/faults.toml: run.timeouts.idle_s


def _cut_late(r: dict) -> bool:
    """A stall that hopbench cut as idle, noticed by the emulator only after it had
    resumed (its process or loop late on a busy machine): the emulator ends it
    "client_closed", not "stall". The silence the client judged is in its record
    (a gap of at least the idle limit), and nothing else closes a stream in this
    profile, so any other "client_closed" is hopbench's mistake (a live stream cut)."""
    return r["end"] == "client_closed" and r["fault"] == "stall" and max(r["gaps_ns"], default=0) >= IDLE_NS


def _gaps_read(r: dict) -> list[int]:
    """The gaps of ``r`` that hopbench could read: all, but for a stall cut late
    (``_cut_late``) those before the silence (after it the client had left)."""
    if not _cut_late(r):
        return r["gaps_ns"]
    return r["gaps_ns"][:next(i for i, g in enumerate(r["gaps_ns"]) if g >= IDLE_NS)]


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict]]:
    out = tmp_path_factory.mktemp("faults") / "run"
    profile = load_profile(ROOT / "profiles" / "faults.toml")
    outcome = run_profile(profile, out_dir=out)
    assert outcome.complete and outcome.crashed is None
    return dict(outcome.summary, _out=str(out)), _ground_truth(out)


@pytest.mark.slow
def test_run_faults_counters_match_ground_truth(faults_run: tuple[dict, list[dict]]) -> None:
    summary, truth = faults_run
    c = summary["scopes"]["all"]["counters"]
    ends = collections.Counter("stall" if _cut_late(r) else r["end"] for r in truth)
    assert c["started"] == len(truth) == 600
    assert ends["client_closed"] == 0, [r for r in truth if r["end"] == "client_closed"]
    assert summary["complete"] is True
    # a busy machine may saturate the client: then the run must say so
    assert summary["saturated"] == any(w.startswith("load generator saturated") for w in summary["warnings"])
    # the collector's pauses are reported (hopbench.engine._collector)
    gen = summary["generator"]
    assert gen["gc_collections"] >= 1
    assert 0 < gen["gc_pause_max_ms"] <= gen["gc_pause_total_ms"]
    assert 0 < gen["gc_pause_p99_ms"] <= gen["gc_pause_max_ms"]
    # the saturation verdict and what it was judged on (hopbench.engine._saturation)
    assert gen["saturation"]["saturated"] == summary["saturated"]
    assert bool(gen["saturation"]["causes"]) == summary["saturated"]
    assert gen["process_cpu_cores"] > 0 and gen["cpus"] >= 1
    # the embedded emulator's CPU over the same span, kept apart from the neighbours'
    assert isinstance(gen["emulator_cpu_cores"], float) and 0 <= gen["emulator_cpu_cores"] <= gen["cpus"]
    assert c.get("completed", 0) == ends["completed"]
    assert c.get("failed", 0) == ends["failed"]
    assert c.get("truncated", 0) == ends["disconnect"]
    assert c.get("timeout", 0) == c.get("timeout.idle", 0) == ends["stall"]
    assert c.get("http_error", 0) == ends["http_error"]
    assert c.get("cancelled", 0) == c.get("connect_error", 0) == 0
    by_code = collections.Counter(r["error_code"] for r in truth if r["end"] == "failed")
    assert {k[7:]: v for k, v in c.items() if k.startswith("failed.")} == dict(by_code)
    by_status = collections.Counter(str(r["status"]) for r in truth if r["end"] == "http_error")
    assert {k[11:]: v for k, v in c.items() if k.startswith("http_error.")} == dict(by_status)
    # every fault kind happened, so every branch above was exercised
    assert {r["fault"] for r in truth} >= {"http_429", "http_500", "http_503", "midstream_error",
                                           "disconnect", "stall", "omit_done", "slow_headers"}
    done = [r for r in truth if r["end"] == "completed"]
    assert c["tokens.output.completed"] == sum(r["output_tokens"] or 0 for r in done)
    assert c["tokens.input.completed"] == sum(r["input_tokens"] or 0 for r in done if r["output_tokens"] is not None)
    # per scenario the counters add up to what was started
    for scope, data in summary["scopes"].items():
        k = data["counters"]
        assert k["started"] == sum(k.get(o, 0) for o in ("completed", "failed", "truncated", "timeout",
                                                          "http_error", "connect_error", "cancelled")), scope


@pytest.mark.slow
def test_run_faults_per_protocol_scopes(faults_run: tuple[dict, list[dict]]) -> None:
    summary, truth = faults_run
    proto_of = {"chat-gpt-emu": "chat", "responses-gpt-emu": "responses", "messages-claude-emu": "messages"}
    for scope, proto in proto_of.items():
        rows = [r for r in truth if r["protocol"] == proto]
        assert summary["scopes"][scope]["counters"]["started"] == len(rows)
        assert summary["scopes"][scope]["counters"].get("completed", 0) == sum(r["end"] == "completed" for r in rows)


def _hist(metric: str, values: list[int]) -> Histogram:
    h = Histogram(metric)
    for v in values:
        h.record(v)
    return h


@pytest.mark.slow
def test_run_timing_matches_injected_ttft_and_gaps(faults_run: tuple[dict, list[dict]]) -> None:
    """Acceptance (issue 5): measured TTFT and inter-token gaps match the injected
    ones within 2 ms at p50 and 10 ms at p99, for profiles/faults.toml, plus the
    lags this run measured on both sides (hopbench's event-loop lag, the emulator's
    lateness): a neighbour that takes the CPU delays every stamp, and the run
    shows by how much (issue 14). Per stream, no stream's TTFT may be shorter than
    the emulator's (hopbench's clock starts before the request leaves)."""
    summary, truth = faults_run
    m = summary["scopes"]["all"]["metrics"]
    inj_ttft = _hist("ttft", [r["ttft_ns"] for r in truth if r["ttft_ns"] is not None])
    inj_itl = _hist("itl", [g for r in truth for g in _gaps_read(r)])
    ms = 1_000_000
    assert m["ttft"]["count"] == inj_ttft.count
    assert m["itl"]["count"] == inj_itl.count
    lag = m["loop_lag"]  # ms
    late = sorted(r["lag_max_ns"] / ms for r in truth)
    # p50 against the typical lags; p99 against the worst ones (the tail of a sum of
    # delays on both sides is not the sum of their p99s)
    late_p50, late_max = late[len(late) // 2], late[-1]
    out = Path(summary["_out"])
    streams = {s["id"]: s for s in map(json.loads, (out / "streams.jsonl").read_text().splitlines())}
    diffs = sorted((streams[r["request_id"]]["ttft_ns"] - r["ttft_ns"]) / ms for r in truth
                   if r["ttft_ns"] is not None)
    assert diffs[0] >= -1.0, diffs[:5]
    # Each stream's TTFT also holds two delays of the client that this run measured for
    # that stream: from its intended start to the send (a busy loop sends late), and how
    # long its bytes waited in the socket before the loop read them (client_lag_ns, by the
    # kernel's receive stamp). On a quiet machine both are ~0; on a busy one they, not the
    # wire, make most of the difference (two CPU burners: ~20 ms at p50).
    own = {r["request_id"]: (streams[r["request_id"]]["sent_ns"] - streams[r["request_id"]]["start_ns"]
                             + streams[r["request_id"]]["client_lag_ns"]) / ms
           for r in truth if r["ttft_ns"] is not None}
    rest = sorted((streams[rid]["ttft_ns"] - r["ttft_ns"]) / ms - own[rid] for r in truth
                  if (rid := r["request_id"]) in own)
    r50, r99 = rest[len(rest) // 2], rest[min(len(rest) - 1, int(len(rest) * 0.99))]
    assert r50 <= 2.0 + lag["p50"] + late_p50, (r50, lag, late_p50)
    assert r99 <= 10.0 + lag["max"] + late_max, (r99, lag, late_max)
    own_sorted = sorted(own.values())
    own50, own_max = own_sorted[len(own_sorted) // 2], own_sorted[-1]
    assert abs(m["ttft"]["p50"] - inj_ttft.percentile(50) / ms) <= 2.0 + lag["p50"] + late_p50 + own50
    assert abs(m["ttft"]["p99"] - inj_ttft.percentile(99) / ms) <= 10.0 + lag["max"] + late_max + own_max
    assert abs(m["itl"]["p50"] - inj_itl.percentile(50) / ms) <= 2.0 + lag["p90"]
    assert abs(m["itl"]["p99"] - inj_itl.percentile(99) / ms) <= 10.0 + lag["max"] + late_max


@pytest.mark.slow
def test_run_stream_log_joins_ground_truth(faults_run: tuple[dict, list[dict]], tmp_path: Path) -> None:
    summary, truth = faults_run
    out = Path(summary["_out"])
    streams = {s["id"]: s for s in map(json.loads, (out / "streams.jsonl").read_text().splitlines())}
    assert set(streams) == {r["request_id"] for r in truth}
    end_of = {"completed": "completed", "failed": "failed", "disconnect": "truncated", "stall": "timeout",
              "http_error": "http_error"}
    for r in truth:
        s = streams[r["request_id"]]
        assert s["outcome"] == end_of["stall" if _cut_late(r) else r["end"]], (r, s)
        if r["end"] == "completed":
            assert s["output_tokens"] == r["output_tokens"]
            # the emulator's content_events count every channel: hopbench's output_events
            assert s["output_events"] == r["content_events"]
            assert sum(s["events"].values()) >= s["output_events"] >= s["content_events"]


def test_run_unwritable_results_folder_fails_before_load(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    profile = load_profile(ROOT / "profiles" / "smoke.toml")
    with pytest.raises(ResultsError):
        run_profile(profile, out_dir=blocker / "sub")


def _cli(*args: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "hopbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, **kw)  # type: ignore[call-overload]


def _timeline_started(out: Path, n: int) -> bool:
    """Whether a finished interval of ``out``'s timeline.jsonl has ``n`` streams started."""
    try:
        lines = (out / "timeline.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    for line in lines:
        try:
            if json.loads(line).get("started_total", 0) >= n:
                return True
        except ValueError:  # a line being written
            pass
    return False


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_run_cli_signal_leaves_partial_results(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    prof = tmp_path / "long.toml"
    prof.write_text("""
[run]
duration_s = 60
grace_s = 1
[load]
concurrency = 8
[emulator]
ttft_ms = 20
tokens_per_s = 20
output_tokens = 400
[[scenario]]
protocol = "chat"
model = "m"
""")
    out = tmp_path / "out"
    proc = _cli("run", str(prof), "--out", str(out))
    try:
        # the signal once the 8 streams are running, as the run's own timeline says: the
        # file exists from the start, and a fixed sleep after that fell before the first
        # stream on a busy machine (load 8: the emulator and the client still starting)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not _timeline_started(out, 8):
            time.sleep(0.1)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stderr
    s = read_summary(out)
    assert s["complete"] is False and s["interrupted_by"] == sig.name
    c = s["scopes"]["all"]["counters"]
    assert c["cancelled"] >= 1  # the 20 s streams were cut after the 1 s grace
    assert c["started"] == c.get("cancelled", 0) + c.get("completed", 0)
    assert (out / "intervals.hlog").stat().st_size > 0
    assert s["scopes"]["all"]["metrics"]["ttft"]["count"] >= 8


def test_run_cli_bad_profile_exit_2(tmp_path: Path) -> None:
    prof = tmp_path / "bad.toml"
    prof.write_text("[run]\nduration_s = 1\n[load]\nconcurrency = 0\n[[scenario]]\nprotocol = 'chat'\n")
    proc = _cli("run", str(prof), "--out", str(tmp_path / "o"))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert f"{prof}:4: load.concurrency: expected a positive integer" in err
    assert not (tmp_path / "o").exists()
    proc = _cli("validate", str(prof))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "load.concurrency" in err


def test_run_secrets_never_reach_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-hopbench-test-" + "9" * 24
    monkeypatch.setenv("HOPBENCH_TEST_KEY", secret)
    text = """
[run]
requests = 6
[load]
concurrency = 2
[target]
api_key_env = "HOPBENCH_TEST_KEY"
[emulator]
ttft_ms = 5
output_tokens = 3
[[scenario]]
protocol = "chat"
model = "m"
[[scenario]]
protocol = "messages"
model = "m"
"""
    out = tmp_path / "run"
    outcome = run_profile(parse_profile(text, tmp_path / "s.toml"), out_dir=out)
    assert outcome.summary["scopes"]["all"]["counters"]["started"] == 6
    for f in out.iterdir():
        assert secret.encode() not in f.read_bytes(), f.name


@pytest.mark.slow
def test_run_crash_mid_run_leaves_partial_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hopbench.engine._runner as runner_mod

    calls = []
    original = runner_mod.LoadRunner._publish

    def crash_on_third(self: runner_mod.LoadRunner, *work: object) -> None:
        calls.append(1)
        if len(calls) == 3:  # in the interval thread, as a real bug there would
            raise RuntimeError("injected crash")
        original(self, *work)

    monkeypatch.setattr(runner_mod.LoadRunner, "_publish", crash_on_third)
    text = """
[run]
duration_s = 30
[load]
concurrency = 4
[emulator]
ttft_ms = 10
tokens_per_s = 50
output_tokens = 10
[[scenario]]
protocol = "responses"
model = "m"
"""
    out = tmp_path / "run"
    outcome = run_profile(parse_profile(text, tmp_path / "c.toml"), out_dir=out)
    assert outcome.crashed is not None and not outcome.complete
    s = read_summary(out)
    assert s["complete"] is False
    assert "hopbench crashed mid-run: RuntimeError: injected crash" in s["warnings"]
    c = s["scopes"]["all"]["counters"]
    assert c["completed"] >= 4 and c["started"] == c["completed"] + c.get("cancelled", 0)


@pytest.mark.slow
def test_run_unreachable_target_stops_early_exit_2(tmp_path: Path) -> None:
    prof = tmp_path / "closed.toml"
    prof.write_text('[run]\nduration_s = 30\n[load]\nconcurrency = 4\n[target]\nurl = "http://127.0.0.1:9"\n'
                    '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
    started = time.monotonic()
    proc = _cli("run", str(prof), "--out", str(tmp_path / "o"), "--quiet")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert time.monotonic() - started < 20  # not the 30 s of the profile
    assert "target unreachable: the first 20 connection attempts to http://127.0.0.1:9 failed (refused)" in err
    s = read_summary(tmp_path / "o")
    assert s["complete"] is False and s["scopes"]["all"]["counters"]["connect_error"] >= 20


@pytest.mark.slow
def test_run_cli_refuses_secrets_in_target_url_and_a_used_folder(tmp_path: Path) -> None:
    prof = ROOT / "profiles" / "smoke.toml"
    fake_key = "sk-" + "test" * 6  # built at run time: no key-shaped literal in the repository
    for url in (f"http://u:{fake_key}@127.0.0.1:9", "http://127.0.0.1:9/?key=sk-x"):
        proc = _cli("run", str(prof), "--out", str(tmp_path / "o"), "--target-url", url)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and "--target-url:" in err
        assert not (tmp_path / "o").exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "summary.json").write_text("{}")
    proc = _cli("run", str(prof), "--out", str(used))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "the folder is not empty" in err
    # the refusal is the only line: never "running ... -> DIR" before it (issue 39 item 7)
    assert "running" not in err and err.count("\n") == 1, err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("timeouts", "emulator", "outcome", "max_e2e_s"),
    [
        # no idle limit: the first-byte limit must not stay armed for the whole stream
        ("first_byte_s = 0.5\nidle_s = 0", "ttft_ms = 50\ntokens_per_s = 10\noutput_tokens = 15", "completed", 5.0),
        # headers at once, then silence: the idle limit counts from the headers
        ("first_byte_s = 30\nidle_s = 0.5", "ttft_ms = 3000\nkeepalive_interval_s = 0\noutput_tokens = 3",
         "timeout", 1.5),
    ],
)
def test_run_timeouts_switch_from_first_byte_to_idle_at_the_headers(
        tmp_path: Path, timeouts: str, emulator: str, outcome: str, max_e2e_s: float) -> None:
    text = f"""
[run]
requests = 2
[run.timeouts]
{timeouts}
[load]
concurrency = 2
[emulator]
{emulator}
[[scenario]]
protocol = "chat"
model = "m"
"""
    out = tmp_path / "run"
    summary = run_profile(parse_profile(text, tmp_path / "t.toml"), out_dir=out).summary
    lines = [json.loads(x) for x in (out / "streams.jsonl").read_text().splitlines()]
    assert [x["outcome"] for x in lines] == [outcome, outcome]
    assert all(x["status"] == 200 for x in lines)
    if outcome == "timeout":
        assert {x["detail"] for x in lines} == {"idle"}
    # plus the worst event-loop lag the run measured: a busy machine delays the cut
    lag_ms = summary["scopes"]["all"]["metrics"].get("loop_lag", {}).get("max") or 0.0
    assert max(x["e2e_ns"] for x in lines) < max_e2e_s * 1e9 + lag_ms * 1e6


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.3, 0.6])
def test_run_cli_signal_during_startup_still_writes_a_summary(tmp_path: Path, delay_s: float) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nduration_s = 30\n[load]\nconcurrency = 4\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
    out = tmp_path / "o"
    proc = _cli("run", str(prof), "--out", str(out), "--quiet")
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:  # the folder exists: start-up is under way
            time.sleep(0.01)
        time.sleep(delay_s - 0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    s = read_summary(out)
    assert s["complete"] is False and s["interrupted_by"] == "SIGTERM"


@pytest.mark.slow
def test_run_open_loop_max_in_flight_is_a_hard_bound(tmp_path: Path) -> None:
    text = """
[run]
duration_s = 2
[load]
mode = "rate"
rate_rps = 300
arrival = "constant"
max_in_flight = 5
[emulator]
ttft_ms = 100
output_tokens = 5
[[scenario]]
protocol = "chat"
model = "m"
"""
    outcome = run_profile(parse_profile(text, tmp_path / "t.toml"), out_dir=tmp_path / "o")
    load = outcome.summary["load"]
    assert load["peak_in_flight"] <= 5
    assert load["held"] is False and load["max_in_flight_hits"] > 0
    started = outcome.summary["scopes"]["all"]["counters"]["started"]
    # achieved counts requests written to the target: every started one but those a
    # busy client had not yet written when the run ended, at most max_in_flight of them
    # (per second of the load's window: [0, deadline), not measured_s, the stop as read, later)
    achieved_n = load["achieved_rate_rps"] * load["load_window_s"]
    assert started - 5 - 0.01 <= achieved_n <= started + 0.01, (achieved_n, started)
    assert load["arrival_rate_rps"] > 2 * load["achieved_rate_rps"]


@pytest.mark.slow
def test_run_emulator_key_and_overload_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.driver._common import emulator_warnings

    monkeypatch.setenv("HOPBENCH_EMU_KEY", "emu-secret-value-123")
    text = """
[run]
requests = 4
[load]
concurrency = 2
[target]
api_key_env = "HOPBENCH_EMU_KEY"
[emulator]
api_key = "emu-secret-value-123"
ttft_ms = 5
output_tokens = 3
[[scenario]]
protocol = "chat"
model = "m"
"""
    out = tmp_path / "o"
    outcome = run_profile(parse_profile(text, tmp_path / "t.toml"), out_dir=out)
    assert outcome.summary["scopes"]["all"]["counters"]["completed"] == 4
    assert b"emu-secret-value-123" not in (out / "summary.json").read_bytes()
    truth = tmp_path / "gt.jsonl"
    truth.write_text("".join(json.dumps({"lag_max_ns": v}) + "\n" for v in [1_000_000] * 50 + [40_000_000] * 10))
    assert "fell behind its own schedule" in emulator_warnings(truth)[0]  # p90 40 ms
    truth.write_text("".join(json.dumps({"lag_max_ns": v}) + "\n" for v in [1_000_000] * 98 + [40_000_000] * 2))
    assert emulator_warnings(truth) == []  # two late streams in a hundred: noise, not overload


@pytest.mark.parametrize("other_thread", [False, True])
def test_run_signal_while_the_emulator_forks_leaves_no_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             other_thread: bool) -> None:
    """A SIGTERM that lands inside subprocess.Popen (after the fork, before the
    emulator object knows its child) must still end with the child reaped, also
    when another thread is alive to take the signal (a progress display, trio's
    worker threads left by an earlier run: the full suite has them)."""
    import threading
    import hopbench.emulator._embedded as embedded
    from hopbench.emulator import EmbeddedEmulator, EmulatorConfig
    from hopbench.driver._single import Interrupted

    children: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        child = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        children.append(child)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered here, unless held back
        return child

    def handler(signum: int, frame: object) -> None:
        raise Interrupted("SIGTERM")

    monkeypatch.setattr(embedded.subprocess, "Popen", popen_then_signal)
    old = signal.signal(signal.SIGTERM, handler)
    release = threading.Event()
    waiter = threading.Thread(target=release.wait)
    if other_thread:
        waiter.start()
    try:
        with pytest.raises(Interrupted):
            with EmbeddedEmulator(EmulatorConfig(), record_path=tmp_path / "gt.jsonl"):
                pass
    finally:
        signal.signal(signal.SIGTERM, old)
        release.set()
        if other_thread:
            waiter.join()
    assert len(children) == 1
    assert children[0].poll() is not None  # reaped, not left running


async def test_streams_that_fail_without_yielding_do_not_starve_the_run() -> None:
    """A request that fails before any I/O (nothing awaited) must not turn a
    closed-loop user into a busy loop that starves the stop, the ticker and the
    signal handlers: the run still ends, here through the unreachable check."""
    import httpx

    from hopbench.engine import _runner
    from hopbench.engine._transport import StreamTransport
    from hopbench.config._profile import parse_profile
    from hopbench.measure._recorder import ALL, Recorder

    class Refusing(StreamTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            raise httpx.LocalProtocolError("refused before sending", request=request)

    profile = parse_profile('[run]\nduration_s = 3\n[load]\nconcurrency = 2\n[target]\n'
                            'url = "http://127.0.0.1:9"\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n',
                            "p.toml", env={})
    rec = Recorder(["chat-m"])
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, Recorder(["chat-m"]), transport_factory=Refusing)
    with trio.fail_after(10):
        stats = await runner.run()
    assert stats.interrupted_by is not None and stats.interrupted_by.startswith("target unreachable")
    assert rec.snapshot().counter(ALL, "connect_error") >= 20


_DONE_BODY = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
              b'[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "outcome", "detail"), [
    ("done_then_cut", "completed", None),      # [DONE], then the body breaks off mid-framing
    ("done_then_hang", "completed", None),     # [DONE], then the server never ends the body
    ("cut", "truncated", "truncated.closed"),  # broken before any terminal signal
    ("garbage", "connect_error", "connect_error.malformed_response"),
])
async def test_outcome_is_decided_by_the_terminal_signal(mode: str, outcome: str, detail: str | None) -> None:
    from functools import partial

    from hopbench.config._profile import parse_profile
    from hopbench.measure._recorder import ALL, Recorder
    from hopbench.engine._runner import LoadRunner

    async def handler(stream: trio.SocketStream) -> None:
        try:
            await stream.receive_some(65536)
            if mode == "garbage":
                await stream.send_all(b"SPDY/9 nonsense\r\n\r\n")
                return
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            body = _DONE_BODY if mode != "cut" else _DONE_BODY[:40]
            await stream.send_all(head + b"%x\r\n%s\r\n" % (len(body), body))
            if mode == "done_then_hang":
                await trio.sleep(30)
            await stream.send_all(b"5\r\nab")  # a chunk cut short, then the close
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        profile = parse_profile(f'[run]\nrequests = 2\n[run.timeouts]\nidle_s = 600\n[load]\nconcurrency = 1\n'
                                f'[target]\nurl = "{url}"\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n',
                                "p.toml", env={})
        rec = Recorder(["chat-m"])
        # the hang costs _AFTER_END_S per stream, not idle_s: 2 s here, 1,200 s if the
        # idle limit applied (the bound leaves a busy machine 60 times the room)
        with trio.fail_after(120):
            await LoadRunner(profile, url, rec, Recorder(["chat-m"])).run()
        nursery.cancel_scope.cancel()
    snap = rec.snapshot()
    assert snap.counter(ALL, outcome) == 2
    if detail:
        assert snap.counter(ALL, detail) == 2


@pytest.mark.parametrize("engine", ["process", "workers"])
def test_run_signal_while_the_folder_is_made_still_writes_a_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    # The CLI's handler raises Interrupted; a SIGTERM that lands while the results
    # folder is being made (after mkdir) used to escape before the try that owes the
    # folder its summary.json: an empty folder and no summary.
    import hopbench.driver._single as run_mod
    import hopbench.driver._workers as workers_mod
    mod = run_mod if engine == "process" else workers_mod
    real = mod.ResultsWriter

    class SignalledWriter(real):  # type: ignore[misc, valid-type]
        def __init__(self, out: Path) -> None:
            super().__init__(out)
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: inside the hold

    monkeypatch.setattr(mod, "ResultsWriter", SignalledWriter)
    _assert_sigterm_at_start_up_leaves_a_summary(tmp_path, engine)


def _assert_sigterm_at_start_up_leaves_a_summary(tmp_path: Path, engine: str) -> None:
    """Run a 30 s profile (one process or 2 workers) under a SIGTERM handler that raises
    Interrupted, as the CLI's does; the test has arranged a SIGTERM during start-up: the
    folder must hold a summary saying so, with no stream started."""
    from hopbench.driver._single import Interrupted
    from hopbench.driver._workers import run_profile_workers

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    old = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        text = ('[run]\nduration_s = 30\n' + ('workers = 2\n' if engine == "workers" else '')
                + '[load]\nconcurrency = 2\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
        profile = parse_profile(text, tmp_path / "p.toml")
        out = tmp_path / "o"
        run = run_profile if engine == "process" else run_profile_workers
        outcome = run(profile, out_dir=out)
    finally:
        signal.signal(signal.SIGTERM, old)
    s = read_summary(out)
    assert s["complete"] is False and s["interrupted_by"] == "SIGTERM"
    assert outcome.summary["headline"]["started"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["process", "workers"])
def test_run_signal_as_the_folder_hold_ends_still_writes_a_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    # A SIGTERM handled just after the folder's signal hold ends (seen under load in
    # test_run_cli_signal_during_startup_still_writes_a_summary): the CLI's handler was
    # back and raised Interrupted before the try that owes the folder its summary.json.
    from contextlib import contextmanager
    from typing import Any, Iterator

    import hopbench.driver._single as run_mod
    import hopbench.driver._workers as workers_mod
    from hopbench.driver import _common
    mod = run_mod if engine == "process" else workers_mod
    real_hold = _common.hold_signals
    fired: list[bool] = []

    @contextmanager
    def hold_then_signal(**kw: Any) -> Iterator[list[str]]:
        with real_hold(**kw) as got:
            yield got
        if kw.get("announce") is False and not fired:  # the folder's hold, not the final writes'
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)  # handled here, at once: the hold has ended

    monkeypatch.setattr(mod, "hold_signals", hold_then_signal)
    _assert_sigterm_at_start_up_leaves_a_summary(tmp_path, engine)
    assert fired


@pytest.mark.slow
def test_run_checkpoint_histograms_agree_with_its_counters(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """summary.json checkpoints (what a SIGKILL leaves) hold counters and histograms of
    one instant: each checkpoint's e2e count equals its ``completed`` counter."""
    import hopbench.driver._single as run_mod
    from hopbench.driver._results import ResultsWriter

    seen: list[dict] = []
    update = ResultsWriter.update

    def spy(self: ResultsWriter, meta: dict, total: object, complete: bool = False) -> dict:
        summary = update(self, meta, total, complete)  # type: ignore[arg-type]
        seen.append(summary)
        return summary

    monkeypatch.setattr(run_mod, "CHECKPOINT_S", 0.0)  # a checkpoint at every interval
    monkeypatch.setattr(ResultsWriter, "update", spy)
    text = """
[run]
duration_s = 2
interval_s = 0.2
[load]
mode = "rate"
rate_rps = 60
[emulator]
ttft_ms = 20
tokens_per_s = 400
output_tokens = 8
[[scenario]]
protocol = "chat"
model = "m"
"""
    run_profile(parse_profile(text, tmp_path / "t.toml"), out_dir=tmp_path / "o")
    checkpoints = [s for s in seen if (s["scopes"]["all"]["counters"].get("completed") or 0) > 0]
    assert checkpoints
    for s in checkpoints:
        scope = s["scopes"]["all"]
        e2e = scope["metrics"]["e2e"]
        assert e2e["count"] + e2e["out_of_range"] == scope["counters"]["completed"]
