"""LiveProgress: figures from fake intervals, plain lines and the rich panel."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from hopbench._errors import ResultsError
from hopbench.config._profile import parse_profile
from hopbench.config._records import Profile
from hopbench.observe._progress import LiveProgress, plain_line
from hopbench.measure._recorder import IntervalSnapshot, Recorder, ScopeSnapshot

MS = 1_000_000
S = 1_000_000_000

_BASE = """
[run]
name = "prog"
{limit}
warmup_s = 1
[load]
concurrency = 4
[target]
embedded = true
[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
"""


def _profile(limit: str = "duration_s = 30") -> Profile:
    return parse_profile(_BASE.format(limit=limit), "prog.toml", env={})


def _interval(rec: Recorder, k: int, ttft_ms: float, *, length_ns: int = S) -> tuple[IntervalSnapshot, dict]:
    """Interval k (ends at (k+1) * length): 10 streams, ttft_ms each, some broken ones."""
    for _ in range(10):
        rec.incr("chat", "started")
        rec.incr("chat", "completed")
        rec.record("chat", "ttft", int(ttft_ms * MS))
        rec.record("chat", "itl", 5 * MS)
    rec.incr("chat", "failed")
    rec.incr("chat", "failed.rate_limit_error")
    rec.incr("chat", "timeout")
    rec.incr("chat", "timeout.idle")
    rec.incr("chat", "keepalive_violations")
    rec.record_global("loop_lag", 2 * MS)
    iv = rec.take_interval(k * length_ns, (k + 1) * length_ns)
    line = {"start_ns": k * length_ns, "end_ns": (k + 1) * length_ns, "in_flight_mean": 3.5,
            "in_flight_now": 4, "connecting_now": 1, "waiting_now": 2, "cpu": 0.25, "started_total": 10 * (k + 1), "completed": 10,
            "started": 10, "output_tokens": 480}
    return iv, line


def test_live_progress_figures_from_intervals() -> None:
    rec = Recorder(["chat"])
    p = LiveProgress(_profile(), Console(record=True, width=200), plain=False)
    assert p.figures() is None
    p.on_interval(*_interval(rec, 0, 100))
    p.on_interval(*_interval(rec, 1, 300))
    fig = p.figures()
    assert fig is not None
    assert fig.elapsed_ns == 2 * S and fig.remaining_ns == 28 * S and not fig.warming_up
    assert fig.started_per_s == pytest.approx(10.0) and fig.output_tokens_per_s == pytest.approx(480.0)
    assert fig.cpu == pytest.approx(0.25)
    # both intervals arrived since the last display: "recent" spans both, as does the run
    assert fig.recent["ttft"] is not None and fig.run["ttft"] is not None
    assert fig.run["ttft"][0] == pytest.approx(100 * MS, rel=1e-3)
    assert fig.run["ttft"][1] == pytest.approx(300 * MS, rel=1e-3)
    assert fig.broken["failed"] == (2, {"rate_limit_error": 2})
    assert fig.broken["timeout"] == (2, {"idle": 2})
    assert fig.keepalive_violations == 2
    assert fig.lag_p99_ns["loop_lag"] == pytest.approx(2 * MS, rel=1e-3)
    assert fig.lag_p99_ns["schedule_lag"] is None
    # a new interval: "recent" is that interval only, "run" keeps everything
    p.on_interval(*_interval(rec, 2, 500))
    fig = p.figures()
    assert fig is not None
    assert fig.recent["ttft"] == pytest.approx((500 * MS, 500 * MS), rel=1e-3)
    assert fig.run["ttft"][0] == pytest.approx(300 * MS, rel=1e-3)
    assert fig.broken["failed"][0] == 3


def test_live_progress_uses_the_runs_total_when_given() -> None:
    rec = Recorder(["chat"])
    p = LiveProgress(_profile(), Console(record=True), plain=False)
    iv, line = _interval(rec, 0, 100)
    rec.record("chat", "ttft", 900 * MS)  # recorded but not yet in an interval
    rec.incr("chat", "keepalive_violations", 5)
    p.on_interval(iv, line, rec.snapshot())
    fig = p.figures()
    assert fig is not None
    assert fig.run["ttft"] is not None and fig.run["ttft"][1] == pytest.approx(900 * MS, rel=1e-3)
    assert fig.recent["ttft"] is not None and fig.recent["ttft"][1] == pytest.approx(100 * MS, rel=1e-3)
    assert fig.keepalive_violations == 6


def test_live_progress_on_interval_only_stores() -> None:
    # a corrupt histogram shows that on_interval decodes nothing: only figures() does
    bad = IntervalSnapshot(0, S, {"all": ScopeSnapshot({}, {"ttft": "HISTFAAAnot-an-encoding"})})
    p = LiveProgress(_profile(), Console(record=True), plain=False)
    for _ in range(50):
        p.on_interval(bad, {"start_ns": 0, "end_ns": S})
    with pytest.raises(ResultsError):
        p.figures()


def test_live_progress_warm_up_mark_survives_a_late_tick() -> None:
    # breaker: a 1 s warm-up's first interval closed 13 ms late (1.013 s, a busy machine, or the
    # workers' merged interval, which ends at the latest worker's tick) lost its "[warm-up]"
    rec = Recorder(["chat"])
    p = LiveProgress(_profile(), Console(record=True), plain=False)
    iv, line = _interval(rec, 0, 100)
    p.on_interval(iv, dict(line, end_ns=S + 13 * MS))
    fig = p.figures()
    assert fig is not None and fig.warming_up and "[warm-up]" in plain_line(fig)
    iv, line = _interval(rec, 1, 100)
    p.on_interval(iv, dict(line, start_ns=S + 13 * MS))
    fig = p.figures()
    assert fig is not None and not fig.warming_up  # the next one began after it


def test_live_progress_requests_left_and_warm_up() -> None:
    rec = Recorder(["chat"])
    p = LiveProgress(_profile("requests = 25"), Console(record=True), plain=False)
    iv, line = _interval(rec, 0, 100, length_ns=S // 2)
    p.on_interval(iv, line)
    fig = p.figures()
    assert fig is not None
    assert fig.requests_left == 15 and fig.remaining_ns is None and fig.warming_up
    assert "15 requests left" in plain_line(fig) and "[warm-up]" in plain_line(fig)
    # open-loop arrivals dropped at max_in_flight used up the budget too
    iv, line = _interval(rec, 1, 100, length_ns=S // 2)
    p.on_interval(iv, dict(line, dropped_total=5))
    fig = p.figures()
    assert fig is not None and fig.requests_left == 0 and "0 requests left" in plain_line(fig)


def test_live_progress_plain_prints_at_most_one_line_per_second() -> None:
    rec = Recorder(["chat"])
    con = Console(record=True, force_terminal=False, width=400)
    with LiveProgress(_profile(), con, plain=True) as p:
        for k in range(5):  # intervals of 0.5 s ending at 0.5, 1.0, ..., 2.5 s
            p.on_interval(*_interval(rec, k, 100, length_ns=S // 2))
    lines = con.export_text().splitlines()
    # 0.5 s (first), 1.0 s, 2.0 s: one a second of the run's clock (2.5 s: no second line for 0:02)
    assert [ln[:5] for ln in lines] == ["[0:00", "[0:01", "[0:02"]
    assert "\x1b[" not in "".join(lines)
    last = lines[-1]
    assert re.search(r"in flight 4 connecting 1 waiting 2 started 20\.0/s done 20\.0/s tok 960/s", last)
    assert "ttft p50/p99 100.0/100.0 ms (run 100.0/100.0)" in last.replace("100.1", "100.0")
    assert "failed 4 (rate_limit_error 4)" in last and "timeout 4 (idle 4)" in last
    assert "keepalive violations 4" in last and "cpu 25%" in last


def test_live_progress_terminal_draws_the_panel() -> None:
    rec = Recorder(["chat"])
    con = Console(record=True, force_terminal=True, width=140)
    with LiveProgress(_profile(), con, plain=False) as p:
        p.on_interval(*_interval(rec, 1, 250))
    text = con.export_text()
    assert "hopbench prog" in text and "0:02 / 0:30 (0:28 left)" in text
    assert re.search(r"TTFT\s+250\.\d\s+250\.\d\s+250\.\d\s+250\.\d", text)
    assert "broken: failed 1 (rate_limit_error 1)" in text
    assert "keepalive violations 1" in text and "CPU 25%" in text


def test_live_progress_plain_line_is_printed_as_is_during_warm_up() -> None:
    """The plain line is text, not rich markup: "[warm-up]" stays and leaves no stray space
    (the first line of `hopbench run profiles/smoke.toml` read "(0:09 left) ]")."""
    rec = Recorder(["chat"])
    con = Console(record=True, force_terminal=False, width=400)
    profile = parse_profile("[run]\nduration_s = 10\nwarmup_s = 2\n[load]\nconcurrency = 4\n[target]\n"
                            "embedded = true\n[[scenario]]\nname = \"chat\"\nprotocol = \"chat\"\n")
    with LiveProgress(profile, con, plain=True) as p:
        p.on_interval(*_interval(rec, 0, 100))
    first = con.export_text().splitlines()[0]
    assert first.startswith("[0:01 / 0:10 (0:09 left) [warm-up]] in flight "), first
    assert " ]" not in first


def test_live_progress_plain_one_line_a_second_on_a_busy_loop() -> None:
    """On a busy machine the plain progress skipped seconds, its countdown did not add up
    to the plan and its last line came twice (issue 39 item 7). The runner's ticker
    (hopbench.engine._runner: an interval ends when it is closed, ticks missed while late
    are skipped) is driven on trio's MockClock with autojump, a fake busy loop holding
    each tick late by up to 0.9 s (seeded); then the run's own short last interval."""
    import random

    import trio
    import trio.testing

    from hopbench.engine._runner import interval_end

    rnd = random.Random(39)
    clock = trio.testing.MockClock(autojump_threshold=0)
    rec = Recorder(["chat"])
    con = Console(record=True, force_terminal=False, width=400)
    duration_s, iv = 10, S

    def line(start: int, end: int) -> dict:
        return {"start_ns": start, "end_ns": end, "in_flight_now": 1, "started_total": 0, "cpu": 0.5}

    async def run(progress: LiveProgress) -> None:
        t0 = trio.current_time()
        k, last = 1, 0
        while k * iv < duration_s * S:
            await trio.sleep_until(t0 + k * iv / S)
            clock.jump(rnd.uniform(0.0, 0.9))  # the loop was busy elsewhere: the tick runs late
            end = interval_end(int((trio.current_time() - t0) * S), k * iv)
            rec.incr("chat", "started")
            progress.on_interval(rec.take_interval(last, end), line(last, end))
            last, k = end, max(k, end // iv) + 1
        await trio.sleep_until(t0 + duration_s + 0.02)  # the stop: the last, short interval
        end = int((trio.current_time() - t0) * S)
        progress.on_interval(rec.take_interval(last, end), line(last, end))

    with LiveProgress(_profile(f"duration_s = {duration_s}"), con, plain=True) as p:
        trio.run(run, p, clock=clock)
    heads = [re.match(r"\[(\d+):(\d\d) / 0:10 \((\d+):(\d\d) left\)", ln) for ln in con.export_text().splitlines()]
    assert all(heads), con.export_text()
    seconds = [int(m.group(1)) * 60 + int(m.group(2)) for m in heads if m]
    left = [int(m.group(3)) * 60 + int(m.group(4)) for m in heads if m]
    assert seconds == list(range(1, duration_s + 1)), seconds  # one line a second, none twice
    assert [s + r for s, r in zip(seconds, left)] == [duration_s] * len(seconds)  # the countdown adds up
