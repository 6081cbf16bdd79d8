"""One cause, one sentence, one cure (issue 39 item 7; hopbench/_advice.py).

A saturated run got "use a quieter machine" and "lower the load or use a real target"
together (9 of 13 runs), and the embedded emulator's lateness was put down to its own
overload when it used 0.1 cores and neighbours took the CPU. The class is covered
three ways: the registry itself (one cause and one cure each, no cure for two kinds),
the package's source (no remedy written outside the registry), and what a run can
emit (every saturation verdict over a grid of machines, the emulator's lateness
warning, a run's warnings together: each cure at most once).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

import hopbench
from hopbench._advice import ADVICE, SAME_CURE, one_cure_each
from hopbench.driver._common import emulator_warnings
from hopbench.engine._saturation import GeneratorFigures, HostUsage, judge

PACKAGE = Path(hopbench.__file__).parent
CURES = sorted({a.cure for a in ADVICE.values() if a.cure}, key=len, reverse=True)
NS = 1_000_000_000


def _cures_in(text: str) -> list[str]:
    """The registered cures ``text`` gives (the longest match at each place)."""
    found = []
    for c in CURES:
        if f": {c}" in text and not any(c in f for f in found):
            found.append(c)
    return found


def test_advice_each_entry_one_cause_one_cure() -> None:
    causes = [a.cause for a in ADVICE.values()]
    assert len(causes) == len(set(causes)), "two entries name one cause"
    kind_of: dict[str, str] = {}
    for name, a in ADVICE.items():
        assert a.kind and a.cause and a.cure, name
        for sentence in (a.cause, a.cure):  # one sentence each
            assert ". " not in sentence.replace("e.g. ", "") and not sentence.endswith("."), (name, sentence)
        # a cure belongs to one kind of cause: one cause, one cure
        assert kind_of.setdefault(a.cure, a.kind) == a.kind, (name, a.cure, kind_of[a.cure])
        # no cure holds another one (a warning would then give two)
        assert not [c for c in CURES if c != a.cure and c in a.cure and not a.cure.endswith(c)], name


def test_advice_no_remedy_outside_the_registry() -> None:
    """Every cure's text appears in the package only in hopbench/_advice.py: a warning
    that gives a remedy takes it from the registry (the class: every warning)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_advice.py":
            continue
        # the source's string literals joined, as Python joins adjacent ones
        text = re.sub(r'"\s*\n\s*(f?)"', "", path.read_text(encoding="utf-8"))
        for cure in CURES:
            assert cure not in text, f"{path.relative_to(PACKAGE.parent)} writes the cure {cure!r} itself"


def _host(busy: float | None, emu: float | None, own: float, cpus: int = 2, steal: float | None = 0.0,
          sib: float | None = None) -> HostUsage:
    return HostUsage(wall_ns=10 * NS, process_cpu_ns=int(own * 10 * NS), cpus=cpus, machine_busy_share=busy,
                     steal_share=steal, emulator_cpu_ns=None if emu is None else int(emu * 10 * NS),
                     siblings_cpu_ns=None if sib is None else int(sib * 10 * NS))


GRID = list(itertools.product((None, 0.5, 0.99), (None, 0.1, 0.9), (0.2, 0.9, 0.97), (0.0, 0.05), (None, 1.0),
                              (0, 300_000_000)))


@pytest.mark.parametrize(("busy", "emu", "own", "steal", "sib", "gc_ns"), GRID)
def test_advice_every_saturation_verdict_gives_one_cure(busy: float | None, emu: float | None, own: float,
                                                       steal: float, sib: float | None, gc_ns: int) -> None:
    f = GeneratorFigures(cpu_mean=own, cpu_max=own, loop_lag_ns=40_000_000, schedule_lag_ns=0,
                         gc_collections=10 if gc_ns else 0, gc_pause_ns=gc_ns, gc_pause_max_ns=gc_ns // 5,
                         run_ns=10 * NS, host=_host(busy, emu, own, steal=steal, sib=sib))
    warning = judge(f).warning()
    assert warning is not None
    assert len(_cures_in(warning)) == 1, warning


def _truth(tmp_path: Path, lag_ms: float) -> Path:
    path = tmp_path / "ground_truth.jsonl"
    path.write_text("".join(json.dumps({"lag_max_ns": int(lag_ms * 1e6)}) + "\n" for _ in range(16)))
    return path


