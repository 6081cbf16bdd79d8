"""``[contract]`` and the check profile (hopbench.config._contract_spec, _check_profile): the HopBase defaults,
and bad input refused with file, line and key before any load is sent."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from _servers import free_port

from hopbench import ProfileError
from hopbench.check import run_check
from hopbench.check._outputs import format_table
from hopbench.config._check_profile import load_check_profile
from hopbench.config._contract_spec import ContractSpec, keepalive_silence_ns

NS_PER_S = 1_000_000_000


def _write(tmp: Path, contract: str = "", *, target_port: int = 18080, listen_port: int = 19100,
           listen_host: str = "127.0.0.1") -> Path:
    p = tmp / "check.toml"
    p.write_text(f'[target]\nurl = "http://127.0.0.1:{target_port}"\n'
                 f'[upstream]\nlisten = "{listen_host}:{listen_port}"\n'
                 '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hi"]\n' + contract,
                 encoding="utf-8")
    return p


def test_contract_spec_hopbase_defaults_without_a_table(tmp_path: Path) -> None:
    profile, c = load_check_profile(_write(tmp_path), env={})
    assert c == ContractSpec() and c.source == "HopBase"
    assert c.keepalive_interval_ns == 10 * NS_PER_S
    assert (c.stall_min_ns, c.stall_max_ns, c.stall_set) == (90 * NS_PER_S, 150 * NS_PER_S, False)
    assert c.disconnect_error_event is True
    # a check profile needs neither [load] nor [run]: the check sends its own script
    assert profile.target.url == "http://127.0.0.1:18080" and profile.upstream.port == 19100


def test_contract_spec_keys_in_their_units(tmp_path: Path) -> None:
    _, c = load_check_profile(_write(tmp_path, "[contract]\nkeepalive_interval_s = 2\nmax_first_chunk_hold_ms = 30\n"
                                               "cancel_within_ms = 250\nstall_min_s = 20\nstall_max_s = 30\n"
                                               "max_attempts = 1\nskip = [\"sdk_parse\"]\n"), env={})
    assert c.keepalive_interval_ns == 2 * NS_PER_S and c.keepalive_tolerance_ns == NS_PER_S // 2
    assert c.max_first_chunk_hold_ns == 30_000_000 and c.cancel_within_ns == 250_000_000
    assert c.stall_set and c.stall_min_ns == 20 * NS_PER_S and c.max_attempts == 1 and c.skip == ("sdk_parse",)
    assert keepalive_silence_ns(c) == 5 * NS_PER_S
    assert c.to_json()["keepalive_interval_s"] == 2.0 and c.source == "profile"


@pytest.mark.parametrize(("contract", "key", "words"), [
    ("keepalive_intervall_s = 2", "contract.keepalive_intervall_s", "did you mean 'keepalive_interval_s'"),
    ("cancel_within_ms = \"1s\"", "contract.cancel_within_ms", "expected a positive number"),
    ("max_attempts = 0", "contract.max_attempts", "expected a positive integer"),
    ("disconnect_error_event = 1", "contract.disconnect_error_event", "expected true or false"),
    ("skip = [\"no_such_check\"]", "contract.skip", "unknown check id 'no_such_check'"),
    ("stall_min_s = 20\nstall_max_s = 10", "contract.stall_max_s", "expected at least stall_min_s"),
    # two intervals and their tolerance (2 x (50 + 12.5) = 125 s) reach the stall window (90 s)
    ("keepalive_interval_s = 50", "contract.keepalive_interval_s", "longer than the silence the check can produce"),
])
def test_contract_spec_bad_input_names_file_line_and_key(tmp_path: Path, contract: str, key: str,
                                                          words: str) -> None:
    path = _write(tmp_path, "[contract]\n" + contract + "\n")
    with pytest.raises(ProfileError) as e:
        load_check_profile(path, env={})
    assert e.value.key == key and words in str(e.value), str(e.value)
    assert e.value.path == str(path) and e.value.line is not None and e.value.line >= 8


def test_contract_spec_listen_equal_to_the_target_is_refused(tmp_path: Path) -> None:
    for host in ("127.0.0.1", "localhost"):
        with pytest.raises(ProfileError) as e:
            load_check_profile(_write(tmp_path, target_port=18080, listen_port=18080, listen_host=host), env={})
        assert e.value.key == "upstream.listen" and "the gateway's own address" in str(e.value)


def test_contract_spec_needs_upstream_listen(tmp_path: Path) -> None:
    p = tmp_path / "check.toml"
    p.write_text('[target]\nurl = "http://127.0.0.1:18080"\n'
                 '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hi"]\n', encoding="utf-8")
    with pytest.raises(ProfileError) as e:
        load_check_profile(p, env={})
    assert e.value.key == "upstream.listen" and "expected [upstream] listen" in str(e.value)


def test_run_check_bad_contract_sends_no_load(tmp_path: Path) -> None:
    """A bad [contract]: ProfileError before anything listens or connects (no load sent)."""
    gateway = socket.socket()
    gateway.bind(("127.0.0.1", 0))
    gateway.listen(8)
    gateway.setblocking(False)
    listen_port = free_port()
    try:
        path = _write(tmp_path, "[contract]\nkeepalive_interval_s = -1\n",
                      target_port=gateway.getsockname()[1], listen_port=listen_port)
        with pytest.raises(ProfileError, match="contract.keepalive_interval_s"):
            run_check(path, tmp_path / "out", env={})
        with pytest.raises(BlockingIOError):  # nobody connected to the gateway
            gateway.accept()
        assert not (tmp_path / "out").exists()
        with socket.socket() as s:  # and the emulator never took its address
            s.bind(("127.0.0.1", listen_port))
    finally:
        gateway.close()


def test_contract_spec_the_example_profile_loads() -> None:
    """profiles/check.toml (the nginx recipe) is a valid check profile under the HopBase contract."""
    repo = Path(__file__).resolve().parents[1]
    profile, c = load_check_profile(repo / "profiles" / "check.toml", env={})
    assert c.source == "HopBase" and [s.protocol for s in profile.scenarios] == ["chat", "responses", "messages"]
    assert profile.target.url == "http://127.0.0.1:8080" and profile.upstream.listen == "127.0.0.1:9100"


def test_check_command_bad_contract_exit_2_names_the_key(tmp_path: Path, hopbench_cli) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, "[contract]\nkeepalive_interval_s = 50\n", target_port=free_port(), listen_port=free_port())
    r = hopbench_cli(["check", str(path), "--out", str(tmp_path / "out")])
    assert r.returncode == 2, r.stderr
    assert f"hopbench check: error: {path}:11: contract.keepalive_interval_s: 50 s is longer than the silence" in r.stderr
    assert not (tmp_path / "out").exists()


def test_check_command_listen_in_use_exit_2(tmp_path: Path, hopbench_cli) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        path = _write(tmp_path, target_port=free_port(), listen_port=busy.getsockname()[1])
        r = hopbench_cli(["check", str(path), "--out", str(tmp_path / "out")])
    assert r.returncode == 2, r.stderr
    assert "hopbench check: error: [upstream] listen: cannot listen on 127.0.0.1:" in r.stderr


# -- a check profile through `hopbench validate` and `hopbench run` (issue 38) ---------------------

def test_contract_spec_validate_holds_a_check_profile_to_checks_rules(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile written for check (no [run], a [contract]) validates, and its contract is held to
    check's rules: a bad key, an unobservable keepalive, listen = target all exit 2 naming the key."""
    from hopbench import _exit
    from hopbench.cli import main

    for good in (_write(tmp_path, "[contract]\nkeepalive_interval_s = 2\n"), _write(tmp_path)):  # HopBase: no table
        assert main(["validate", str(good)]) == _exit.EXIT_OK
        assert f"{good}: ok (a check profile: hopbench check)" in capsys.readouterr().out
    for contract, key in [("[contract]\nkeepalive_intervall_s = 2\n", "contract.keepalive_intervall_s"),
                          ("[contract]\nkeepalive_interval_s = 50\n", "contract.keepalive_interval_s")]:
        assert main(["validate", str(_write(tmp_path, contract))]) == _exit.EXIT_INPUT
        assert f"check.toml:11: {key}:" in capsys.readouterr().err
    same = _write(tmp_path, "[contract]\n", target_port=18080, listen_port=18080)
    assert main(["validate", str(same)]) == _exit.EXIT_INPUT
    assert "upstream.listen: 127.0.0.1:18080 is the gateway's own address" in capsys.readouterr().err


