"""Every failure is loud and every result survives (the hostile-server suite).

The servers are the project's own (tests/_hostile.py), on 127.0.0.1, each test
bounded by a trio deadline or a subprocess timeout; no wall-clock thresholds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

from hopbench._errors import ProfileError
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import ALL, Recorder
from hopbench.driver._results import read_summary
from hopbench.engine._runner import LoadRunner
from hopbench.engine._watch import UNREACHABLE_AFTER

import _hostile

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "_hostile.py"


def _profile_text(url: str, extra_run: str = "requests = 10", concurrency: int = 2, target: str = "") -> str:
    return (f"[run]\n{extra_run}\n[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = {concurrency}\n"
            f'[target]\nurl = "{url}"\n{target}\n[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\n')


async def _run_against(mode: str, text_of_url, *, env: dict[str, str] | None = None,
                       ssl_context=None, lines: list | None = None) -> tuple[LoadRunner, Recorder]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(_hostile.serve, mode, ssl_context=ssl_context))
        scheme = "https" if ssl_context is not None else "http"
        url = f"{scheme}://127.0.0.1:{port}"
        profile = parse_profile(text_of_url(url), "p.toml", env=env or {})
        rec = Recorder(["chat"])
        runner = LoadRunner(profile, url, rec, Recorder(["chat"]), env=env or {},
                            on_stream=lines.append if lines is not None else None)
        with trio.fail_after(30):
            await runner.run()
        nursery.cancel_scope.cancel()
    return runner, rec


@pytest.fixture
def hostile_server():
    procs: list[subprocess.Popen[str]] = []

    def start(mode: str, *tls: str) -> int:
        proc = subprocess.Popen([sys.executable, str(HOSTILE), mode, *tls], stdout=subprocess.PIPE,
                                text=True, cwd=ROOT)
        procs.append(proc)
        assert proc.stdout is not None
        return int(proc.stdout.readline())

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=10)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "hopbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, **(env or {})))


# -- 2: a run where nothing succeeds ---------------------------------------------------


@pytest.mark.slow
def test_failures_all_errors_warn_headline_and_exit_4(tmp_path: Path, hostile_server) -> None:
    port = hostile_server("all_501")
    prof = tmp_path / "p.toml"
    prof.write_text(_profile_text(f"http://127.0.0.1:{port}", "requests = 12"))
    proc = _cli("run", str(prof), "--out", str(tmp_path / "o"), "--no-progress")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err
    assert "no stream completed" in err
    s = read_summary(tmp_path / "o")
    assert s["headline"]["error_rate"] == 1.0 and s["headline"]["completed"] == 0
    assert any(w.startswith("nothing completed: none of the 12 streams") and "http_error.501 12" in w
               for w in s["warnings"])
    assert "Error code: 501" in s["error_samples"]["http_error.501"][0]
    assert "no warnings" not in out and "nothing completed" in out
    flat = " ".join(out.split())  # the terminal wraps at 80 columns
    assert "0 of 12 streams completed" in flat and "completed/s" in flat and "error rate 100.0%" in flat
    html = (tmp_path / "o" / "report.html").read_text()
    assert "nothing completed" in html and "error rate" in html


def test_failures_error_rate_threshold_is_documented_and_applied() -> None:
    from hopbench.driver._warnings import outcome_warnings
    from hopbench.measure._outcomes import ERROR_RATE_WARN
    from hopbench.engine._runner import RunStats

    def warns(**counters: int) -> list[str]:
        return outcome_warnings(counters, RunStats())

    n = 1000
    bad = int(n * ERROR_RATE_WARN)
    assert warns(started=n, completed=n - bad, http_error=bad) == []
    assert warns(started=n, completed=n - bad - 1, timeout=bad + 1)[0].startswith("error rate")
    assert warns(started=n, completed=n - bad - 1, cancelled=bad + 1)[0].startswith("cancelled at the stop")
    assert warns(started=3, cancelled=3)[0].startswith("nothing completed")
    # all cancelled by the stop: the stop is named, not the target
    stopped = warns(started=3, cancelled=3)[0]
    assert stopped.endswith("the stop cancelled them (still running after run.grace_s)")
    twice = RunStats()
    twice.cancelled_by = "SIGINT"
    assert outcome_warnings({"started": 3, "cancelled": 3}, twice)[0].endswith(
        "the stop cancelled them (cancelled at once by SIGINT, before run.grace_s ended)")
    broken = warns(started=3, cancelled=2, http_error=1)[0]  # the target had its part
    assert "error_samples" not in broken  # none kept: never point at an empty section (issue 39)
    assert broken.endswith("the target sent no error text with them")
    said = RunStats()
    said.error_samples = {"http_error.500": ["boom"]}
    assert outcome_warnings({"started": 3, "cancelled": 2, "http_error": 1}, said)[0].endswith(
        "see error_samples in summary.json for what the target said")
    doc = (ROOT / "docs" / "results" / "counters.md").read_text()
    assert f"{ERROR_RATE_WARN:.0%}" in doc and "nothing completed" in doc


# -- 1: a target that dies mid-run -----------------------------------------------------


@pytest.mark.slow
def test_failures_external_target_dies_mid_run_exit_4(tmp_path: Path, hostile_server) -> None:
    port = hostile_server("die_after:30")
    prof = tmp_path / "p.toml"
    prof.write_text(_profile_text(f"http://127.0.0.1:{port}", "duration_s = 60", concurrency=4))
    proc = _cli("run", str(prof), "--out", str(tmp_path / "o"), "--quiet")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err
    assert "target lost: it answered before" in err
    s = read_summary(tmp_path / "o")
    assert s["complete"] is False and s["interrupted_by"].startswith("target lost")
    assert s["warnings"][0].startswith("target lost")
    c = s["scopes"]["all"]["counters"]
    assert c["completed"] >= 1
    # stopped at the first run of failures, not a hot loop until the 60 s end (thousands before);
    # streams cut as it died may restart the count of failures in a row, once each
    assert c.get("connect_error", 0) <= 5 * (UNREACHABLE_AFTER + 4)


def test_failures_embedded_emulator_killed_mid_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.driver import _single as _run
    from hopbench.emulator import EmbeddedEmulator

    seen: list[EmbeddedEmulator] = []
    original = EmbeddedEmulator.__enter__

    def enter(self: EmbeddedEmulator) -> EmbeddedEmulator:
        seen.append(original(self))
        return seen[-1]

    monkeypatch.setattr(EmbeddedEmulator, "__enter__", enter)
    killed: list[int] = []

    def progress(iv: object, line: dict) -> None:
        if not killed:  # after the first interval: kill -9 the emulator
            killed.append(seen[0].pid or 0)
            os.kill(seen[0].pid or 0, signal.SIGKILL)

    profile = parse_profile('[run]\nduration_s = 60\ninterval_s = 0.5\n[load]\nconcurrency = 4\n'
                            '[emulator]\nttft_ms = 5\noutput_tokens = 3\n[[scenario]]\nprotocol = "chat"\n'
                            'model = "m"\n', tmp_path / "e.toml")
    outcome = _run.run_profile(profile, out_dir=tmp_path / "o", progress=progress)
    s = outcome.summary
    assert killed and not outcome.complete
    assert s["interrupted_by"].startswith("target lost: the embedded emulator exited (killed by SIGKILL)")
    assert s["duration_s"] < 60
    c = s["scopes"]["all"]["counters"]
    assert c.get("connect_error", 0) <= 5 * (UNREACHABLE_AFTER + 4)  # about 6,000 before


# -- 9: counter names chosen by the server -----------------------------------------------


async def test_failures_echoed_key_never_reaches_counters_or_samples() -> None:
    secret = "sk-hopbench-" + "7" * 30
    env = {"HB_KEY": secret}
    lines: list[dict] = []
    runner, rec = await _run_against(
        "echo_key", lambda url: _profile_text(url, "requests = 6", target='api_key_env = "HB_KEY"'),
        env=env, lines=lines)
    snap = rec.snapshot()
    dump = json.dumps({"c": snap.scopes[ALL].counters, "s": runner.stats.error_samples, "l": lines})
    assert secret not in dump
    assert snap.counter(ALL, "http_error_code.redacted") == 6
    assert "[redacted]" in runner.stats.error_samples["http_error.401"][0]


async def test_failures_key_across_the_error_bodys_cut_never_leaks_in_part() -> None:
    # the key starts 1,011 bytes into the body: a cut at 1,024 bytes kept its first 13
    # characters, which the whitespace collapse brought into the sample
    secret = "sk-hopbench-" + "5" * 30
    runner, rec = await _run_against(
        "echo_key_padded",
        lambda url: _profile_text(url, "requests = 2", target='api_key_env = "HB_KEY"\nauth = "x-api-key"'),
        env={"HB_KEY": secret})
    sample = runner.stats.error_samples["http_error.401"][0]
    assert secret[:13] not in sample and "[redacted]" in sample, sample


async def test_failures_encoded_echo_of_key_never_reaches_counters_or_samples() -> None:
    # breaker: a key echoed JSON-escaped ("sk-proj\\/Ab12...") or percent-encoded
    # was kept verbatim in error_samples and counted as http_error_code.sk-proj_2FAb12...
    secret = "sk-proj/Ab12+Cd34/EfGh-" + "9" * 20
    env = {"HB_KEY": secret}
    lines: list[dict] = []
    runner, rec = await _run_against(
        "echo_key_encoded",
        lambda url: _profile_text(url, "requests = 4", target='api_key_env = "HB_KEY"\nauth = "x-api-key"'),
        env=env, lines=lines)
    snap = rec.snapshot()
    dump = json.dumps({"c": snap.scopes[ALL].counters, "s": runner.stats.error_samples, "l": lines})
    for spelling in (secret, secret.replace("/", "\\/"), quote(secret, safe="")):
        assert spelling not in dump
        assert json.dumps(spelling)[1:-1] not in dump  # as json.dumps wrote it here
    assert "Ab12" not in dump and "Cd34" not in dump
    assert snap.counter(ALL, "http_error_code.redacted") == 4
    assert "Incorrect API key provided: [redacted]" in runner.stats.error_samples["http_error.401"][0]


_ECHOED = "sk-proj/Ab12+Cd34/EfGh"


@pytest.mark.parametrize(("secret", "echo"), [
    (_ECHOED, _ECHOED),
    (_ECHOED, "sk-proj\\/Ab12+Cd34\\/EfGh"),  # JSON with "/" escaped (PHP, some Java encoders)
    (_ECHOED, "sk-proj\\\\\\/Ab12+Cd34\\\\\\/EfGh"),  # that JSON quoted inside another JSON string
    (_ECHOED, "sk-proj%2FAb12%2BCd34%2FEfGh"),  # quote(safe="")
    (_ECHOED, "sk-proj%2fAb12%2bCd34%2fEfGh"),  # the same, lower-case hex
    (_ECHOED, "sk-proj/Ab12%2BCd34/EfGh"),  # quote() keeping "/", as in a URL path
    ('k"ey\\9876', 'k\\"ey\\\\9876'),  # json.dumps escapes " and \\
    ("key with space+1", "key+with+space%2B1"),  # quote_plus (a form body)
    ("caf\u00e9-key-42", "caf\\u00e9-key-42"),  # json.dumps: non-ASCII as \\uXXXX
    ("caf\u00e9-key-42", "caf\\u00E9-key-42"),  # upper-case hex (Jackson)
    ("caf\u00e9-key-42", "caf%C3%A9-key-42"),  # percent-encoded UTF-8
    ("a<b>&c-key", "a\\u003cb\\u003e\\u0026c-key"),  # Go's encoding/json (HTML-safe)
    ("Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),  # the credential without its scheme
    ("Basic dXNlcjpwYXNzd29yZA==", "user:password"),  # Basic auth, decoded
    ("Basic dXNlcjpwYXNzd29yZA==", "user%3Apassword"),
])
def test_failures_scrubber_redacts_echoed_spellings(secret: str, echo: str) -> None:
    from hopbench.measure._wire_text import CodeNames, ErrorSamples, Scrubber

    scrubber = Scrubber([secret])
    text = f'{{"error":{{"message":"invalid key {echo} (see docs)"}}}}'
    assert scrubber.has_secret(text)
    assert scrubber.scrub(text) == '{"error":{"message":"invalid key [redacted] (see docs)"}}'
    assert CodeNames(scrubber).name(echo) == "redacted"
    samples = ErrorSamples(scrubber)
    samples.add("http_error.401", text)
    assert echo not in json.dumps(samples.samples) and "[redacted]" in samples.samples["http_error.401"][0]


def test_failures_scrubber_leaves_other_text_alone() -> None:
    from hopbench.measure._wire_text import Scrubber, secret_spellings

    scrubber = Scrubber([_ECHOED, "abc", "Basic dXNlcjpwYXNzd29yZA=="])  # "abc": too short to scrub
    text = '{"error":{"message":"rate limited: abc sk-proj Ab12 user password %2F \\/"}}'
    assert not scrubber.has_secret(text) and scrubber.scrub(text) == text
    assert Scrubber([]).scrub(text) == text and not Scrubber(["abc"]).has_secret(text)
    # longest spelling first: the double-escaped echo leaves no backslash of it behind
    doubled = "x sk-proj\\\\\\/Ab12+Cd34\\\\\\/EfGh y"
    assert scrubber.scrub(doubled) == "x [redacted] y"
    # base64 of the key itself is not a spelling (see secret_spellings: it would not match
    # the key inside a longer base64 text, and Basic auth is covered decoded)
    assert all("c2stcHJvai" not in s for s in secret_spellings(_ECHOED))


async def test_failures_unique_codes_are_capped_and_folded() -> None:
    from hopbench.measure._wire_text import MAX_CODES

    n = MAX_CODES + 20
    runner, rec = await _run_against("unique_code", lambda url: _profile_text(
        url, f"requests = {n}\nstop_on_failing_target = 0"))  # all fail: the failing-target stop off
    counters = rec.snapshot().scopes[ALL].counters
    codes = [k for k in counters if k.startswith("http_error_code.")]
    assert len(codes) == MAX_CODES + 1  # the first MAX_CODES by name, then "other"
    assert counters["http_error_code.other"] == n - MAX_CODES == runner.stats.codes_folded


def test_failures_wire_codes_bounded_in_length_and_charset() -> None:
    from hopbench.measure._wire_text import CODE_MAX_CHARS, CodeNames, Scrubber

    names = CodeNames(Scrubber(["topsecret"]))
    assert names.name("x" * 5000) == "x" * CODE_MAX_CHARS
    assert names.name("a/b c\n.\x00é") == "a_b_c____"
    assert names.name("key=topsecret") == "redacted"
    assert names.name("Bearer abcdef") == "redacted"


# -- 3: wrapped exceptions (TLS) -----------------------------------------------------------


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


async def test_failures_self_signed_tls_keeps_the_reason_and_hint(self_signed: tuple[str, str]) -> None:
    ctx = _hostile.tls_context(*self_signed)
    runner, rec = await _run_against("ok", lambda url: _profile_text(url, "duration_s = 20"), ssl_context=ctx)
    why = runner.stats.interrupted_by or ""
    assert why.startswith("target unreachable")
    assert "CERTIFICATE_VERIFY_FAILED" in why and "failed: )" not in why
    assert "set target.verify_tls = false" in why
    assert rec.snapshot().counter(ALL, "connect_error.tls") >= UNREACHABLE_AFTER


async def test_failures_self_signed_tls_with_verify_off_completes(self_signed: tuple[str, str]) -> None:
    ctx = _hostile.tls_context(*self_signed)
    runner, rec = await _run_against(
        "ok", lambda url: _profile_text(url, "requests = 4", target="verify_tls = false"), ssl_context=ctx)
    assert rec.snapshot().counter(ALL, "completed") == 4


def test_failures_describe_exception_walks_the_chain() -> None:
    from hopbench.measure._wire_text import describe_exception

    try:
        try:
            raise OSError(24, "Too many open files")
        except OSError as inner:
            raise RuntimeError("") from inner
    except RuntimeError as exc:
        text = describe_exception(exc)
    assert text == "RuntimeError <- OSError: [Errno 24] Too many open files"


# -- 10: a response that started is a broken stream ----------------------------------------


async def test_failures_bad_chunk_in_the_head_read_is_a_broken_stream() -> None:
    runner, rec = await _run_against("bad_chunk", lambda url: _profile_text(url, "requests = 4"))
    snap = rec.snapshot()
    assert snap.counter(ALL, "truncated.malformed") == 4
    assert snap.counter(ALL, "connect_error") == 0


async def test_failures_trickle_completes() -> None:
    runner, rec = await _run_against("trickle", lambda url: _profile_text(url, "requests = 2"))
    assert rec.snapshot().counter(ALL, "completed") == 2


async def test_failures_wrong_content_type_is_sampled_for_the_warning() -> None:
    # "nothing completed ... see error_samples" must find something there: a 200
    # with an HTML page breaks every stream, and the sample says why
    runner, rec = await _run_against("html_200", lambda url: _profile_text(url, "requests = 3"))
    snap = rec.snapshot()
    assert snap.counter(ALL, "anomaly.wrong_content_type") == 3
    from hopbench.driver._warnings import outcome_warnings
    from hopbench.engine._runner import RunStats

    warning = outcome_warnings(snap.scopes[ALL].counters, RunStats())[0]
    assert warning.startswith("nothing completed") and "3 responses were not text/event-stream" in warning
    samples = runner.stats.error_samples
    assert list(samples) == ["truncated.closed"]
    assert "Content-Type 'text/html'" in samples["truncated.closed"][0]
    assert "text/event-stream" in samples["truncated.closed"][0]


@pytest.mark.slow
def test_failures_completed_without_output_warns_and_fails_the_gate(tmp_path: Path, hostile_server) -> None:
    # every stream "completes" ([DONE]) but none carries output: nothing was measured,
    # so the run says so and no gate passes it, whatever its budgets (docs/gate.md)
    port = hostile_server("done_only")
    prof = tmp_path / "p.toml"
    prof.write_text(_profile_text(f"http://127.0.0.1:{port}", "requests = 4")
                    + '[gate]\n"error_rate" = "<= 1%"\n')
    proc = _cli("run", str(prof), "--out", str(tmp_path / "o"))
    out, err = proc.communicate(timeout=120)
    s = read_summary(tmp_path / "o")
    assert s["headline"]["completed"] == 4
    assert any(w.startswith("no output: ") for w in s["warnings"]), s["warnings"]
    # the run itself fails (exit 4, as for nothing completed), before its gate's breach (1)
    assert proc.returncode == 4, (out, err)
    assert "run.output_measured" in out and "no completed stream carried output" in err
    gate = _cli("gate", str(tmp_path / "o"))
    gout, _ = gate.communicate(timeout=60)
    assert gate.returncode == 1 and re.search(r"FAIL +run.output_measured", gout)


@pytest.mark.slow
def test_failures_run_that_measured_nothing_exits_4(tmp_path: Path) -> None:
    # the only arrival falls in the warm-up: nothing was measured, which is never a pass
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nduration_s = 1\nwarmup_s = 0.9\n[load]\nmode = "rate"\nrate_rps = 0.1\n'
                    'arrival = "constant"\n[target]\nurl = "embedded"\n[emulator]\nttft_ms = 5\n'
                    'output_tokens = 3\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
    proc = _cli("run", str(prof), "--out", str(tmp_path / "o"), "--no-progress")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, (out, err)
    assert "no stream was measured" in err


# -- 7: file descriptors ---------------------------------------------------------------------


@pytest.mark.slow
def test_failures_fd_exhaustion_is_its_own_outcome(tmp_path: Path, hostile_server) -> None:
    # hopbench raises its soft limit to what the load needs (hopbench/_limits.py) and refuses a
    # closed loop the hard limit cannot hold, so exhaustion needs an open loop under a hard
    # limit: its max_in_flight is only warned about before the load, then streams past the
    # limit fail as connect_error.fd_limit
    port = hostile_server("trickle")
    prof = tmp_path / "p.toml"
    prof.write_text(_profile_text(f"http://127.0.0.1:{port}", "requests = 300\nstream_log = false")
                    .replace("concurrency = 2\n", 'mode = "rate"\nrate_rps = 2000\nmax_in_flight = 120\n'))
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))\n"
            "from hopbench.cli import main\n"
            f"sys.exit(main(['run', {str(prof)!r}, '--out', {str(tmp_path / 'o')!r}, '--quiet', '--no-report']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
    s = read_summary(tmp_path / "o")
    c = s["scopes"]["all"]["counters"]
    assert c.get("connect_error.fd_limit", 0) >= 1, (proc.stderr, c)
    assert not (s["interrupted_by"] or "").startswith("target unreachable")
    assert any("file descriptors (limit: 96 per process" in w and "ulimit -n" in w for w in s["warnings"])
    assert "[load].max_in_flight needs about 184 open files" in proc.stderr, proc.stderr


# -- 4: signals ---------------------------------------------------------------------------------


def test_failures_signals_during_final_writes_are_held() -> None:
    from hopbench.driver._common import hold_signals

    with hold_signals() as got:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):  # the handler runs between bytecodes of the main thread
            if got:
                break
            time.sleep(0.01)
    assert got == ["SIGINT"]


def _sigint_twice(proc: subprocess.Popen[str], out: Path, *, settle_s: float) -> str:
    """Once a first interval is written (the load and its signal handling run), wait
    ``settle_s``, send SIGINT, 1 s later SIGINT again; return the run's stderr."""
    try:
        deadline = time.monotonic() + 60
        timeline = out / "timeline.jsonl"
        while time.monotonic() < deadline and not (timeline.exists() and timeline.stat().st_size):
            time.sleep(0.1)
        time.sleep(settle_s)
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return str(err)


