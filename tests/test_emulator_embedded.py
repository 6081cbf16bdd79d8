"""EmbeddedEmulator (child process) and the ``hopbench serve`` command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from hopbench.emulator import (
    EmbeddedEmulator,
    EmulatorConfig,
    EmulatorStartError,
    read_ground_truth,
)
from hopbench.cli import main


def test_embedded_serves_then_stops_with_ground_truth_flushed(tmp_path: Path) -> None:
    record = tmp_path / "results" / "emulator.jsonl"
    config = EmulatorConfig.from_mapping({"ttft_ms": 1, "tokens_per_s": 0, "output_tokens": 5,
                                          "api_key": "k"})
    emu = EmbeddedEmulator(config, record_path=record)
    with emu:
        assert emu.base_url.startswith("http://127.0.0.1:")
        with httpx.Client(trust_env=False) as client:
            r = client.post(emu.base_url + "/v1/chat/completions",
                            headers={"authorization": "Bearer k", "x-hopbench-request-id": "r1"},
                            json={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                  "stream": True})
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    assert emu.exit_status == 0  # SIGTERM is a graceful stop
    (line,) = read_ground_truth(record)
    assert (line["request_id"], line["end"], line["content_events"]) == ("r1", "completed", 5)
    assert emu.log_path is not None and "listening on" in emu.log_path.read_text()


def test_embedded_child_death_raises_with_its_output(tmp_path: Path) -> None:
    emu = EmbeddedEmulator(EmulatorConfig(), record_path=None, host="256.0.0.1",
                           startup_timeout_s=10)
    with pytest.raises(EmulatorStartError, match="exited with status 2") as info:
        emu.__enter__()
    assert "cannot listen" in str(info.value)


def test_serve_rejects_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    bad = tmp_path / "emulator.toml"
    bad.write_text("seed = 1\n[faults]\nstall = 1.5\n")
    assert main(["serve", "--config", str(bad), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: faults.stall: expected a number from 0 to 1, got 1.5" in err


def test_config_mapping_survives_json_for_the_child() -> None:
    config = EmulatorConfig.from_mapping({"seed": 4, "models": {"fast": {"tokens_per_s": 0}},
                                          "faults": {"midstream_codes": ["server_error"]}})
    assert EmulatorConfig.from_mapping(json.loads(json.dumps(config.to_mapping()))) == config


@pytest.mark.slow
def test_embedded_emulator_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A SIGKILLed hopbench must not leave its emulator running (Linux: PR_SET_PDEATHSIG)."""
    import signal
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    pid_file = tmp_path / "emu.pid"
    code = ("import sys, time\n"
            "from pathlib import Path\n"
            "from hopbench.emulator import EmbeddedEmulator, EmulatorConfig\n"
            "with EmbeddedEmulator(EmulatorConfig(), record_path=None) as emu:\n"
            f"    Path({str(pid_file)!r}).write_text(str(emu.pid))\n"
            "    time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the emulator outlived its killed parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_embedded_folder_is_removed_when_a_second_ctrl_c_interrupts_the_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt while waiting for the child to exit (a repeated Ctrl-C) left
    the emulator's temporary folder behind; the child is still stopped (it watches its parent,
    and the stop is retried here)."""
    import subprocess

    emu = EmbeddedEmulator(EmulatorConfig.from_mapping({"ttft_ms": 1}), record_path=None)
    emu.__enter__()
    folder = emu._tmp
    assert folder is not None and folder.is_dir()
    proc = emu._proc
    assert proc is not None
    real_wait = subprocess.Popen.wait

    def interrupted(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        emu.__exit__(None, None, None)
    assert not folder.exists()
    monkeypatch.setattr(subprocess.Popen, "wait", real_wait)
    emu.__exit__(None, None, None)  # a later stop reaps the child
    assert proc.poll() is not None