def test_advice_emulator_lateness_is_judged_by_its_own_cpu(tmp_path: Path) -> None:
    """16 streams, the emulator at 0.1 cores, neighbours on every CPU: it waited for a
    CPU, it was not overloaded (the old warning said "lower the load or use a real target")."""
    truth = _truth(tmp_path, 30)
    starved = emulator_warnings(truth, _host(0.99, 0.1, 0.3))
    assert starved and "used 10% of one core" in starved[0] and ADVICE["emulator_starved"].text in starved[0]
    assert ADVICE["emulator_overloaded"].cure not in starved[0]
    busy = emulator_warnings(truth, _host(0.99, 0.95, 0.3))
    assert ADVICE["emulator_overloaded"].text in busy[0]
    assert ADVICE["emulator_overloaded"].text in emulator_warnings(truth)[0]  # not measured: as before
    assert ADVICE["emulator_late"].text in emulator_warnings(truth, _host(0.3, 0.1, 0.3))[0]
    assert emulator_warnings(_truth(tmp_path, 1), _host(0.99, 0.1, 0.3)) == []  # on time: nothing
    # the CPU it waited for was hopbench's own (0.87 cores against the neighbours' 0.39 of 1.98 busy):
    # not "neighbours took it" (a new user's finding), and the cure is the emulator's, not a quieter machine
    crowded = emulator_warnings(_truth(tmp_path, 30), _host(0.99, 0.59, 0.87))
    assert ADVICE["emulator_crowded"].text in crowded[0], crowded
    assert "hopbench's load generator 0.87 cores, neighbours 0.52" in crowded[0], crowded
    assert ADVICE["emulator_starved"].cause not in crowded[0]


def test_advice_a_runs_warnings_give_each_cure_once(tmp_path: Path) -> None:
    """The saturation verdict (neighbours) and the emulator's lateness (starved by the same
    neighbours): one cure, given by the first; the second keeps its cause and figures."""
    host = _host(0.99, 0.1, 0.3)
    f = GeneratorFigures(cpu_mean=0.3, cpu_max=0.4, loop_lag_ns=40_000_000, schedule_lag_ns=0, run_ns=10 * NS,
                         host=host)
    saturated = judge(f).warning()
    assert saturated is not None and ADVICE["neighbours"].cure in saturated
    late = emulator_warnings(_truth(tmp_path, 30), host)
    out = one_cure_each([saturated, *late, *late])
    assert sum(len(_cures_in(w)) for w in out) == 1, out
    assert out[0] == saturated and SAME_CURE in out[1] and "p90 30.0 ms" in out[1]


def test_advice_error_bound_takes_the_saturation_cure() -> None:
    """The figures' error-bound warning gave "more load generators (--workers N) or a
    quieter machine" (two cures) beside the saturation verdict's own: it now gives the
    verdict's cure, once (one_cure_each), and one registered cure otherwise."""
    from hopbench.measure._error_bound import error_bound_warnings, uncertain_note

    metrics = {"ttft": {"p50": 20.0, "p99": 25.5, "error_bound_ms": {"p50": 0.1, "p99": 21.8}}}
    alone = error_bound_warnings(metrics)
    assert alone and _cures_in(alone[0]) == [ADVICE["client_read_late"].cure], alone
    assert _cures_in(uncertain_note()) == []  # the table's key: the warnings give the cure
    saturated = f"load generator saturated: lag; cause: neighbours: {ADVICE['neighbours'].text}"
    out = one_cure_each([saturated, *error_bound_warnings(metrics, cure=ADVICE["neighbours"].cure)])
    assert out[1].endswith('cure: as for "load generator saturated" above') and \
        sum(len(_cures_in(w)) for w in out) == 1, out
    two = error_bound_warnings(dict(metrics, itl=metrics["ttft"]))
    assert one_cure_each(two)[1].endswith('cure: as for "error bound: all ttft" above'), two


