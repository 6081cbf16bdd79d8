"""hopbench.engine._saturation: the saturation verdict tells the client's own CPU, collector
pauses and a busy machine apart, each with its figure (issue 16 item 4); a run whose
latencies include client-side delay is flagged whatever the cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from hopbench.engine._saturation import (GeneratorFigures, HostSample, HostUsage, host_usage, judge, parse_pid_stat,
                                  parse_proc_stat, sample_host)

MS = 1_000_000
S = 1_000_000_000
RUN_NS = 60 * S


def _fig(lag_ms: float = 40.0, cpu: float = 0.3, **kw: object) -> GeneratorFigures:
    args: dict[str, object] = dict(loop_lag_ns=int(lag_ms * MS), schedule_lag_ns=0, cpu_mean=cpu, cpu_max=cpu,
                                   run_ns=RUN_NS)
    args.update(kw)
    return GeneratorFigures(**args)  # type: ignore[arg-type]


def _host(process_cores: float, busy: float | None = None, steal: float | None = None,
          cpus: int = 2, emulator_cores: float | None = None) -> HostUsage:
    emu = None if emulator_cores is None else int(emulator_cores * RUN_NS)
    return HostUsage(RUN_NS, int(process_cores * RUN_NS), cpus, busy, steal, emu)


def _kinds(f: GeneratorFigures) -> list[str]:
    return [c.kind for c in judge(f).causes]


def test_judge_not_saturated_names_no_cause() -> None:
    # long collector pauses and a busy machine, but the loop kept its schedule: latencies hold
    v = judge(_fig(lag_ms=5.0, gc_collections=3, gc_pause_ns=2 * S, gc_pause_max_ns=900 * MS,
                   host=_host(0.2, busy=1.0, steal=0.3)))
    assert (v.saturated, v.symptoms, v.causes, v.warning()) == (False, (), (), None)


def test_judge_client_cpu_advises_workers() -> None:
    v = judge(_fig(cpu=0.9, host=_host(0.92, busy=0.6, steal=0.0)))
    assert v.saturated and _kinds(_fig(cpu=0.9)) == ["client_cpu"]
    assert [c.kind for c in v.causes] == ["client_cpu"]
    w = str(v.warning())
    assert w.startswith("load generator saturated: event-loop lag p99 40.0 ms (> 25 ms)")
    assert "event loop used 90% of one core" in w and "add load generators with --workers auto" in w


def test_judge_client_cpu_of_the_whole_process_counts() -> None:
    # the loop thread at 50 %, the process at 95 % (the publishing thread holds the GIL)
    v = judge(_fig(cpu=0.5, host=_host(0.95, busy=0.7, steal=0.0)))
    assert [c.kind for c in v.causes] == ["client_cpu"]
    assert "(the whole process 95%)" in v.causes[0].figure


def test_judge_collector_pauses_with_their_figure() -> None:
    v = judge(_fig(lag_ms=260.0, cpu=0.4, gc_collections=12, gc_pause_ns=1_800 * MS,
                   gc_pause_max_ns=240 * MS, host=_host(0.45, busy=0.5, steal=0.0)))
    assert [c.kind for c in v.causes] == ["collector"]
    c = v.causes[0]
    assert "paused hopbench 12 times for 1800.0 ms in all (3.0% of the run), the longest 240.0 ms" in c.figure
    assert "lower the load" not in str(v.warning())
    # short pauses, however many, do not explain a 260 ms lag: no collector cause
    assert "collector" not in _kinds(_fig(lag_ms=260.0, gc_collections=5000, gc_pause_ns=3 * S,
                                          gc_pause_max_ns=4 * MS, host=_host(0.4, busy=0.5, steal=0.0)))


def test_judge_machine_busy_by_steal() -> None:
    v = judge(_fig(cpu=0.25, host=_host(0.3, busy=0.7, steal=0.08)))
    assert [c.kind for c in v.causes] == ["machine_busy"]
    assert "the hypervisor took 8.0% of the machine's CPU time (steal)" in v.causes[0].figure
    assert "more workers would not add CPU here" in v.causes[0].advice


def test_judge_machine_busy_by_neighbours_with_proc_stat() -> None:
    v = judge(_fig(cpu=0.3, host=_host(0.35, busy=0.97, steal=0.0)))
    assert [c.kind for c in v.causes] == ["machine_busy"]
    assert ("the machine's 2 CPUs were 97% busy and other processes on this machine used 1.6 cores "
            "while hopbench used 35% of one core") in v.causes[0].figure


def test_judge_emulator_not_neighbours_when_it_filled_the_machine() -> None:
    # 2 CPUs 97 % busy = 1.94 cores: hopbench 0.35, its embedded emulator 0.95, the rest 0.64
    v = judge(_fig(cpu=0.3, host=_host(0.35, busy=0.97, steal=0.0, emulator_cores=0.95)))
    assert [c.kind for c in v.causes] == ["emulator", "machine_busy"]
    # the emulator alone: the rest (0.09 cores, under 10 % of the CPUs) is not named
    v = judge(_fig(cpu=0.7, host=_host(0.75, busy=0.92, steal=0.0, emulator_cores=1.0)))
    assert [c.kind for c in v.causes] == ["emulator"]
    c = v.causes[0]
    assert c.figure == ("the machine's 2 CPUs were 92% busy and hopbench's own emulator (a child process on "
                        "this machine) used 100% of one core, other processes 0.1 cores, while hopbench used "
                        "75% of one core")
    assert "share this machine's 2 CPUs" in c.advice and "external target.url" in c.advice
    w = str(v.warning())
    assert "neighbours" not in w and "quieter machine" not in w and "emulator" in w
    assert v.to_json()["causes"][0]["kind"] == "emulator"


def test_judge_neighbours_still_busy_without_the_emulator() -> None:
    # 4 CPUs 98 % busy = 3.92 cores: hopbench 0.4, emulator 0.3 (under 10 % of the CPUs), the rest 3.22
    v = judge(_fig(cpu=0.35, host=_host(0.4, busy=0.98, steal=0.0, cpus=4, emulator_cores=0.3)))
    assert [c.kind for c in v.causes] == ["machine_busy"]
    assert v.causes[0].figure == ("the machine's 4 CPUs were 98% busy and other processes on this machine used "
                                  "3.2 cores while hopbench used 40% of one core and its emulator 30% of one core")
    assert "quieter machine" in v.causes[0].advice and "emulator" not in v.causes[0].advice
    # neighbours and the emulator both took a share: both named, more cores first
    v = judge(_fig(cpu=0.35, host=_host(0.4, busy=0.98, steal=0.0, cpus=4, emulator_cores=0.9)))
    assert [c.kind for c in v.causes] == ["machine_busy", "emulator"]
    assert "2.6 cores" in v.causes[0].figure and "used 90% of one core" in v.causes[1].figure


def test_judge_machine_busy_inferred_without_proc_stat() -> None:
    # no machine counters: the process used little CPU while its loop was late
    v = judge(_fig(cpu=0.2, host=_host(0.22)))
    assert [c.kind for c in v.causes] == ["machine_busy"]
    assert "the client used 22% of one core while it lagged" in v.causes[0].figure
    assert "other processes on this machine" in v.causes[0].figure


def test_judge_unexplained_is_still_flagged_with_the_figures() -> None:
    # the machine had idle CPUs, hopbench and the collector were moderate: no cause passes
    v = judge(_fig(cpu=0.3, gc_pause_ns=60 * MS, gc_pause_max_ns=10 * MS, host=_host(0.3, busy=0.5, steal=0.0)))
    assert v.saturated and [c.kind for c in v.causes] == ["unexplained"]
    assert "the machine's CPUs were 50% busy" in v.causes[0].figure


def test_judge_several_causes_strongest_first_and_other_symptoms() -> None:
    v = judge(_fig(lag_ms=80.0, cpu=0.97, schedule_lag_ns=50 * MS, gc_collections=4, gc_pause_ns=900 * MS,
                   gc_pause_max_ns=300 * MS, host=_host(1.0, busy=1.0, steal=0.05)))
    # a full machine: the client (1.0 cores) and the rest (1.0 cores, steal included) tie, the
    # client first; the collector's pauses (wall time, stretched by the wait for a CPU) come last
    assert [c.kind for c in v.causes] == ["client_cpu", "machine_busy", "collector"]
    assert [c.role for c in v.causes] == ["primary", "secondary", "secondary"]
    assert v.causes[1].figure == ("other processes on this machine (neighbours) used 1.0 cores (of which the "
                                  "hypervisor took 5.0% of the CPU time: steal)")
    assert v.symptoms == ("event-loop lag p99 80.0 ms (> 25 ms)", "open-loop schedule lag p99 50.0 ms "
                          "(arrivals left late)", "CPU 97% of one core")
    assert [c["role"] for c in v.to_json()["causes"]] == ["primary", "secondary", "secondary"]
    assert v.to_json()["causes"][2] == {"kind": "collector", "advice": None, "role": "secondary",
                                        "figure": v.causes[2].figure}


def _advice_count(w: str) -> int:
    """How many remedies a warning gives (each cause's advice names one of these)."""
    return sum(x in w for x in ("quieter machine", "external target.url", "add workers", "more machines",
                                "more CPUs", "profile it"))


def test_judge_busy_machine_names_one_primary_cause_with_one_advice() -> None:
    """A busy machine (profiles/open-loop.toml on a shared 2-core box): neighbours 0.9 cores,
    the embedded emulator 0.6, hopbench 0.45. Both used 10 % of the CPUs or more; the verdict
    named both with their remedies ("use a quieter machine" beside "the client and the
    emulator share this machine's CPUs"). Now: the largest share is primary, with the only
    advice; the emulator's share follows as secondary, without advice."""
    v = judge(_fig(cpu=0.4, schedule_lag_ns=60 * MS, host=_host(0.45, busy=0.975, steal=0.0, emulator_cores=0.6)))
    assert [(c.kind, c.role) for c in v.causes] == [("machine_busy", "primary"), ("emulator", "secondary")]
    assert v.causes[1].advice is None
    w = str(v.warning())
    assert _advice_count(w) == 1 and "quieter machine" in w and "share this machine's" not in w
    assert w.endswith("; secondary: hopbench's own emulator (a child process on this machine) used 60% of "
                      "one core")
    # the same machine with the emulator the larger: the emulator is primary, neighbours secondary
    v = judge(_fig(cpu=0.4, host=_host(0.45, busy=0.975, steal=0.0, emulator_cores=0.9)))
    assert [(c.kind, c.role) for c in v.causes] == [("emulator", "primary"), ("machine_busy", "secondary")]
    w = str(v.warning())
    assert _advice_count(w) == 1 and "external target.url" in w and "quieter" not in w
    assert w.endswith("; secondary: other processes on this machine (neighbours) used 0.6 cores")
    # a share under 10 % of the CPUs is not material: not mentioned at all
    v = judge(_fig(cpu=0.7, host=_host(0.75, busy=0.95, steal=0.0, emulator_cores=1.0)))
    assert [c.kind for c in v.causes] == ["emulator"] and "secondary" not in str(v.warning())


def test_judge_busy_machine_weighs_the_clients_own_share_too() -> None:
    """The client at 80 % of a core or more is a cause, weighed like the others on a full
    machine: neighbours taking more make it secondary (more workers would find no CPU);
    as the largest share it is primary, and its advice is not --workers there."""
    v = judge(_fig(cpu=0.85, host=_host(0.85, busy=0.99, steal=0.0)))  # neighbours 1.13 cores
    assert [(c.kind, c.role) for c in v.causes] == [("machine_busy", "primary"), ("client_cpu", "secondary")]
    assert v.causes[1].figure == "hopbench's event loop used 85% of one core"
    assert _advice_count(str(v.warning())) == 1
    v = judge(_fig(cpu=0.9, host=_host(0.95, busy=0.97, steal=0.0, emulator_cores=0.5)))  # neighbours 0.49
    assert [c.kind for c in v.causes] == ["client_cpu", "emulator", "machine_busy"]
    assert v.causes[0].advice is not None and "--workers" not in v.causes[0].advice
    assert "more CPUs" in v.causes[0].advice and _advice_count(str(v.warning())) == 1
    # an idle machine: the client alone, --workers helps
    v = judge(_fig(cpu=0.9, gc_collections=3, gc_pause_ns=900 * MS, gc_pause_max_ns=300 * MS,
                   host=_host(0.92, busy=0.5, steal=0.0)))
    assert [c.kind for c in v.causes] == ["client_cpu", "collector"] and "--workers auto" in str(v.warning())


def test_parse_proc_stat_and_host_usage() -> None:
    text = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\nintr 1\n"
    assert parse_proc_stat(text) == (170, 990, 10)
    assert parse_proc_stat("cpu  1 2 3\n") is None
    assert parse_proc_stat("cpu  a b c d\n") is None
    assert parse_proc_stat("") is None
    a = HostSample(1 * S, (170, 990, 10))
    b = HostSample(2 * S, (170 + 150, 990 + 200, 10 + 20))
    u = host_usage(a, b, 4 * S, cpus=2)
    assert (u.process_cores, u.machine_busy_share, u.steal_share) == (0.25, 0.75, 0.1)
    assert u.others_cores == pytest.approx(1.25)
    assert HostUsage.from_json(u.to_json()) == u
    assert HostUsage.from_json(None) is None and HostUsage.from_json({"wall_ns": 1}) is None
    assert host_usage(HostSample(0, None), b, S, cpus=2).machine_busy_share is None


def test_parse_pid_stat_counts_fields_after_the_command_name() -> None:
    # fields 14, 15 (utime, stime) and 22 (starttime); a command name with spaces and ')'
    rest = "S 1 2 3 0 -1 4194304 10 0 0 0 70 30 5 6 20 0 3 0 4242 1000 200 18446744073709551615"
    assert parse_pid_stat(f"123 (python3) {rest}\n") == (100, 4242)
    assert parse_pid_stat(f"123 (a b) c)) {rest}\n") == (100, 4242)
    assert parse_pid_stat("123 (python3) S 1 2\n") is None
    assert parse_pid_stat("garbage") is None and parse_pid_stat("") is None
    assert parse_pid_stat(f"123 (x) {rest.replace('70', 'x')}") is None


def test_host_usage_keeps_the_emulator_apart() -> None:
    a = HostSample(0, (0, 0, 0), ((7, 50, 1 * S),))
    b = HostSample(2 * S, (300, 400, 0), ((7, 50, 3 * S),))
    u = host_usage(a, b, 4 * S, cpus=2)  # 4 s: hopbench 0.5 core, the emulator 0.5, the machine 75 % busy
    assert (u.emulator_cpu_ns, u.emulator_cores, u.process_cores) == (2 * S, 0.5, 0.5)
    assert u.others_cores == pytest.approx(0.5)
    assert HostUsage.from_json(u.to_json()) == u
    # no emulator, or one gone (or its pid reused: another start time) by the end: not measured
    assert host_usage(HostSample(0, None), b, S).emulator_cpu_ns is None
    assert host_usage(a, HostSample(1, None), S).emulator_cpu_ns is None
    assert host_usage(a, HostSample(1, None, ((7, 99, 5 * S),)), S).emulator_cpu_ns is None
    # one more process at the end than at the start: its CPU before the start is unknown
    assert host_usage(a, HostSample(1, None, ((7, 50, 3 * S), (8, 60, 1 * S))), S).emulator_cpu_ns is None
    # a summary written before the figure existed reads as not measured
    old = {k: v for k, v in u.to_json().items() if k != "emulator_cpu_ns"}
    assert HostUsage.from_json(old) == HostUsage(4 * S, 2 * S, 2, 0.75, 0.0, None)


def test_sample_host_reads_the_emulators_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 0 1 8 0 0 0 0 0 0\n")
    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "stat").write_text("41 (python) S" + " 0" * 10 + " 3 4" + " 0" * 6 + " 77 0 0\n")
    s = sample_host(stat, emulator_pids=(41, 42), proc=tmp_path)  # 42: gone, left out
    (pid, start, cpu_ns), = s.emulators
    assert (pid, start) == (41, 77) and cpu_ns > 0 and cpu_ns % 7 == 0  # 7 ticks, whatever the tick
    assert sample_host(stat).emulators == ()


