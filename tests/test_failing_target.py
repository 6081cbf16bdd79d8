"""A target that answers but never streams stops the run early (issue 39, item 4).

The servers are the project's own (tests/_hostile.py) on 127.0.0.1: ``html_500``
answers every request with a 500 and an HTML page, ``ok_every:N`` streams every
N-th request and fails the others. ``run.stop_on_failing_target`` (default 20)
is hopbench.engine._watch.WatchMixin._check_failing's limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

import _hostile
from hopbench.config._profile import parse_profile
from hopbench.engine._runner import LoadRunner
from hopbench.engine._watch import FAILING_PREFIX
from hopbench.measure._recorder import ALL, Recorder

ROOT = Path(__file__).resolve().parent.parent


def _profile(url: str, run: str) -> str:
    return (f"[run]\n{run}\n[load]\nconcurrency = 2\n[target]\nurl = \"{url}\"\n"
            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\n')


async def _run(mode: str, run: str, notices: list[str] | None = None) -> tuple[LoadRunner, Recorder]:
    said = notices if notices is not None else []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(_hostile.serve, mode))
        url = f"http://127.0.0.1:{port}"
        rec = Recorder(["chat"])
        runner = LoadRunner(parse_profile(_profile(url, run), "p.toml", env={}), url, rec, Recorder(["chat"]))
        runner.notice = said.append
        with trio.fail_after(60):
            await runner.run()
        nursery.cancel_scope.cancel()
    return runner, rec


async def test_failing_target_stops_early_naming_status_and_content_type() -> None:
    notices: list[str] = []
    runner, rec = await _run("html_500", "requests = 400", notices)
    # said once, by the run's warnings (or its exit line): no notice while it stops (it said it 3 times)
    assert not [n for n in notices if FAILING_PREFIX in n], notices
    reason = runner.stats.interrupted_by
    assert reason is not None and reason.startswith(f"{FAILING_PREFIX}: the first 20 responses")
    assert "20 of 20: HTTP 500 text/html, http_error.500" in reason
    assert "run.stop_on_failing_target = 20" in reason
    started = rec.snapshot().counter(ALL, "started")
    assert 20 <= started < 40  # stopped at the 20th failure: the in-flight ones end, no more start


@pytest.mark.slow
async def test_failing_target_limit_is_the_profiles() -> None:
    runner, rec = await _run("html_500", "requests = 400\nstop_on_failing_target = 5")
    assert runner.stats.interrupted_by is not None and "the first 5 responses" in runner.stats.interrupted_by
    runner, rec = await _run("html_500", "requests = 60\nstop_on_failing_target = 0")  # 0: never
    assert runner.stats.interrupted_by is None and rec.snapshot().counter(ALL, "started") == 60


async def test_failing_target_that_streams_sometimes_is_never_stopped() -> None:
    # every 10th request streams: 90 % fail, but the target streams, so the run goes to its end
    runner, rec = await _run("ok_every:10", "requests = 100")
    snap = rec.snapshot()
    assert runner.stats.interrupted_by is None
    assert snap.counter(ALL, "started") == 100 and snap.counter(ALL, "completed") == 10


def test_failing_target_exit_line_points_at_the_warning_the_tables_showed(tmp_path: Path) -> None:
    from hopbench._run_command import _stop_line

    reason = f"{FAILING_PREFIX}: the first 20 responses from http://127.0.0.1:9 all failed"
    summary = {"warnings": [reason, "nothing completed: none of the 20 streams completed"]}
    shown = _stop_line(reason, summary, tmp_path, True)
    assert FAILING_PREFIX not in shown and "its warning above" in shown and str(tmp_path) in shown
    assert reason in _stop_line(reason, summary, tmp_path, False)  # --quiet: no tables, the exit line says it
    assert reason in _stop_line(reason, {"warnings": []}, tmp_path, True)  # a reason the warnings did not give


@pytest.mark.slow
def test_failing_target_run_exits_4_with_the_reason_and_writes_results(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "_hostile.py"), "html_500"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        prof = tmp_path / "p.toml"
        prof.write_text(_profile(f"http://127.0.0.1:{port}", "duration_s = 30"))
        proc = subprocess.run([sys.executable, "-m", "hopbench", "run", str(prof), "--out", str(tmp_path / "o"),
                               "--no-progress"], capture_output=True, text=True, cwd=ROOT, timeout=120)
        quiet = subprocess.run([sys.executable, "-m", "hopbench", "run", str(prof), "--out", str(tmp_path / "q"),
                                "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    finally:
        server.kill()
        server.communicate(timeout=10)
    assert proc.returncode == 4, proc.stderr
    # said once, as the first warning, where the answer leads; the exit line points at it
    assert (proc.stdout + proc.stderr).count(FAILING_PREFIX) == 1, proc.stdout + proc.stderr
    warned = proc.stdout.split("\nwarnings\n", 1)[1].splitlines()
    assert warned[0].strip().startswith(f"{FAILING_PREFIX}: the first 20 responses") and "HTTP 500 text/html" in warned[0]
    assert "hopbench: error: the run stopped early because of the target (its warning above)" in proc.stderr
    assert quiet.returncode == 4 and quiet.stderr.count(FAILING_PREFIX) == 1, quiet.stderr
    assert "hopbench: error: target failing: the first 20 responses" in quiet.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["interrupted_by"].startswith(FAILING_PREFIX) and summary["complete"] is False
    assert summary["warnings"][0].startswith(FAILING_PREFIX)
    assert summary["headline"]["started"] < 100  # not hammered for 30 s
    assert (tmp_path / "o" / "report.html").exists() and (tmp_path / "o" / "streams.jsonl").exists()