def test_advice_error_bound_on_a_machine_with_no_free_core_takes_its_busy_machine_cure() -> None:
    """Issue 36: a run not saturated, on 2 CPUs that neighbours kept busy (1.7 cores): the
    error-bound warning said "--workers auto", which would start no second worker there. It
    now gives the busy machine's cure; with a core free it still names --workers auto."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._judge import analyse
    from hopbench.engine._runner import RunStats
    from hopbench.engine._saturation import no_free_core
    from hopbench.measure._recorder import Recorder

    ms = 1_000_000
    rec = Recorder(["chat"])
    for i in range(100):  # ttft ~150 ms, known only to 100 ms: uncertain
        rec.record("chat", "ttft", 150 * ms + i * ms // 10)
        rec.record_bound("chat", "ttft", 150 * ms + i * ms // 10, 100 * ms, 0)
    total = rec.snapshot()
    profile = parse_profile('[run]\nduration_s = 10\n[load]\nconcurrency = 2\n[target]\nurl = "http://x"\n'
                            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\n', env={})

    def bound_warning(host: HostUsage) -> str:
        stats = RunStats()
        stats.host = host.to_json()
        saturated, warnings, _ = analyse(profile, stats, total)
        assert not saturated
        (w,) = [x for x in warnings if x.startswith("error bound:")]
        return w

    busy = _host(0.97, 0.1, 0.2)  # neighbours 1.64 cores, the emulator 0.1, hopbench 0.2
    assert no_free_core(busy) == "neighbours"
    assert _cures_in(bound_warning(busy)) == [ADVICE["neighbours"].cure]
    quiet = _host(0.3, 0.1, 0.2)  # 1.7 cores free: a second worker has one
    assert no_free_core(quiet) is None
    assert _cures_in(bound_warning(quiet)) == [ADVICE["client_read_late"].cure]
    # no idle core by --workers auto's own rule (1.4 of 2 taken by others), though 25 % idle
    assert no_free_core(_host(0.75, 0.0, 0.1)) == "neighbours"
    assert no_free_core(_host(0.75, 0.0, 0.1), workers=2) == "neighbours"
    assert no_free_core(_host(0.99, 1.2, 0.2)) == "emulator"
    assert no_free_core(_host(0.99, 0.1, 0.9, sib=0.9)) == "run_fills_machine"
    assert no_free_core(_host(None, 0.1, 0.2)) is None and no_free_core(None) is None


def test_advice_a_one_process_run_is_never_told_to_add_workers() -> None:
    """A new user's finding: a gateway-overhead run's error-bound warning said "--workers auto:
    one per free core", and its saturation verdict "add load generators with --workers auto";
    `--workers auto` is refused with [upstream] (and with [[arm]]). Both now give the one-process
    cure; the same profile without [upstream] still names --workers auto."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._judge import analyse
    from hopbench.engine._runner import RunStats
    from hopbench.measure._recorder import Recorder

    ms = 1_000_000
    rec = Recorder(["chat"])
    for i in range(100):  # ttft ~150 ms, known only to 100 ms: uncertain
        rec.record("chat", "ttft", 150 * ms + i * ms // 10)
        rec.record_bound("chat", "ttft", 150 * ms + i * ms // 10, 100 * ms, 0)
    for i in range(200):  # the event loop 60 ms late at p99: saturated
        rec.record_global("loop_lag", 60 * ms)
    total = rec.snapshot()
    base = ('[run]\nduration_s = 10\n[load]\nconcurrency = 2\n[target]\nurl = "http://127.0.0.1:8080"\n'
            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\n')
    quiet = _host(0.3, 0.0, 0.95)  # hopbench itself busy, 1 core free
    for text, one in ((base, False), (base + '[upstream]\nlisten = "127.0.0.1:9100"\n', True)):
        stats = RunStats()
        stats.host = quiet.to_json()
        stats.cpu_fractions = [0.95] * 10
        saturated, warnings, _ = analyse(parse_profile(text, env={}), stats, total)
        (bound,) = [x for x in warnings if x.startswith("error bound:")]
        sat = [x for x in warnings if x.startswith("load generator saturated")]
        assert saturated and sat, warnings  # both warnings are there to read
        said = " ".join([bound, *sat])
        if one:
            assert "--workers" not in said, said
            assert ADVICE["one_process"].cure in said, said
        else:
            assert "--workers auto" in said, said


def test_advice_error_bound_of_a_workers_run_takes_the_drivers_machine_figures() -> None:
    """A new user's `--workers 2` run on a machine neighbours kept busy: its error-bound warning
    said "--workers auto: one per free core" under worker warnings saying "more workers would
    not add CPU here". The merged counters hold no machine figures (two workers' hosts merge to
    none), so the judge reads the driver's sample of the machine (RunEnd.host)."""
    from hopbench.config._profile import parse_profile
    from hopbench.driver._common import base_meta
    from hopbench.driver._judge import judge
    from hopbench.driver._share import share_profile, split_load
    from hopbench.driver._summary import Part, RunEnd, WorkerInfo
    from hopbench.engine._runner import RunStats
    from hopbench.measure._counters import RunCounters
    from hopbench.measure._recorder import Recorder, Snapshot

    ms = 1_000_000
    profile = parse_profile('[run]\nduration_s = 10\n[load]\nconcurrency = 4\n[target]\nurl = "http://x"\n'
                            '[[scenario]]\nname = "chat"\nprotocol = "chat"\nmodel = "m"\n', env={})
    busy = _host(0.97, 0.1, 0.2)  # neighbours took the machine: no core for another worker
    snaps = []
    for _ in range(2):
        rec = Recorder(["chat"])
        for i in range(100):  # ttft ~150 ms, known only to 100 ms: uncertain
            rec.record("chat", "ttft", 150 * ms + i * ms // 10)
            rec.record_bound("chat", "ttft", 150 * ms + i * ms // 10, 100 * ms, 0)
        snaps.append(rec.snapshot())
    total = Snapshot.merge(snaps)
    parts = [Part(share_profile(profile, sh), RunCounters.of(RunStats(stop_ns=10 * NS, host=busy.to_json()),
                                                             snaps[sh.index]),
                  snaps[sh.index], WorkerInfo(sh.index, "h", 1, "done", None, {"concurrency": 2}))
             for sh in split_load(profile, 2)]
    meta = dict(base_meta(profile), started_at_unix_s=1.0)
    for host, cure in ((busy.to_json(), ADVICE["neighbours"].cure), (None, ADVICE["client_read_late"].cure)):
        doc = judge(profile, parts, total, None, meta, RunEnd(ended_at_unix_s=12.0, intervals=10, host=host))
        (w,) = [x for x in doc.to_json()["warnings"] if x.startswith("error bound:")]
        assert _cures_in(w) == [cure], w
