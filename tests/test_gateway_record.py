"""Gateway overhead against a hand-started emulator's record, cancels behind a gateway, and stages.

``hopbench serve --record FILE`` in a child process on 127.0.0.1, the tests' delaying proxy
(tests/_delay_proxy.py) in front of it, and ``hopbench run --upstream-record FILE`` (or
``[upstream] record``). Bounded: a few dozen short streams per test.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _servers import ServerProcess, free_port
from test_gateway_overhead import DelayProxy

from hopbench.workload._cancel import ClientCancel
from hopbench.driver._gateway import UpstreamHandle, join_upstream_cancels
from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import Recorder
from hopbench.driver._single import run_profile
from hopbench.cli import main

EMULATOR = "ttft_ms = 30\ntokens_per_s = 200\noutput_tokens = 12\n"


def _profile(target: str, upstream: str = "", *, requests: int = 12, scenario_extra: str = "",
             extra: str = "") -> str:
    return (f'[run]\nrequests = {requests}\n[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = 3\n'
            f'[target]\nurl = "{target}"\n' + (f"[upstream]\n{upstream}\n" if upstream else "") + extra
            + '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello there"]\n'
            + scenario_extra)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """``hopbench serve --record`` started by hand (a child process): (its port, its record)."""
    port = free_port()
    config = tmp_path / "emu.toml"
    config.write_text(EMULATOR)
    record = tmp_path / "gt.jsonl"
    # an earlier run's line with ids this run reuses: it must not count
    record.write_text(json.dumps({"request_id": "0-1", "t0_mono_ns": 1, "boot_id": "other", "status": 200,
                                 "end": "completed", "client_closed_ns": 5, "ttft_ns": 1, "gaps_ns": []}) + "\n")
    argv = [sys.executable, "-m", "hopbench", "serve", "--port", str(port), "--config", str(config),
            "--record", str(record)]
    with ServerProcess(argv, f"http://127.0.0.1:{port}/v1/models", tmp_path / "serve.log"):
        yield port, record


@pytest.mark.slow
def test_run_upstream_record_flag_end_to_end(tmp_path: Path, served: tuple[int, Path]) -> None:
    port, record = served
    with DelayProxy(tmp_path, port, 2.0) as proxy:
        path = tmp_path / "p.toml"
        path.write_text(_profile(proxy.url))  # no [upstream] at all: the flag sets it
        code = main(["run", str(path), "--out", str(tmp_path / "run"), "--upstream-record", str(record),
                     "--no-report", "--quiet"])
    assert code == 0
    g = json.loads((tmp_path / "run" / "summary.json").read_text())["gateway_overhead"]
    assert g["upstream"] == f'[upstream].record = "{record}"'
    assert g["match_rate"] == 1.0 and g["upstream_requests_unmatched"] == 0 and g["per_event"] is True
    assert g["events"]["upstream"] == 12 * 12


def test_run_upstream_record_flag_refused_beside_listen(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.toml"
    path.write_text(_profile("http://127.0.0.1:1", 'listen = "127.0.0.1:9100"'))
    code = main(["run", str(path), "--out", str(tmp_path / "run"), "--upstream-record", "gt.jsonl", "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--upstream-record" in err and 'listen = "127.0.0.1:9100"' in err
    assert not (tmp_path / "run").exists()  # refused before any load


def test_run_upstream_record_flag_needs_the_gateway_url(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[run]\nrequests = 1\n[load]\nconcurrency = 1\n'
                    '[[scenario]]\nprotocol = "chat"\nmodel = "m"\n')
    assert main(["run", str(path), "--upstream-record", "gt.jsonl", "--quiet"]) == 2
    assert "--upstream-record: expected [target].url" in capsys.readouterr().err


@pytest.mark.slow
def test_cancels_join_a_hand_started_emulators_record(tmp_path: Path, served: tuple[int, Path]) -> None:
    """The delaying proxy does not pass the client's close on: the upstream runs to its end
    after the run, and the join waits for those closing lines of the record."""
    port, record = served
    with DelayProxy(tmp_path, port, 1.0) as proxy:
        text = _profile(proxy.url, 'record = "gt.jsonl"',
                        scenario_extra="cancel = { fraction = 1.0, after_events = 2 }\n")
        out = run_profile(parse_profile(text, tmp_path / "p.toml", env={}), out_dir=tmp_path / "run")
    c = out.summary["scopes"]["chat"]["counters"]
    assert c["client_cancelled"] == 12
    assert c["cancel.matched"] == 12 and "cancel.unmatched" not in c, out.summary["warnings"]
    # the proxy reads on after its client left (it does not pass the close on): upstream
    # streams ran to their end after the client's close, their tokens wasted
    assert c["cancel.upstream_completed"] >= 1 and c["cancel.wasted_tokens"] >= c["cancel.upstream_completed"]
    # (the upstream notices a close only when the proxy drops its connection early: often never;
    # on a busy machine an upstream may also have finished before the client's close came)
    delays = out.summary["scopes"]["chat"]["metrics"].get("cancel_delay", {}).get("count", 0)
    assert delays + c.get("cancel.upstream_not_closed", 0) + c.get("cancel.upstream_finished_first", 0) == 12
    assert not [w for w in out.summary["warnings"] if "had no line in the upstream's record" in w]


def test_cancel_join_warns_when_the_record_lines_do_not_arrive(tmp_path: Path) -> None:
    record = tmp_path / "gt.jsonl"
    record.write_text(json.dumps({"request_id": "old", "t0_mono_ns": 5}) + "\n")
    offset = record.stat().st_size
    record.write_text(record.read_text() + json.dumps(
        {"request_id": "a", "t0_mono_ns": 100, "client_closed_ns": 50, "ttft_ns": 10, "gaps_ns": [10, 10],
         "end": "client_closed"}) + "\n")
    handle = UpstreamHandle(record, offset, '[upstream].record = "gt.jsonl"')
    rec = Recorder(["s"])
    clock = [0.0]
    cancels = [ClientCancel("a", "s", 130, 1), ClientCancel("b", "s", 140, 1)]
    warnings = join_upstream_cancels(handle, cancels, rec, wait_s=2.0, sleep=lambda s: clock.__setitem__(
        0, clock[0] + s), clock=lambda: clock[0])
    assert clock[0] >= 2.0  # it waited for "b", bounded
    snap = rec.snapshot()
    assert snap.counter("s", "cancel.matched") == 1 and snap.counter("s", "cancel.unmatched") == 1
    assert any('1 of 2 cancelled streams had no line in the upstream\'s record ([upstream].record = "gt.jsonl") '
               '2 s after the run' in w for w in warnings), warnings


def test_cancel_join_reads_a_line_written_while_it_waits(tmp_path: Path) -> None:
    record = tmp_path / "gt.jsonl"
    record.write_text("")
    handle = UpstreamHandle(record, 0, "[upstream].record")
    rec = Recorder(["s"])
    clock = [0.0]

    def sleep(s: float) -> None:  # the upstream's stream ends while the join waits
        clock[0] += s
        if clock[0] > 0.2 and not record.read_text():
            record.write_text(json.dumps({"marker_id": "a", "t0_mono_ns": 100, "ttft_ns": 10,
                                          "gaps_ns": [10], "end": "completed"}) + "\n")

    warnings = join_upstream_cancels(handle, [ClientCancel("a", "s", 105, 0)], rec, wait_s=5.0, sleep=sleep,
                                     clock=lambda: clock[0])
    assert clock[0] < 1.0 and not [w for w in warnings if "had no line" in w]
    snap = rec.snapshot()
    assert snap.counter("s", "cancel.matched") == 1 and snap.counter("s", "cancel.upstream_completed") == 1
    assert snap.counter("s", "cancel.wasted_tokens") == 2


@pytest.mark.slow
def test_stages_each_join_their_own_upstream_requests(tmp_path: Path) -> None:
    """``[[stage]]`` with ``[upstream] listen``: each stage starts the emulator behind the
    gateway again and matches its own streams with the requests of that stage alone."""
    emu_port = free_port()
    with DelayProxy(tmp_path, emu_port, 1.0) as proxy:
        text = (f'[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = 1\n[target]\nurl = "{proxy.url}"\n'
                f'[upstream]\nlisten = "127.0.0.1:{emu_port}"\n{EMULATOR}'
                '[[stage]]\nconcurrency = 1\nduration_s = 1.5\nwarmup_s = 0\n'
                '[[stage]]\nconcurrency = 3\nduration_s = 1.5\nwarmup_s = 0\n'
                '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello there"]\n')
        path = tmp_path / "p.toml"
        path.write_text(text)
        assert main(["run", str(path), "--out", str(tmp_path / "run"), "--no-report", "--quiet"]) == 0
    stages = sorted(p for p in (tmp_path / "run").iterdir() if p.is_dir() and p.name.startswith("stage-"))
    assert len(stages) == 2
    for stage in stages:
        s = json.loads((stage / "summary.json").read_text())
        g = s["gateway_overhead"]
        started = s["scopes"]["all"]["counters"]["started"]
        # every stream of this stage matched, and no request of the other stage counted here
        assert g["matched"] == g["streams"] == started > 0 and g["upstream_requests_unmatched"] == 0, g
        assert s["scopes"]["all"]["metrics"]["event_delay"]["count"] > 0


@pytest.mark.slow
def test_search_probes_each_join_their_own_upstream_requests(tmp_path: Path) -> None:
    emu_port = free_port()
    with DelayProxy(tmp_path, emu_port, 1.0) as proxy:
        text = (f'[run.timeouts]\nidle_s = 10\n[load]\nconcurrency = 1\n[target]\nurl = "{proxy.url}"\n'
                f'[upstream]\nlisten = "127.0.0.1:{emu_port}"\n{EMULATOR}'
                '[slo]\nttft_ms = 5000\ntarget = 0.5\n'
                '[search]\nmode = "concurrency"\nmin = 1\nmax = 4\nstart = 1\nduration_s = 1.5\nwarmup_s = 0\n'
                'max_probes = 2\n'
                '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\nprompts = ["hello there"]\n')
        path = tmp_path / "p.toml"
        path.write_text(text)
        main(["search", str(path), "--out", str(tmp_path / "run"), "--no-report", "--quiet"])
    probes = sorted(p for p in (tmp_path / "run").iterdir() if p.is_dir() and p.name.startswith("probe-"))
    # two probes; one when this busy machine saturated hopbench (the search then stops, saying so)
    assert 1 <= len(probes) <= 2
    for probe in probes:
        s = json.loads((probe / "summary.json").read_text())
        g = s["gateway_overhead"]
        assert g["matched"] == g["streams"] > 0 and g["upstream_requests_unmatched"] == 0, g