@pytest.mark.slow
def test_failures_each_sigint_says_what_happens(tmp_path: Path) -> None:
    prof = tmp_path / "long.toml"
    prof.write_text('[run]\nduration_s = 60\ngrace_s = 30\n[load]\nconcurrency = 4\n[emulator]\n'
                    'ttft_ms = 20\ntokens_per_s = 5\noutput_tokens = 400\n[[scenario]]\nprotocol = "chat"\n'
                    'model = "m"\n')
    out = tmp_path / "o"
    proc = _cli("run", str(prof), "--out", str(out), "--no-progress")
    err = _sigint_twice(proc, out, settle_s=0.5)
    assert proc.returncode == 130, err
    assert "SIGINT: stopping: no new streams; the 4 in flight get 30 s to finish" in err
    assert "SIGINT again: cancelling the streams in flight" in err
    s = read_summary(out)
    assert s["interrupted_by"] == "SIGINT" and s["scopes"]["all"]["counters"]["cancelled"] == 4


@pytest.mark.slow
def test_failures_second_sigint_is_named_as_what_cancelled_the_streams(tmp_path: Path) -> None:
    """Streams cut by a second SIGINT were not "still running after run.grace_s": the
    interruption-rate warning and the notice name the second signal."""
    prof = tmp_path / "mixed.toml"
    # half the streams finish in ~50 ms, half would take 80 s: the users end up on slow ones
    prof.write_text('[run]\nduration_s = 60\ngrace_s = 30\n[load]\nconcurrency = 4\n[emulator]\n'
                    'ttft_ms = 20\ntokens_per_s = 200\noutput_tokens = 5\n'
                    '[emulator.models.slow]\ntokens_per_s = 5\noutput_tokens = 400\n'
                    '[[scenario]]\nname = "fast"\nprotocol = "chat"\nmodel = "fast"\n'
                    '[[scenario]]\nname = "slow"\nprotocol = "chat"\nmodel = "slow"\n')
    out = tmp_path / "o"
    proc = _cli("run", str(prof), "--out", str(out), "--no-progress", "--no-report")
    err = _sigint_twice(proc, out, settle_s=1.0)
    assert proc.returncode == 130, err
    assert "without waiting for run.grace_s" in err
    s = read_summary(out)
    c = s["scopes"]["all"]["counters"]
    assert c["cancelled"] >= 1 and c["completed"] >= 1, c
    rate = [w for w in s["warnings"] if w.startswith("cancelled at the stop")]
    if c["cancelled"] / c["started"] > 0.05:  # 4 slow of a handful: always, in practice
        assert rate and "cancelled at once by a second SIGINT, before run.grace_s ended" in rate[0], rate
    assert not any("still running after run.grace_s" in w for w in s["warnings"])


