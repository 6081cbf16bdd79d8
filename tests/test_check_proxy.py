"""``hopbench check`` against the tests' real proxy (tests/_delay_proxy.py, its own process on
127.0.0.1) in front of the scripted emulator: a well-behaved pass-through passes every check, and
each deliberately broken mode fails exactly the check it breaks and passes the rest.

Bounded: one check run a test (a few dozen short streams, one at a time). The contract's limits
leave wide margins for a busy machine: the broken modes miss them by several times (a 600 ms
hold against a 150 ms limit, a 2.5 s silence against 1.25 s).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _servers import free_port
from test_gateway_overhead import DelayProxy

from hopbench.check import CheckRun, format_table, run_check
from hopbench.config._contract_spec import CHECK_IDS

#: each test drives a whole check through a real proxy (about 100 s in all)
pytestmark = pytest.mark.slow

#: the contract the proxy is configured for: its keepalive every 400 ms (promised: every 1 s),
#: its stall error after 4 s of upstream silence (promised: 3.5-5 s)
CONTRACT = ("[contract]\nkeepalive_interval_s = 1\nmax_first_chunk_hold_ms = 150\nmax_event_hold_ms = 150\n"
            "stall_min_s = 3.5\nstall_max_s = 5\nmax_attempts = 1\n")
#: a well-behaved gateway: keepalives, cancels passed on, HopBase's error event on a cut Messages stream
GOOD = ["--keepalive-ms", "400", "--propagate-cancel", "--disconnect-error", "--stall-error-ms", "4000"]
SCENARIOS = {
    "chat": '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "gpt-emu"\nprompts = ["hello there"]\n',
    "messages": ('[[scenario]]\nname = "messages"\nprotocol = "messages"\nmodel = "claude-emu"\n'
                 'prompts = ["hello there"]\n'),
}


def _proxy(tmp: Path, flags: list[str]) -> tuple[DelayProxy, int]:
    """The delaying proxy with ``flags`` in front of a free port (where the check's emulator goes)."""
    emu_port = free_port()
    gw = DelayProxy(tmp, emu_port, 1.0)
    gw.argv += flags
    return gw, emu_port


def _write(tmp: Path, gw: DelayProxy, emu_port: int, scenarios: list[str]) -> Path:
    path = tmp / "check.toml"
    path.write_text(f'[target]\nurl = "{gw.url}"\n[upstream]\nlisten = "127.0.0.1:{emu_port}"\n'
                    + "".join(SCENARIOS[s] for s in scenarios) + CONTRACT, encoding="utf-8")
    return path


def _check(tmp: Path, flags: list[str], scenarios: list[str]) -> CheckRun:
    gw, emu_port = _proxy(tmp, flags)
    with gw:
        return run_check(_write(tmp, gw, emu_port, scenarios), tmp / "out", env={})


def _failed(run: CheckRun) -> set[str]:
    return {r.id for r in run.results if r.status != "pass"}


def test_check_clean_pass_through_passes_every_check(tmp_path: Path, hopbench_cli) -> None:  # type: ignore[no-untyped-def]
    """The whole command: `hopbench check PROFILE --out DIR` through the well-behaved proxy."""
    gw, emu_port = _proxy(tmp_path, GOOD)
    with gw:
        path = _write(tmp_path, gw, emu_port, ["chat", "messages"])
        r = hopbench_cli(["check", str(path), "--out", str(tmp_path / "out")], timeout_s=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "11 passed, 0 failed, 0 inconclusive, 0 skipped" in r.stdout
    assert "hopbench check: plain: 6 requests, 6 answered" in r.stderr  # the progress lines
    doc = json.loads((tmp_path / "out" / "contract.json").read_text())
    assert [c["id"] for c in doc["checks"]] == list(CHECK_IDS)
    assert all({"id", "status", "expected", "observed"} <= set(c) for c in doc["checks"])
    assert doc["exit_code"] == 0 and doc["counts"]["pass"] == len(CHECK_IDS)
    assert doc["checks"][0]["scenarios"] == {"chat": "pass", "messages": "pass"}
    suite = ET.parse(tmp_path / "out" / "contract.xml").getroot()
    assert suite.get("tests") == str(len(CHECK_IDS)) and suite.get("failures") == "0"
    assert "| `events_unchanged` | pass |" in (tmp_path / "out" / "contract.md").read_text()
    assert "<h2>Streaming contract</h2>" in (tmp_path / "out" / "report.html").read_text()
    # the emulator's ground truth of every upstream request is kept beside them
    assert (tmp_path / "out" / "ground_truth.jsonl").stat().st_size > 0


@pytest.mark.parametrize(("flags", "scenario", "broken"), [
    (GOOD + ["--rewrite-at", "3"], "chat", "events_unchanged"),
    (GOOD + ["--hold-first-ms", "600"], "chat", "no_buffering"),
    ([f for f in GOOD if f not in ("--keepalive-ms", "400")], "chat", "keepalive_cadence"),
    (GOOD + ["--swallow-errors"], "chat", "midstream_error_shape"),
    ([f for f in GOOD if f != "--propagate-cancel"], "chat", "cancel_propagation"),
    ([f for f in GOOD if f != "--disconnect-error"], "messages", "disconnect_error_event"),
], ids=["rewrites-an-event", "holds-the-first-chunk", "no-keepalives", "swallows-errors", "ignores-cancel",
        "no-error-event-on-a-cut"])
def test_check_broken_proxy_fails_exactly_what_it_breaks(tmp_path: Path, flags: list[str], scenario: str,
                                                         broken: str) -> None:
    run = _check(tmp_path, flags, [scenario])
    assert _failed(run) == {broken}, format_table(run)
    result = next(r for r in run.results if r.id == broken)
    assert result.status == "fail" and result.why and result.expected and result.observed
    assert run.exit_code == 1
    table = format_table(run)
    assert f"FAIL  {broken}" in table and "why: " in table


def test_check_nothing_checkable_when_the_gateway_answers_nothing(tmp_path: Path) -> None:
    """No gateway on [target].url: the plain step gets no response, the script stops there, every
    check is inconclusive (or skipped) with the reason, and the exit status is 4."""
    path = tmp_path / "check.toml"
    path.write_text(f'[target]\nurl = "http://127.0.0.1:{free_port()}"\n[upstream]\nlisten = "127.0.0.1:{free_port()}"\n'
                    + SCENARIOS["chat"], encoding="utf-8")
    run = run_check(path, tmp_path / "out", env={})
    assert run.exit_code == 4
    assert {r.status for r in run.results} == {"inconclusive", "skip"}
    first = run.results[0]
    assert first.status == "inconclusive" and "no response from the gateway (ConnectError" in (first.why or "")
    assert list(run.step_s) == ["plain"]  # nothing more was sent
    assert json.loads((tmp_path / "out" / "contract.json").read_text())["exit_code"] == 4
