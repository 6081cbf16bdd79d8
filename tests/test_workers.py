"""Scale-out over worker processes: the load split, exact merges, real runs on the emulator."""

from __future__ import annotations

import collections
import io
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from hopbench._clock import NS_PER_S
from hopbench.config._profile import parse_profile
from hopbench.config._records import Profile
from hopbench.measure._recorder import ALL, Recorder, Snapshot
from hopbench.driver._results import ResultsWriter
from hopbench.driver._merge import Merger
from hopbench.driver._share import WorkerShare, split_load
from hopbench.driver._workers import _process_main, _run_local

_PROFILE = """
[run]
name = "workers"
requests = {requests}
seed = 3
workers = {workers}
interval_s = 0.5

[load]
{load}

[target]
embedded = true

[emulator]
ttft_ms = 5
tokens_per_s = 2000
output_tokens = 8
seed = 5

[[scenario]]
name = "chat"
protocol = "chat"
model = "gpt-emu"
max_tokens = 8

[[scenario]]
name = "messages"
protocol = "messages"
model = "claude-emu"
max_tokens = 8
"""


def _profile(workers: int = 2, requests: int = 200, load: str = 'mode = "concurrency"\nconcurrency = 8',
             ) -> Profile:
    return parse_profile(_PROFILE.format(workers=workers, requests=requests, load=load))


# -- the split ------------------------------------------------------------------

@pytest.mark.parametrize("concurrency,workers", [(8, 2), (7, 3), (5, 4), (1, 1), (100, 7)])
def test_split_load_concurrency_shares_differ_by_at_most_one(concurrency: int, workers: int) -> None:
    p = _profile(workers, requests=203, load=f'mode = "concurrency"\nconcurrency = {concurrency}')
    shares = split_load(p, workers)
    cs = [s.load.concurrency for s in shares]
    budgets = [s.request_budget or 0 for s in shares]
    assert sum(cs) == concurrency and max(cs) - min(cs) <= 1 and min(cs) >= 1
    assert sum(budgets) == 203 and max(budgets) - min(budgets) <= 1
    assert [s.index for s in shares] == list(range(len(shares)))
    assert all(s.arrival_offset_ns == 0 for s in shares)


def test_split_load_drops_workers_with_zero_share() -> None:
    assert len(split_load(_profile(4, load='mode = "concurrency"\nconcurrency = 3'), 4)) == 3
    assert len(split_load(_profile(4, requests=2), 4)) == 2