def test_failures_interruption_warning_names_what_cancelled() -> None:
    from hopbench.driver._warnings import outcome_warnings
    from hopbench.engine._runner import RunStats

    counters = {"started": 10, "completed": 5, "cancelled": 5}
    assert "(still running after run.grace_s)" in outcome_warnings(counters, RunStats(cancelled_by="run.grace_s"))[0]
    second = outcome_warnings(counters, RunStats(cancelled_by="a second SIGTERM"))[0]
    assert "cancelled at once by a second SIGTERM, before run.grace_s ended" in second
    assert "still running after" not in second


# -- 5: a full disk ------------------------------------------------------------------------------


def test_failures_full_disk_names_the_file_and_leaves_no_temp(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from hopbench.driver import _results
    from hopbench._errors import ResultsError
    from hopbench.measure._recorder import Recorder as Rec

    rec = Rec(["chat"])
    rec.record("chat", "ttft", 5_000_000)
    rec.incr("chat", "started")
    writer = _results.ResultsWriter(tmp_path / "r")
    writer.start({"started_at_unix_s": 1.0})
    real_open = open

    def full_open(path, mode="r", *a, **kw):  # type: ignore[no-untyped-def]
        if "w" in mode and str(path).endswith(".hgrm.tmp"):
            f = real_open(path, mode, *a, **kw)
            f.close()
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr(_results, "open", full_open, raising=False)
    with pytest.raises(ResultsError) as info:
        writer.finish({"started_at_unix_s": 1.0}, rec.snapshot(), None, complete=True)
    msg = str(info.value)
    assert ".hgrm: No space left on device (" in msg and "free on its file system" in msg
    assert read_summary(tmp_path / "r")["scopes"]["chat"]["counters"]["started"] == 1  # summary first
    assert not [p for p in (tmp_path / "r").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_failures_results_lost_mid_run_exit_3(tmp_path: Path) -> None:
    """A file-size limit (as a full disk) while the run writes: exit 3, a message naming the file."""
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nrequests = 40\n[load]\nconcurrency = 4\n[emulator]\nttft_ms = 1\n'
                    'output_tokens = 2\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (6000, resource.RLIM_INFINITY))\n"
            "from hopbench.cli import main\n"
            f"sys.exit(main(['run', {str(prof)!r}, '--out', {str(tmp_path / 'o')!r}, '--quiet']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 3, proc.stderr
    assert "cannot write" in proc.stderr and "free on its file system" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not [p for p in (tmp_path / "o").iterdir() if p.name.endswith(".tmp")]


# -- 6 and 8: what run refuses, validate refuses -------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("key", "value", "line"), [
    ("scenario_name", "s" * 250, 9), ("scenario_name", "a/b", 9), ("scenario_name", ".hidden", 9),
    ("scenario_name", "a\\u0000b", 9), ("scenario_name", "a,b", 9), ("run_name", "r" * 5000, 2),
    ("url", "http://[::1", 7), ("url", "http://a b:80", 7),
])
def test_failures_validate_refuses_what_run_would_break_on(tmp_path: Path, key: str, value: str,
                                                           line: int) -> None:
    run_name = value if key == "run_name" else "ok"
    url = value if key == "url" else "http://127.0.0.1:9"
    scen = value if key == "scenario_name" else "chat"
    text = (f'[run]\nname = "{run_name}"\nrequests = 1\n[load]\nconcurrency = 1\n[target]\nurl = "{url}"\n'
            f'[[scenario]]\nname = "{scen}"\nprotocol = "chat"\nmodel = "m"\n')
    prof = tmp_path / "p.toml"
    prof.write_text(text)
    with pytest.raises(ProfileError) as info:
        parse_profile(text, prof, env={})
    assert f"{prof}:{line}:" in str(info.value) and len(str(info.value)) < 400
    proc = _cli("validate", str(prof))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err