def test_sample_host_reads_the_counters(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 0 1 8 0 0 0 0 0 0\n")
    s = sample_host(stat)
    assert s.proc_stat == (2, 10, 0) and s.process_cpu_ns > 0
    assert sample_host(tmp_path / "missing").proc_stat is None


def test_analyse_warns_with_the_cause_and_keeps_the_verdict() -> None:
    """The run's judgement (hopbench.driver._judge.analyse) uses the verdict: a loop late because of
    the collector is flagged, its warning names the pauses, not --workers."""
    from hopbench.config._profile import parse_profile
    from hopbench.measure._recorder import Recorder
    from hopbench.driver._judge import analyse
    from hopbench.engine._runner import RunStats

    profile = parse_profile('[target]\nurl = "http://127.0.0.1:9"\n[run]\nduration_s = 60\n[load]\n'
                            'concurrency = 1\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\n', "p.toml", env={})
    rec = Recorder(["chat-m"])
    for i in range(1000):
        rec.record_global("loop_lag", (300 if i % 50 == 0 else 1) * MS)  # 2 % of the probes 300 ms late
    stats = RunStats(stop_ns=RUN_NS, ended_ns=RUN_NS, cpu_fractions=[0.3] * 60, gc_collections=20,
                     gc_pause_ns=6 * S, gc_pause_max_ns=320 * MS, host=_host(0.35, busy=0.4, steal=0.0).to_json())
    sat, warnings, load = analyse(profile, stats, rec.snapshot())
    (w,) = [x for x in warnings if x.startswith("load generator saturated")]
    assert sat and "garbage collector paused hopbench 20 times" in w and "--workers or lower the load" not in w
    assert [c["kind"] for c in load["saturation"]["causes"]] == ["collector"]


# -- --workers: the run's own processes are not neighbours ------------------------------


def test_judge_workers_siblings_are_the_runs_own_cpu_not_neighbours() -> None:
    """2 workers on 2 CPUs, 0.78 cores each, the driver 0.25, nothing else: the machine
    is 90.5 % busy. Each worker used under 80 % of a core, so the busy machine is judged;
    its sibling and the driver are the run's own CPU (client_cpu), not neighbours."""
    alone = _host(0.78, busy=0.905, steal=0.0)  # what a worker measured by itself
    v_old = judge(_fig(cpu=0.6, host=alone))
    assert [c.kind for c in v_old.causes] == ["machine_busy"]  # without its siblings: blamed on neighbours
    from hopbench.engine._saturation import with_siblings

    host = with_siblings(alone, 0.78 + 0.25)
    assert host.siblings_cores == pytest.approx(1.03) and host.client_cores == pytest.approx(1.81)
    assert host.others_cores == pytest.approx(0.0, abs=1e-9)
    v = judge(_fig(cpu=0.6, host=host))
    assert [c.kind for c in v.causes] == ["client_cpu"]
    assert "this run's own load generator used 1.8 cores" in v.causes[0].figure
    assert "spread the workers over more machines" in v.causes[0].advice
    assert "took 1.8 of this machine's 2 CPUs" in v.causes[0].advice


def test_judge_workers_with_the_emulator_and_real_neighbours() -> None:
    # workers 0.6 + 0.6, driver 0.05, emulator 0.5, neighbours 0.3: 2.05 of 2 CPUs (busy 1.0)
    host = HostUsage(RUN_NS, int(0.6 * RUN_NS), 2, 1.0, 0.0, int(0.5 * RUN_NS), int(0.65 * RUN_NS))
    assert host.others_cores == pytest.approx(0.25)
    assert _kinds(_fig(cpu=0.5, host=host)) == ["client_cpu", "emulator", "machine_busy"]


def test_run_host_counts_the_machine_once_and_every_workers_cpu() -> None:
    from hopbench.engine._saturation import run_host

    # the driver's one sample over 10 s: 0.1 cores of its own, the machine 95 % of 2 CPUs, the
    # emulator 0.5; two workers over their own (shorter) spans at 0.6 cores each
    driver = HostUsage(10 * S, S, 2, 0.95, 0.0, 5 * S)
    workers = [HostUsage(9 * S, int(5.4 * S), 2, 0.97, 0.0, 4 * S) for _ in range(2)]
    run = run_host(driver, workers)
    assert run.client_cores == pytest.approx(1.3) and run.emulator_cores == pytest.approx(0.5)
    assert run.machine_busy_share == 0.95 and run.others_cores == pytest.approx(0.1)
    assert HostUsage.from_json(run.to_json()) == run


def _fake_proc(root: Path, boot_id: str, pids: dict[int, int]) -> Path:
    (root / "sys" / "kernel" / "random").mkdir(parents=True)
    (root / "sys" / "kernel" / "random" / "boot_id").write_text(boot_id + "\n")
    for pid, start in pids.items():
        (root / str(pid)).mkdir()
        fields = ["S"] + ["0"] * 10 + ["7", "3"] + ["0"] * 6 + [str(start)] + ["0"] * 5
        (root / str(pid) / "stat").write_text(f"{pid} (python (emu)) " + " ".join(fields) + "\n")
    return root


def test_emulator_here_only_on_the_drivers_machine(tmp_path: Path) -> None:
    """A Ray task measures the driver's emulator only on its machine (same boot id, the
    same process start time); elsewhere a reason, never a silent absence."""
    from hopbench.engine._saturation import emulator_here, read_boot_id

    proc = _fake_proc(tmp_path, "boot-a", {4242: 1000})
    assert read_boot_id(proc) == "boot-a"
    assert emulator_here((4242,), (1000,), "boot-a", proc) == ((4242,), None)
    assert emulator_here((), (), None, proc) == ((), None)
    pids, why = emulator_here((4242,), (1000,), "", proc)  # the driver could not read its boot id
    assert pids == () and why is not None and "could not identify" in why
    pids, why = emulator_here((4242,), (1000,), "boot-b", proc)
    assert pids == () and why is not None and "another machine" in why
    pids, why = emulator_here((4242,), (999,), "boot-a", proc)  # the pid names another process here
    assert pids == () and why is not None and "pid 4242" in why
    pids, why = emulator_here((4243,), (1000,), "boot-a", proc)  # no such process here
    assert pids == () and why is not None and "not visible" in why


def test_cpu_phrase_and_the_terminals_cpu_line() -> None:
    """The machine's figures of summary.json ``generator`` on one line, the same words in the
    terminal and report.html (hopbench._format.cpu_phrase); a null figure's note is shown."""
    import io

    from rich.console import Console

    from hopbench._format import cpu_phrase
    from hopbench.views._summary_table import render_summary

    gen = {"client_cpu_cores": 1.25, "emulator_cpu_cores": 0.6, "emulator_cpu_note": None,
           "neighbours_cpu_cores": 0.0, "cpus": 2, "machine_busy_share": 0.925}
    assert cpu_phrase(gen, 2) == ("client 1.25 cores (2 workers and the driver) · emulator 0.600 cores · "
                                  "neighbours 0.000 cores · machine: 2 CPUs 92% busy")
    assert cpu_phrase(dict(gen, emulator_cpu_cores=None, emulator_cpu_note="not measured: x"), 1).startswith(
        "client 1.25 cores · emulator not measured: x · ")
    assert cpu_phrase({"cpu_mean": 0.3}) == ""  # an older summary: no line
    buf = io.StringIO()
    render_summary({"workers": 2, "generator": gen, "scopes": {}}, Console(file=buf, width=200, color_system=None))
    assert "cpu: client 1.25 cores (2 workers and the driver)" in buf.getvalue()