def test_contract_spec_every_profile_reads_the_table_with_checks_rules(tmp_path: Path) -> None:
    """load_profile (run's reader) refuses a bad [contract] as check does, keeps a good one, and
    tells a check-only profile (no [run]) where it belongs."""
    from hopbench.config._profile import load_profile

    body = '[load]\nconcurrency = 1\n[target]\nembedded = true\n[[scenario]]\nprotocol = "chat"\n'
    p = tmp_path / "p.toml"
    p.write_text('[run]\nrequests = 1\n' + body + "[contract]\ncancel_within_ms = \"1s\"\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="contract.cancel_within_ms: expected a positive number") as e:
        load_profile(p, env={})
    assert e.value.line == 10
    p.write_text('[run]\nrequests = 1\n' + body + "[contract]\nmax_attempts = 1\n", encoding="utf-8")
    assert load_profile(p, env={}).contract == ContractSpec(max_attempts=1, source="profile")
    p.write_text(body + "[contract]\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="a profile with \\[contract\\] is for `hopbench check`"):
        load_profile(p, env={})
    # a check profile (no [run], no [load]) run by `hopbench run`: the same, not a missing load key
    check_only = '[target]\nurl = "http://127.0.0.1:9"\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n[contract]\n'
    p.write_text(check_only, encoding="utf-8")
    with pytest.raises(ProfileError, match="a profile with \\[contract\\] is for `hopbench check`"):
        load_profile(p, env={})


def test_contract_spec_run_ignores_the_contract_with_a_note(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from hopbench.cli import main

    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nrequests = 2\n[load]\nconcurrency = 1\n[target]\nembedded = true\n'
                    '[emulator]\nttft_ms = 1\ntokens_per_s = 5000\noutput_tokens = 2\n'
                    '[[scenario]]\nprotocol = "chat"\n[contract]\nkeepalive_interval_s = 2\n', encoding="utf-8")
    assert main(["run", str(prof), "--out", str(tmp_path / "out"), "--no-progress", "--no-report"]) == 0
    err = capsys.readouterr().err
    assert err.count("[contract] is for `hopbench check PROFILE`") == 1 and "this run ignores it" in err


def test_check_request_takes_the_key_from_the_env_it_was_checked_against(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """run_check(env=...) checks api_key_env against env, and its requests carry the key from there
    too (they read os.environ: a KeyError once the check began; found with LiteLLM's master key)."""
    from hopbench.check._script import _request

    monkeypatch.delenv("HB_TEST_GATEWAY_KEY", raising=False)
    path = _write(tmp_path)
    path.write_text(path.read_text().replace("[upstream]", 'api_key_env = "HB_TEST_GATEWAY_KEY"\n[upstream]'))
    env = {"HB_TEST_GATEWAY_KEY": "sk-test"}
    profile, _ = load_check_profile(path, env=env)
    assert _request(profile, profile.scenarios[0], env).headers["authorization"] == "Bearer sk-test"


def test_contract_spec_validate_passes_a_run_profile_with_a_contract_as_run_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What validate passes, run starts: a run profile (embedded target) with a [contract] runs,
    ignoring the contract, so validate passes it, and says why check would refuse it."""
    from hopbench import _exit
    from hopbench.cli import main

    p = tmp_path / "p.toml"
    p.write_text('[run]\nrequests = 1\n[load]\nconcurrency = 1\n[target]\nembedded = true\n'
                 '[[scenario]]\nprotocol = "chat"\n[contract]\nkeepalive_interval_s = 2\n', encoding="utf-8")
    assert main(["validate", str(p)]) == _exit.EXIT_OK
    captured = capsys.readouterr()
    assert f"{p}: ok (for run; hopbench check would refuse it" in captured.out
    assert "expected [target].url to be the gateway under check" in captured.err


def test_check_command_a_dead_gateway_is_one_line_and_exit_4(tmp_path: Path, hopbench_cli) -> None:  # type: ignore[no-untyped-def]
    """Nothing could be checked (issue 38's exit 4): the table says INCONCLUSIVE in words, as gate
    does, and one line on stderr gives the first cause (a fresh tester's finding)."""
    path = _write(tmp_path, target_port=free_port(), listen_port=free_port())
    r = hopbench_cli(["check", str(path), "--out", str(tmp_path / "out")])
    assert r.returncode == 4, r.stderr
    assert "  INCONCLUSIVE  events_unchanged" in r.stdout and "????" not in r.stdout
    assert "hopbench check: error: nothing could be checked (10 inconclusive): chat: no response from the gateway" in r.stderr


def test_run_check_interrupted_writes_the_finished_steps_marked_interrupted(tmp_path: Path) -> None:
    """A SIGINT (KeyboardInterrupt) mid-script no longer leaves only ground_truth.jsonl: the
    finished steps are graded, the rest inconclusive, contract.json/.md written marked
    interrupted, exit 130 (issue 39 follow-up)."""
    path = _write(tmp_path, target_port=free_port(), listen_port=free_port())

    def progress(line: str) -> None:  # the interrupt arrives right after the first step
        if line.startswith("plain:"):
            raise KeyboardInterrupt

    run = run_check(path, tmp_path / "out", env={}, progress=progress)
    assert (run.exit_code, run.interrupted_by, run.interrupted_at) == (130, "SIGINT", "silence")
    doc = json.loads((tmp_path / "out" / "contract.json").read_text(encoding="utf-8"))
    assert (doc["exit_code"], doc["interrupted_by"], doc["interrupted_at"]) == (130, "SIGINT", "silence")
    why = {c["id"]: c["why"] for c in doc["checks"]}
    assert "no response from the gateway" in why["events_unchanged"]  # the plain step's: graded
    assert why["keepalive_cadence"] == "interrupted (SIGINT) at the script's silence step: not run"
    assert "interrupted (SIGINT) at the script's silence step" in (tmp_path / "out" / "contract.md").read_text()
    assert (tmp_path / "out" / "contract.xml").is_file()


def test_run_check_interrupted_keeps_sdk_parse_skip_when_no_sdk_is_installed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 39: an interrupted check said sdk_parse INCONCLUSIVE "interrupted" where a full run
    would skip it for want of the SDK; it keeps the skip and its own reason."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("openai", "anthropic") else real(name, *a))
    path = _write(tmp_path, target_port=free_port(), listen_port=free_port())

    def progress(line: str) -> None:
        if line.startswith("plain:"):
            raise KeyboardInterrupt

    run = run_check(path, tmp_path / "out", env={}, progress=progress)
    sdk = next(r for r in run.results if r.id == "sdk_parse")
    assert run.exit_code == 130 and (sdk.status, sdk.why) == ("skip", "the openai SDK is not installed (pip install openai)")
    table = format_table(run)
    assert "  SKIP          sdk_parse" in table and " skip " not in table
    assert table.count("partial") == 1


def _sigint_ignored() -> None:
    """In the child before exec: SIGINT ignored, as a background job's is, and not blocked."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.slow
def test_check_command_a_real_sigint_mid_step_exits_130_with_partial_outputs(tmp_path: Path) -> None:
    """The command with a real SIGINT while its first request waits on a gateway that never
    answers (sent once the gateway has the request: no timing guess): exit 130, the
    outputs written, every check inconclusive as interrupted at the plain step."""
    import signal
    import subprocess
    import sys

    gateway = socket.socket()
    gateway.bind(("127.0.0.1", 0))
    gateway.listen(8)
    gateway.settimeout(60)  # a bound on a broken test, not a timing threshold
    path = _write(tmp_path, target_port=gateway.getsockname()[1], listen_port=free_port())
    out = tmp_path / "out"
    root = Path(__file__).resolve().parents[1]
    # The child starts with SIGINT ignored (unblocked): a disposition of SIG_IGN is inherited
    # across exec, and a Python started so keeps ignoring it, so the check ran on to its timeouts
    # in 3 full test runs (something earlier leaves pytest's process ignoring SIGINT). `hopbench
    # check` sets its own handler, as `hopbench run` does, so Ctrl-C works however it was started.
    # (faulthandler: a child that does not end is made to print every thread's stack.)
    proc = subprocess.Popen([sys.executable, "-m", "hopbench", "check", str(path), "--out", str(out)],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                            preexec_fn=_sigint_ignored)
    try:
        conn, _ = gateway.accept()
        conn.recv(65536)  # the request arrived: the script is inside its plain step
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler dumps the threads' stacks
            _, stderr = proc.communicate(timeout=30)
            pytest.fail(f"hopbench check did not end within 60 s of its SIGINT; its threads:\n{stderr[-8000:]}")
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        gateway.close()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert sum("partial" in ln for ln in (stdout + stderr).splitlines()) == 1  # the ending said once (issue 39)
    doc = json.loads((out / "contract.json").read_text(encoding="utf-8"))
    assert (doc["exit_code"], doc["interrupted_at"]) == (130, "plain")
    assert {c["status"] for c in doc["checks"]} <= {"inconclusive", "skip"}
    assert "interrupted (SIGINT) at the script's plain step" in stdout