def test_failures_default_scenario_name_from_a_model_with_slashes_is_usable() -> None:
    p = parse_profile('[run]\nrequests = 1\n[target]\nurl = "http://127.0.0.1:9"\n[load]\nconcurrency = 1\n'
                      '[[scenario]]\nprotocol = "chat"\nmodel = "openai/gpt-4o"\n', "p.toml", env={})
    assert p.scenarios[0].name == "chat-openai_gpt-4o"


@pytest.mark.parametrize("args", [["--target-url", "http://[::1"], ["--workers", "9999"], ["--workers", "0"]])
def test_failures_cli_overrides_are_validated_like_the_profile(tmp_path: Path, args: list[str]) -> None:
    proc = _cli("run", str(ROOT / "profiles" / "smoke.toml"), "--out", str(tmp_path / "o"), *args)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert f"{args[0]}: expected" in err
    assert not (tmp_path / "o").exists()


# -- 11: compare the resolved profile ------------------------------------------------------------


def test_failures_compare_resolved_load_shape() -> None:
    from hopbench.views._load_shape import shape_differences
    from hopbench.driver._common import base_meta

    base = '[run]\nrequests = 1\n[target]\nurl = "http://127.0.0.1:9"\n[load]\n{mode}concurrency = 4\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n'
    a = parse_profile(base.format(mode='mode = "concurrency"\n'), "a.toml", env={})
    b = parse_profile(base.format(mode=""), "b.toml", env={})
    assert shape_differences(base_meta(a), base_meta(b)) == []
    # old summaries without resolved_load: the text with defaults applied
    sa, sb = base_meta(a), base_meta(b)
    del sa["resolved_load"], sb["resolved_load"]
    assert shape_differences(sa, sb) == []
    c = parse_profile(base.format(mode="").replace("= 4", "= 5"), "c.toml", env={})
    assert shape_differences(base_meta(a), base_meta(c)) == ["load.concurrency: 4 vs 5"]