def test_split_load_constant_rate_is_phase_shifted() -> None:
    p = _profile(4, load='mode = "rate"\nrate_rps = 100\narrival = "constant"\nmax_in_flight = 10')
    shares = split_load(p, 4)
    assert [s.load.rate_rps for s in shares] == [25.0] * 4
    assert [s.load.max_in_flight for s in shares] == [3, 3, 2, 2]
    # worker k starts k/R later: the merged schedule is evenly spaced at 1/R = 10 ms
    assert [s.arrival_offset_ns for s in shares] == [0, 10_000_000, 20_000_000, 30_000_000]
    merged = sorted(s.arrival_offset_ns + n * NS_PER_S // 25 for s in shares for n in range(25))
    assert {b - a for a, b in zip(merged, merged[1:])} == {10_000_000}


def test_split_load_poisson_rate_uses_independent_unshifted_processes() -> None:
    p = _profile(3, load='mode = "rate"\nrate_rps = 90\narrival = "poisson"\nmax_in_flight = 30')
    shares = split_load(p, 3)
    assert sum(s.load.rate_rps for s in shares) == pytest.approx(90.0)
    assert {s.arrival_offset_ns for s in shares} == {0}
    assert len({s.index for s in shares}) == 3  # the seed offsets


# -- exact merging ----------------------------------------------------------------

def _feed(rec: Recorder, rng: random.Random, n: int) -> list[tuple[str, str, int]]:
    samples = []
    for _ in range(n):
        scope = rng.choice(["chat", "messages"])
        metric = rng.choice(["ttft", "itl", "e2e"])
        value = int(rng.lognormvariate(18, 1.5))  # ns: ~65 ms median, wide tail
        rec.record(scope, metric, value)
        rec.incr(scope, "completed")
        samples.append((scope, metric, value))
    lag = rng.randrange(1, 10**8)
    rec.record_global("loop_lag", lag)
    samples.append((ALL, "loop_lag", lag))
    return samples


def _replay(rec: Recorder, samples: list[tuple[str, str, int]]) -> None:
    for scope, metric, value in samples:
        if scope == ALL:
            rec.record_global(metric, value)
        else:
            rec.record(scope, metric, value)
            rec.incr(scope, "completed")


def test_merge_worker_snapshots_equals_one_recorder() -> None:
    rng = random.Random(11)
    one = Recorder(["chat", "messages"])
    shipped = []
    for _ in range(5):
        w = Recorder(["chat", "messages"])
        _replay(one, _feed(w, rng, 400))
        shipped.append(Snapshot.from_json(json.loads(json.dumps(w.snapshot().to_json()))))
    merged = Snapshot.merge(shipped)
    want = one.snapshot()
    for scope in ("chat", "messages"):
        for metric in ("ttft", "itl", "e2e"):
            assert merged.histogram(scope, metric) == want.histogram(scope, metric)
            assert merged.histogram(scope, metric).count > 0
        assert merged.counter(scope, "completed") == want.counter(scope, "completed")
    for metric in ("ttft", "loop_lag"):
        assert merged.histogram(ALL, metric) == want.histogram(ALL, metric)


def _interval_msgs(k: int, rec: Recorder, warm: Recorder, start_ns: int, end_ns: int) -> dict[str, Any]:
    iv, wv = rec.take_interval(start_ns, end_ns), warm.take_interval(start_ns, end_ns)
    line = {"start_ns": start_ns, "end_ns": end_ns, "in_flight_mean": 1.0, "in_flight_now": 1,
            "cpu": 0.1, "started_total": 0, "connecting_mean": 0.5, "connecting_now": 2,
            "waiting_mean": 0.25, "waiting_now": 0}
    return {"kind": "interval", "worker": k, "iv": iv.to_json(), "warm": wv.to_json(), "line": line}


def test_merger_writes_intervals_in_order_and_totals_equal_one_recorder(tmp_path: Path) -> None:
    p = _profile(3)
    shares = split_load(p, 3)
    writer = ResultsWriter(tmp_path)
    writer.start({"started_at_unix_s": 0.0})
    timeline = io.StringIO()
    meta: dict[str, Any] = {"interrupted_by": None}
    merger = Merger(p, shares, writer, timeline, meta)
    rng = random.Random(5)
    one = Recorder(["chat", "messages"])
    recs = [(Recorder(["chat", "messages"]), Recorder(["chat", "messages"])) for _ in shares]
    iv_ns = p.run.interval_ns
    # worker 2 lags two intervals behind: nothing past its last interval may be written
    msgs: list[dict[str, Any]] = []
    for k in range(4):
        for i, (rec, warm) in enumerate(recs):
            _replay(one, _feed(rec, rng, 50))
            msgs.append(_interval_msgs(i, rec, warm, k * iv_ns, (k + 1) * iv_ns))
    early = [m for m in msgs if not (m["worker"] == 2 and m["iv"]["start_ns"] >= iv_ns)]
    late = [m for m in msgs if m not in early]
    for m in early:
        merger.handle(m)
    assert merger.intervals_written == 1
    for m in late:
        merger.handle(m)
    assert merger.intervals_written == 4
    lines = [json.loads(x) for x in timeline.getvalue().splitlines()]
    assert [x["start_ns"] for x in lines] == [k * iv_ns for k in range(4)]
    assert all(x["workers"] == 3 and x["in_flight_now"] == 3 for x in lines)
    # the phases add up across workers like in flight (a worker without them adds 0)
    assert all(x["connecting_now"] == 6 and x["connecting_mean"] == 1.5 and x["waiting_mean"] == 0.75
               and x["streaming_now"] == 0 for x in lines)
    # worker 1 dies without a "done": what it shipped still counts
    for i in (0, 2):
        rec, warm = recs[i]
        merger.handle({"kind": "done", "worker": i, "total": rec.snapshot().to_json(),
                       "warmup": warm.snapshot().to_json(),
                       "counters": {"stop_ns": 4 * iv_ns, "steady_area": 8 * iv_ns, "sent_measured": 30 + i,
                                 "peak_open": 5, "steady_phase_area": {"connecting": 2 * iv_ns,
                                                                       "streaming": 8 * iv_ns}},
                       "start_skew_ns": 0})
    merger.lost(1, "killed")
    total, _ = merger.totals()
    want = one.snapshot()
    for scope in ("chat", "messages", ALL):
        for metric in ("ttft", "itl", "e2e") + (("loop_lag",) if scope == ALL else ()):
            assert total.histogram(scope, metric) == want.histogram(scope, metric)
        assert total.counter(scope, "completed") == want.counter(scope, "completed")
    summary, complete = merger.finish(None, "local")
    assert not complete
    load = summary["load"]  # the phases of workers 0 and 2 over the 4 intervals
    assert load["mean_in_flight"] == pytest.approx(4.0)
    assert load["in_flight_by_phase"] == {"waiting": 0.0, "connecting": 1.0, "awaiting_headers": 0.0,
                                          "streaming": 4.0, "closing": 0.0}
    assert (load["mean_busy"], load["mean_open"], load["peak_open"]) == (5.0, 5.0, 10)
    assert any("worker 1 died" in w for w in summary["warnings"])
    assert [d["state"] for d in summary["worker_detail"]] == ["done", "crashed", "done"]
    timeline.close()


def test_merger_progress_line_counts_warm_up_tokens_as_one_process_does(tmp_path: Path) -> None:
    # breaker: `run --workers 2` printed "tok 0/s" through the warm-up (the merged timeline
    # counted the measured streams' tokens only) where one process printed 144/s
    from hopbench.observe._progress import LiveProgress, plain_line
    from rich.console import Console

    p = parse_profile(_PROFILE.format(workers=2, requests=200, load="concurrency = 8").replace(
        "requests = 200", "duration_s = 10\nwarmup_s = 1").replace("interval_s = 0.5", "interval_s = 1"))
    shares = split_load(p, 2)
    writer = ResultsWriter(tmp_path)
    writer.start({"started_at_unix_s": 0.0})
    timeline = io.StringIO()
    progress = LiveProgress(p, Console(record=True, width=400), plain=False)
    try:
        merger = Merger(p, shares, writer, timeline, {"interrupted_by": None}, progress=progress.on_interval)
        iv_ns = p.run.interval_ns
        for i in range(2):  # every stream of the first interval is a warm-up one: 48 tokens each
            rec, warm = Recorder(["chat", "messages"]), Recorder(["chat", "messages"])
            for _ in range(3):
                warm.incr("chat", "completed")
                warm.incr("chat", "tokens.output.completed", 48)
            msg = _interval_msgs(i, rec, warm, 0, iv_ns + 13_000_000 * i)  # worker 1's tick 13 ms late
            merger.handle(msg)
        line = json.loads(timeline.getvalue().splitlines()[0])
        assert line["output_tokens"] == 2 * 3 * 48 and line["completed"] == 6
        fig = progress.figures()
        assert fig is not None and fig.output_tokens_per_s > 0
        assert "[warm-up]" in plain_line(fig)  # as one process's first line (warm-up 1 s, the interval 1.013 s)
    finally:
        writer.close()
        timeline.close()


# -- streams.jsonl: the workers' parts, merged -----------------------------------------

def _stream(k: int, n: int, start_ns: int) -> dict[str, Any]:
    return {"id": f"{k}-{n}", "scenario": "chat", "outcome": "completed", "detail": "caf\u00e9 \"start_ns\":1",
            "status": 200, "start_ns": start_ns, "events": {"text": 2}, "headers": {"start_ns": "9"}}


@pytest.mark.parametrize("chunk_bytes,fan_in", [(1 << 20, 64), (600, 2)])
def test_merge_stream_parts_orders_by_start_in_bounded_memory(tmp_path: Path, chunk_bytes: int,
                                                              fan_in: int) -> None:
    """Parts in end order (starts out of order) merge into one file in (start, worker, part
    order), each line byte for byte; with a tiny memory bound (many runs on disk, several merge
    passes) the file is the same; the parts and runs are removed."""
    from hopbench.driver._merge import STREAM_PART, merge_stream_parts

    rng = random.Random(7)
    parts, want = [], []
    for k in range(3):
        path = tmp_path / STREAM_PART.format(index=k)
        recs = [_stream(k, n, rng.randrange(0, 50) * 1000) for n in range(40)]
        path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs), encoding="utf-8")
        parts.append((k, path))
        want += [((r["start_ns"], k, n), json.dumps(r, separators=(",", ":"))) for n, r in enumerate(recs)]
    parts.append((3, tmp_path / STREAM_PART.format(index=3)))  # a worker that wrote none
    n, notes = merge_stream_parts(parts, tmp_path / "streams.jsonl", chunk_bytes=chunk_bytes, fan_in=fan_in)
    assert (n, notes) == (120, [])
    assert (tmp_path / "streams.jsonl").read_text(encoding="utf-8").splitlines() == [x for _, x in sorted(want)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["streams.jsonl"]


def test_merge_stream_parts_leaves_out_a_cut_last_line_with_a_note(tmp_path: Path) -> None:
    from hopbench.driver._merge import merge_stream_parts

    part = tmp_path / "p0"
    part.write_text(json.dumps(_stream(0, 1, 5)) + "\n" + json.dumps(_stream(0, 2, 3))[:30], encoding="utf-8")
    n, notes = merge_stream_parts([(0, part)], tmp_path / "streams.jsonl")
    assert n == 1 and notes == ["streams.jsonl: worker 0's last line was cut (it stopped mid-write): left out (p0:2)"]
    assert [json.loads(x)["id"] for x in (tmp_path / "streams.jsonl").read_text().splitlines()] == ["0-1"]


def test_merger_writes_shipped_streams_into_one_streams_jsonl(tmp_path: Path) -> None:
    """A Ray task ships its lines ("streams" messages): the driver writes its part and merges
    the parts at the end, as the local engine's own parts."""
    p = _profile(2)
    writer = ResultsWriter(tmp_path)
    writer.start({"started_at_unix_s": 0.0})
    merger = Merger(p, split_load(p, 2), writer, io.StringIO(), {"interrupted_by": None})
    merger.handle({"kind": "streams", "worker": 1, "lines": [_stream(1, 1, 30), _stream(1, 2, 10)]})
    merger.handle({"kind": "streams", "worker": 0, "lines": [_stream(0, 1, 20)]})
    merger.handle({"kind": "streams", "worker": 1, "lines": [_stream(1, 3, 20)]})
    for k in (0, 1):
        merger.lost(k, "test: no done")
    merger.finish(None, "ray")
    got = [json.loads(x) for x in (tmp_path / "streams.jsonl").read_text().splitlines()]
    assert [r["id"] for r in got] == ["1-2", "0-1", "1-3", "1-1"]
    assert got[0] == _stream(1, 2, 10) and not list(tmp_path.glob("streams.part-*"))


# -- real runs on the embedded emulator ----------------------------------------------

def _truth(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "ground_truth.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_run_workers_two_workers_match_ground_truth(tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: list[dict[str, Any]] = []
    outcome = _run_local(_profile(2), out_dir=out, on_line=None,
                         progress=lambda iv, line: seen.append(line),
                         base_url=None, target=_process_main)
    s = outcome.summary
    assert outcome.complete and outcome.crashed is None, s["warnings"]
    assert s["workers"] == 2 and s["engine"] == "local"
    c = s["scopes"]["all"]["counters"]
    truth = _truth(out)
    detail = s["worker_detail"]
    assert c["started"] == sum(d["started"] for d in detail) == len(truth) == 200
    assert c["completed"] == sum(d["completed"] for d in detail) == sum(r["end"] == "completed" for r in truth)
    assert [d["share"]["requests"] for d in detail] == [100, 100]
    by_worker = collections.Counter(r["request_id"].split("-")[0] for r in truth)
    assert by_worker == {"0": 100, "1": 100}
    done = [r for r in truth if r["end"] == "completed"]
    assert c["tokens.output.completed"] == sum(r["output_tokens"] for r in done)
    # the merged interval log adds up to the total, and progress saw the merged view
    timeline = [json.loads(x) for x in (out / "timeline.jsonl").read_text().splitlines()]
    assert sum(x["started"] for x in timeline) == 200
    assert seen and seen == timeline
    assert [x["start_ns"] for x in timeline] == sorted(x["start_ns"] for x in timeline)
    assert all(d["state"] == "done" and d["pid"] != os.getpid() for d in detail)
    # one streams.jsonl, merged from the workers' parts: one line per stream, in start order
    streams = [json.loads(x) for x in (out / "streams.jsonl").read_text().splitlines()]
    assert len(streams) == c["started"] == 200
    assert sorted(r["id"] for r in streams) == sorted(r["request_id"] for r in truth)
    assert [(r["start_ns"], r["id"].split("-")[0]) for r in streams] == sorted(
        (r["start_ns"], r["id"].split("-")[0]) for r in streams)
    assert sum(r["outcome"] == "completed" for r in streams) == c["completed"]
    assert not list(out.glob("streams.part-*")) and not list(out.glob("*.tmp"))
    # exported with a run column (the folder's name), so that runs concatenate
    from hopbench.views._export import export_results

    rows = [json.loads(x) for x in export_results(out, "jsonl")[1].read_text().splitlines()]
    assert len(rows) == 200 and {r["run"] for r in rows} == {"run"} and list(rows[0])[0] == "run"


def _worker_knows_the_emulator(profile: Profile, base_url: str, share: WorkerShare, conn: Any) -> None:
    """Worker target: dies (the run then says "worker K died") unless its share names
    the driver's embedded emulator, a process other than itself."""
    (pid,) = share.emulator_pids
    assert pid != os.getpid() and b"hopbench.emulator" in Path(f"/proc/{pid}/cmdline").read_bytes()
    _process_main(profile, base_url, share, conn)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the emulator's CPU is read from /proc")
def test_run_workers_measure_the_drivers_emulator_apart(tmp_path: Path) -> None:
    """The local engine hands each worker the embedded emulator's pid, and a worker's
    host figures then hold the emulator's CPU over its run (hopbench.engine._saturation)."""
    outcome = _run_local(_profile(2, requests=40), out_dir=tmp_path / "run", on_line=None, progress=None,
                         base_url=None, target=_worker_knows_the_emulator)
    assert outcome.complete, outcome.summary["warnings"]
    # the worker body itself, in this process, against an emulator of its own
    from hopbench.engine._saturation import HostUsage
    from hopbench.driver._workers import run_worker
    from hopbench.emulator import EmbeddedEmulator

    profile = _profile(1, requests=10)
    sent: list[dict[str, Any]] = []
    with EmbeddedEmulator(profile.emulator_config, record_path=None) as emu:
        assert emu.pid is not None
        share = split_load(profile, 1)[0]
        share = WorkerShare(share.index, share.load, share.request_budget, share.arrival_offset_ns, (emu.pid,))
        run_worker(profile, emu.base_url, share, sent.append, lambda: time.time(), install_signals=False)
    (done,) = [m for m in sent if m["kind"] == "done"]
    host = HostUsage.from_json(done["counters"]["host"])
    assert host is not None and host.emulator_cpu_ns is not None and host.emulator_cpu_ns >= 0


def _crash_worker_one(profile: Profile, base_url: str, share: WorkerShare, conn: Any) -> None:
    """Worker target for the crash test: worker 1 dies right after the start."""
    if share.index != 1:
        _process_main(profile, base_url, share, conn)
        return
    conn.send({"kind": "ready", "worker": 1, "host": "test", "pid": os.getpid()})
    conn.recv()
    os._exit(3)


@pytest.mark.slow
def test_run_workers_crash_is_reported_and_the_rest_finish(tmp_path: Path) -> None:
    out = tmp_path / "run"
    outcome = _run_local(_profile(2, requests=60), out_dir=out, on_line=None, progress=None,
                         base_url=None, target=_crash_worker_one)
    s = outcome.summary
    assert not outcome.complete and s["complete"] is False
    assert any("worker 1 died" in w and "status 3" in w for w in s["warnings"])
    d0, d1 = s["worker_detail"]
    assert d0["state"] == "done" and d1["state"] == "crashed"
    assert s["scopes"]["all"]["counters"]["started"] == d0["started"] == 30 == len(_truth(out))
    assert len((out / "streams.jsonl").read_text().splitlines()) == 30  # the living worker's streams


def _children() -> dict[int, str]:
    """This process's children (any thread's): pid -> state letter (Z: exited, not reaped)."""
    pids = [int(c) for t in Path("/proc/self/task").iterdir()
            for c in (t / "children").read_text().split()]
    out = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes():  # multiprocessing's own,
                out[pid] = stat.rpartition(")")[2].split()[0]                           # for the process's life
        except OSError:
            pass
    return out


def _reap_probe(profile: Profile, base_url: str, share: WorkerShare, conn: Any) -> None:
    """Worker target: worker 0 runs and exits; worker 1, before its last message, waits for
    worker 0 to have exited and then to be reaped by the driver (its /proc entry gone), and
    writes what it saw to $HB_REAP_PROBE. The waits are deadlock breakers, not measurements."""
    probe = Path(os.environ["HB_REAP_PROBE"])
    if share.index == 0:
        probe.with_name("pid0").write_text(str(os.getpid()))
        _process_main(profile, base_url, share, conn)
        return

    def state(pid: int) -> str | None:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return None

    def wait_reaped() -> str:
        until = time.monotonic() + 120
        while not probe.with_name("pid0").exists() and time.monotonic() < until:
            time.sleep(0.02)
        pid = int(probe.with_name("pid0").read_text())
        while state(pid) not in ("Z", None) and time.monotonic() < until:  # worker 0 still running
            time.sleep(0.02)
        until = time.monotonic() + 10
        while state(pid) is not None and time.monotonic() < until:
            time.sleep(0.02)
        return "reaped" if state(pid) is None else f"worker 0 still in state {state(pid)} 10 s after its exit"

    class Conn:
        def send(self, msg: dict[str, Any]) -> None:
            if msg.get("kind") == "done":
                probe.write_text(wait_reaped())
            conn.send(msg)

        def recv(self) -> Any:
            return conn.recv()

        def close(self) -> None:
            conn.close()

    _process_main(profile, base_url, share, Conn())


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="children are read from /proc")
def test_run_workers_reap_each_worker_as_it_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that has ended is reaped while the others still run (no zombie until the
    run's end), and once the run returns no child of this process is left."""
    monkeypatch.setenv("HB_REAP_PROBE", str(tmp_path / "probe"))
    before = set(_children())
    outcome = _run_local(_profile(2, requests=20), out_dir=tmp_path / "run", on_line=None, progress=None,
                         base_url=None, target=_reap_probe)
    assert outcome.complete, outcome.summary["warnings"]
    assert (tmp_path / "probe").read_text() == "reaped"
    assert {pid: st for pid, st in _children().items() if pid not in before} == {}


# -- the machine's figures with workers (hopbench.engine._saturation) ---------------------------

MS = 1_000_000


def _lagging_done(k: int, host: dict[str, Any]) -> dict[str, Any]:
    """A worker's "done": its loop 40 ms late (saturated), 50 % of a core, ``host`` measured."""
    rec = Recorder(["chat", "messages"])
    for _ in range(100):
        rec.record_global("loop_lag", 40 * MS)
    return {"kind": "done", "worker": k, "total": rec.snapshot().to_json(),
            "warmup": Recorder(["chat", "messages"]).snapshot().to_json(),
            "counters": {"stop_ns": 10 * NS_PER_S, "ended_ns": 10 * NS_PER_S, "cpu_fractions": [0.5],
                         "host": host},
            "start_skew_ns": 0}


def test_merger_counts_sibling_workers_as_the_runs_own_and_samples_the_machine_once(tmp_path: Path) -> None:
    """2 workers on a 2-CPU machine at 0.6 cores each, the driver 0.05, the emulator 0.6,
    nothing else: the machine 92.5 % busy. No worker blames neighbours (its sibling and
    the driver are the run's own CPU), and generator holds the whole run's figures,
    the machine counted once (fake readings: no clock, no /proc)."""
    from hopbench.engine._saturation import HostSample, HostUsage

    p = _profile(2)
    shares = split_load(p, 2)
    writer = ResultsWriter(tmp_path)
    writer.start({"started_at_unix_s": 0.0})
    ticks = 2 * 10 * 100  # 2 CPUs for 10 s at 100 ticks per s
    readings = iter([(HostSample(0, (0, 0, 0), ((77, 5, 0),)), 0),
                     (HostSample(NS_PER_S // 2, (int(0.925 * ticks), ticks, 0), ((77, 5, 6 * NS_PER_S),)),
                      10 * NS_PER_S)])
    merger = Merger(p, shares, writer, io.StringIO(), {"interrupted_by": None},
                    sample=lambda pids: next(readings))
    merger.emulator_pids = (77,)
    for sh in shares:
        merger.handle({"kind": "ready", "worker": sh.index, "host": merger.hostname, "pid": 100 + sh.index})
    merger.load_window(time.time() - 1.0)  # due: the start is sampled now
    worker_host = HostUsage(10 * NS_PER_S, 6 * NS_PER_S, 2, 0.925, 0.0, 6 * NS_PER_S).to_json()
    for sh in shares:
        merger.handle(_lagging_done(sh.index, worker_host))
    summary, complete = merger.finish(None, "local")
    assert complete
    for d in summary["worker_detail"]:
        assert d["saturated"]
        kinds = [c["kind"] for c in d["saturation"]["causes"]]
        assert kinds == ["client_cpu", "emulator"], d["saturation"]  # not "machine_busy" (neighbours)
        h = d["host_cpu"]
        assert (h["process_cpu_cores"], h["client_cpu_cores"], h["neighbours_cpu_cores"]) == (0.6, 1.25, 0.0)
    g = summary["generator"]
    assert (g["process_cpu_cores"], g["client_cpu_cores"], g["emulator_cpu_cores"]) == (0.05, 1.25, 0.6)
    assert (g["cpus"], g["machine_busy_share"], g["neighbours_cpu_cores"], g["emulator_cpu_note"]) == (
        2, 0.925, 0.0, None)
    sat = g["saturation"]  # the workers' verdicts merged, each cause once with who named it
    assert sat["saturated"] and [c["kind"] for c in sat["causes"]] == ["client_cpu", "emulator"]
    assert all(c["workers"] == [0, 1] and c["figure"].startswith("worker 0: ") for c in sat["causes"])
    assert sat["symptoms"] == ["worker 0: event-loop lag p99 40.0 ms (> 25 ms)",
                               "worker 1: event-loop lag p99 40.0 ms (> 25 ms)"]


def test_merger_workers_on_another_host_are_not_the_drivers_siblings(tmp_path: Path) -> None:
    """Ray: a task on another machine counts only the tasks on its own machine as siblings."""
    from hopbench.engine._saturation import HostSample, HostUsage

    p = _profile(2)
    shares = split_load(p, 2)
    writer = ResultsWriter(tmp_path)
    writer.start({"started_at_unix_s": 0.0})
    readings = iter([(HostSample(0, (0, 0, 0)), 0), (HostSample(NS_PER_S, (1000, 2000, 0)), 10 * NS_PER_S)])
    merger = Merger(p, shares, writer, io.StringIO(), {"interrupted_by": None}, sample=lambda pids: next(readings))
    merger.handle({"kind": "ready", "worker": 0, "host": merger.hostname, "pid": 100})
    merger.handle({"kind": "ready", "worker": 1, "host": merger.hostname + "-elsewhere", "pid": 101})
    merger.load_window(time.time() - 1.0)
    note = "not measured: this worker ran on another machine than the driver's emulator"
    merger.handle(_lagging_done(0, HostUsage(10 * NS_PER_S, 5 * NS_PER_S, 2, 0.5, 0.0).to_json()))
    merger.handle(_lagging_done(1, HostUsage(10 * NS_PER_S, 5 * NS_PER_S, 2, 0.3, 0.0, None, None,
                                             note).to_json()))
    summary, _ = merger.finish(None, "ray")
    d0, d1 = (d["host_cpu"] for d in summary["worker_detail"])
    assert d0["client_cpu_cores"] == 0.6  # itself and the driver, not the task elsewhere
    assert d1["client_cpu_cores"] == 0.5 and d1["emulator_cpu_cores"] is None and d1["emulator_cpu_note"] == note
    assert summary["generator"]["client_cpu_cores"] == 0.6  # the driver's machine: the driver and worker 0


def test_run_worker_on_another_machine_says_the_emulator_is_not_measured(tmp_path: Path) -> None:
    """A Ray task's share names the driver's emulator with the driver's boot id: a task
    on another machine (here: another boot id) leaves it null and says why."""
    from hopbench.engine._saturation import HostUsage
    from hopbench.driver._workers import run_worker
    from hopbench.emulator import EmbeddedEmulator

    profile = _profile(1, requests=10)
    sent: list[dict[str, Any]] = []
    with EmbeddedEmulator(profile.emulator_config, record_path=None) as emu:
        assert emu.pid is not None
        share = split_load(profile, 1)[0]
        share = WorkerShare(share.index, share.load, share.request_budget, share.arrival_offset_ns, (emu.pid,),
                            (1,), "the-boot-id-of-another-machine")
        run_worker(profile, emu.base_url, share, sent.append, lambda: time.time(), install_signals=False)
    (done,) = [m for m in sent if m["kind"] == "done"]
    host = HostUsage.from_json(done["counters"]["host"])
    assert host is not None and host.emulator_cpu_ns is None
    assert host.emulator_note is not None and host.emulator_note.startswith("not measured: ")