# -- 12: warnings once, no_usage only with a response, saturation says what was measured -----------


def test_failures_terminal_warnings_are_not_repeated() -> None:
    from rich.console import Console

    from hopbench.views._summary_table import render_summary

    summary = {"complete": True, "saturated": True,
               "warnings": ["load generator saturated: event-loop lag p99 40.0 ms (> 25 ms) with the client "
                            "at 10% of one core; latencies include client-side delay; other processes",
                            "proxy buffering suspected: 9 of 10 streams arrived as one burst"],
               "scopes": {"all": {"counters": {"started": 10, "completed": 10,
                                               "proxy_buffering_suspected": 9}}}}
    console = Console(record=True, width=100)
    render_summary(summary, console)
    text = console.export_text()
    assert text.count("proxy buffering suspected") == 1
    assert text.lower().count("saturated") == 1
    console = Console(record=True, width=100)
    render_summary({"complete": False, "interrupted_by": "SIGINT",
                    "warnings": ["run interrupted (SIGINT): results are partial (complete: false)"],
                    "scopes": {}}, console)
    assert console.export_text().lower().count("interrupted") == 1


def test_failures_saturation_says_what_was_measured() -> None:
    from hopbench._clock import NS_PER_MS
    from hopbench.driver._judge import analyse
    from hopbench.engine._runner import RunStats

    profile = parse_profile('[target]\nurl = "http://127.0.0.1:9"\n[run]\nduration_s = 5\n[load]\n'
                            'concurrency = 1\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', "p.toml", env={})
    rec = Recorder(["chat-m"])
    for _ in range(200):
        rec.record_global("loop_lag", 40 * NS_PER_MS)
    stats = RunStats(stop_ns=5_000_000_000, cpu_fractions=[0.1] * 5)
    sat, warnings, _ = analyse(profile, stats, rec.snapshot())
    w = next(x for x in warnings if x.startswith("load generator saturated"))
    assert sat and "loop lag p99 40.0 ms" in w and "10% of one core" in w
    assert "other processes on this machine" in w and "lower the load" not in w


async def test_failures_no_usage_only_for_streams_that_got_a_response() -> None:
    runner, rec = await _run_against(
        "silent", lambda url: _profile_text(url, "requests = 2").replace("idle_s = 10", "first_byte_s = 0.3"))
    snap = rec.snapshot()
    assert snap.counter(ALL, "timeout.first_byte") == 2
    assert snap.counter(ALL, "no_usage") == 0


def test_failures_interrupted_write_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.driver import _results

    writer = _results.ResultsWriter(tmp_path / "r")

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_results.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        writer.start({"started_at_unix_s": 1.0})
    assert not [p.name for p in (tmp_path / "r").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_failures_embedded_emulator_killed_mid_run_with_workers(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from hopbench.driver._workers import run_profile_workers
    from hopbench.emulator import EmbeddedEmulator

    seen: list[EmbeddedEmulator] = []
    original = EmbeddedEmulator.__enter__

    def enter(self: EmbeddedEmulator) -> EmbeddedEmulator:
        seen.append(original(self))
        return seen[-1]

    monkeypatch.setattr(EmbeddedEmulator, "__enter__", enter)
    killed: list[int] = []

    def on_line(text: str) -> None:
        if not killed:
            killed.append(seen[0].pid or 0)
            os.kill(seen[0].pid or 0, signal.SIGKILL)

    profile = parse_profile('[run]\nduration_s = 60\ninterval_s = 0.5\nworkers = 2\n[load]\nconcurrency = 4\n'
                            '[emulator]\nttft_ms = 5\noutput_tokens = 3\n[[scenario]]\nprotocol = "chat"\n'
                            'model = "m"\n', tmp_path / "w.toml")
    outcome = run_profile_workers(profile, out_dir=tmp_path / "o", on_line=on_line)
    s = outcome.summary
    assert killed and not outcome.complete
    assert s["interrupted_by"].startswith("target lost: the embedded emulator exited (killed by SIGKILL)")
    assert s["warnings"][0] == s["interrupted_by"] and s["duration_s"] < 60


@pytest.mark.slow
def test_failures_one_scenario_that_completes_nothing_warns_and_exits_4(tmp_path: Path) -> None:
    # a wrong path for one protocol (a route the gateway does not have): its streams all
    # fail while the other scenario's complete; the run's error rate alone would hide it
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nrequests = 24\nseed = 1\n[load]\nconcurrency = 2\n'
                    '[target]\nembedded = true\npaths = { messages = "/v1/nope" }\n'
                    '[emulator]\nttft_ms = 1\ntokens_per_s = 2000\nkeepalive_interval_s = 0\n'
                    '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nmax_tokens = 4\nweight = 0.9\n'
                    '[[scenario]]\nname = "claude"\nprotocol = "messages"\nmodel = "c"\nmax_tokens = 4\n'
                    'weight = 0.1\n')
    proc = _cli("run", str(prof), "--out", str(tmp_path / "o"), "--no-progress")
    out, err = proc.communicate(timeout=180)
    s = read_summary(tmp_path / "o")
    claude = s["scopes"]["claude"]["counters"]
    assert claude["started"] > 0 and not claude.get("completed") and s["scopes"]["chat"]["counters"]["completed"]
    warning = [w for w in s["warnings"] if w.startswith("scenario claude: nothing completed: ")]
    assert warning and "http_error.404" in warning[0], s["warnings"]
    assert proc.returncode == 4, (out, err)
    assert "no stream of scenario claude completed" in err
    # red on the terminal, as the run's own "nothing completed"
    assert "scenario claude: nothing completed" in out


def test_failures_a_scenario_cancelled_at_the_stop_is_not_failed_but_one_without_output_is() -> None:
    from hopbench.driver._judge import analyse
    from hopbench.driver._warnings import failed_scenarios, scenario_failed
    from hopbench.engine._runner import RunStats

    # streams longer than the run: all cancelled at the stop is the run's length, not the target
    assert scenario_failed({"started": 5, "cancelled": 5}) == 0
    assert scenario_failed({"started": 5, "cancelled": 2, "http_error": 3}) == 3
    assert scenario_failed({"started": 5, "completed": 1, "http_error": 4}) == 0
    summary = {"scopes": {"a": {"counters": {"started": 3, "completed": 3}},
                          "long": {"counters": {"started": 4, "cancelled": 4}}}}
    assert failed_scenarios(summary, ["a", "long"]) == []
    # one scenario's completed streams carried no output (a model that answers a bare [DONE])
    profile = parse_profile('[run]\nduration_s = 2\n[load]\nconcurrency = 2\n[target]\nurl = "http://127.0.0.1:9"\n'
                            '[[scenario]]\nname = "a"\nprotocol = "chat"\nmodel = "m"\n'
                            '[[scenario]]\nname = "empty"\nprotocol = "chat"\nmodel = "e"\n', "p.toml", env={})
    rec = Recorder(["a", "empty"])
    for scope in ("a", "empty"):
        for _ in range(3):
            rec.incr(scope, "started")
            rec.incr(scope, "completed")
    rec.record("a", "ttft", 5_000_000)
    _, warnings, _ = analyse(profile, RunStats(stop_ns=2 * 10**9), rec.snapshot())
    assert [w for w in warnings if "no output" in w] == [
        "scenario empty: no output: none of its 3 completed streams carried output (no text, reasoning, refusal "
        "or tool event, no output tokens reported): its TTFT, ITL and TPOT have no samples"]
