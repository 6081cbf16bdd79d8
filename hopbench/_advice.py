"""One cause, one sentence, one cure: the remedies hopbench's warnings give, defined once.

Role: a leaf registry (stdlib only) that the saturation verdict
(:mod:`hopbench.engine._saturation`), the embedded emulator's lateness warning
(:func:`hopbench.driver._common.emulator_warnings`), the file-descriptor warning
(:mod:`hopbench.driver._warnings`) and the search's generic fix
(:mod:`hopbench.driver._search`) take their advice from. A warning names its
cause with its measured figure and gives the one cure registered for that cause.

Why (issue 39 item 7): a saturated run got "use a quieter machine" (its saturation
verdict: neighbours took the CPU) and "lower the load or use a real target" (the
embedded emulator fell behind) together in 9 of 13 runs: two remedies for one
cause, because each warning carried its own. Now a cure is looked up by its
cause's ``kind``; two warnings of one run with the same kind give the cure once
(the second names the first), and the emulator's lateness is put down to
the emulator only when the emulator's own CPU says it was busy.

Invariants (tests/test_advice.py):

* every entry has one cause and one cure, each one sentence (no ". " inside);
* no two entries share a cause sentence, and a cure sentence belongs to one
  ``kind`` (entries of one kind may share it: neighbours and steal are both
  "machine_busy", with one cure);
* no cure's text appears anywhere else in the package: a warning that gives a
  remedy gets it from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["ADVICE", "Advice", "SAME_CURE", "advice", "cure_of", "one_cure_each"]


@dataclass(frozen=True, slots=True)
class Advice:
    """One registered cause and its cure.

    Attributes:
        kind: what held the run back, as summary.json's saturation causes name it
            (``client_cpu``, ``emulator``, ``machine_busy``, ``collector``,
            ``unexplained``, ``fd_limit``, ...): warnings of one run are de-duplicated
            by it.
        cause: the cause as the user reads it, one sentence fragment.
        cure: what to do about it, one sentence fragment ("" only for a cause with
            nothing to do but look again: ``unexplained`` says so in its cause).
    """

    kind: str
    cause: str
    cure: str

    @property
    def text(self) -> str:
        """``CAUSE: CURE`` as the warnings print it (the cause alone without a cure)."""
        return f"{self.cause}: {self.cure}" if self.cure else self.cause


#: every cause hopbench's warnings name with a cure, by id (docs/results/saturation.md). A
#: warning prints its own figure-bearing phrase of the cause, then ``: `` and the cure.
ADVICE: Final[Mapping[str, Advice]] = MappingProxyType({
    "client_cpu": Advice("client_cpu", "the client itself was busy",
                          "add load generators with --workers auto (one per free core) or lower the load"),
    "client_cpu_full": Advice(
        "client_cpu", "the client itself was busy, on a machine with no idle CPU",
        "more workers would not add CPU here; lower the load or use a machine with more CPUs"),
    "run_fills_machine": Advice(
        "client_cpu", "the run's own load-generator processes took this machine's CPUs",
        "more workers would not add CPU here; lower the load or spread the workers over more machines "
        "(engine = \"ray\")"),
    "no_cause_named": Advice(
        "client_cpu", "hopbench itself was saturated before the gateway's limit",
        "rerun with more load-generating processes (--workers auto, or --engine ray), or on a bigger or "
        "quieter machine"),
    "emulator": Advice(
        "emulator", "the client and the emulator share this machine's CPUs",
        "more workers would not add CPU here; run the emulator on another machine (an external target.url) "
        "or lower the load (fewer streams)"),
    "emulator_overloaded": Advice(
        "emulator", "the embedded emulator's own CPU was the limit (the latencies measure its overload, not "
        "the injected timings)",
        "run the emulator on another machine (an external target.url) or lower the load (fewer streams)"),
    "neighbours": Advice("machine_busy", "neighbours took CPU the run needed",
                         "more workers would not add CPU here; use a quieter machine"),
    "steal": Advice("machine_busy", "the machine was busy, not the load",
                    "more workers would not add CPU here; use a quieter machine"),
    "waited_for_cpu": Advice("machine_busy", "likely neighbours, not the load",
                             "more workers would not add CPU here; use a quieter machine"),
    "emulator_starved": Advice(
        "machine_busy", "the embedded emulator waited for a CPU that neighbours took (it used little itself)",
        "more workers would not add CPU here; use a quieter machine"),
    "emulator_crowded": Advice(
        "emulator", "the embedded emulator waited for a CPU that hopbench's own load generator took (it used "
        "little itself)",
        "more workers would not add CPU here; run the emulator on another machine (an external target.url) "
        "or lower the load (fewer streams)"),
    "emulator_late": Advice(
        "unexplained", "neither the emulator's own CPU nor the machine explains its lateness (short bursts of "
        "neighbours, or a blocking call)", "run it again, and if it repeats, profile it"),
    "collector": Advice(
        "collector", "collector pauses stop every stream's clock at once (see generator.gc_pause_max_ms)",
        "fewer streams per process (--workers auto: one per free core) shorten them"),
    "unexplained": Advice(
        "unexplained", "none of hopbench's CPU, the collector or the machine explains the lag over the whole "
        "run (short bursts of neighbours, or a blocking call)", "run it again, and if it repeats, profile it"),
    "client_read_late": Advice(
        "client_late", "the client read late (see client_read_lag), in bursts short of saturating it",
        "give each load generator fewer streams (--workers auto: one per free core)"),
    "one_process": Advice(
        "client_cpu", "an [upstream] or [[arm]] run has one load-generating process (workers are refused)",
        "lower the load (a lower concurrency or rate) or use a faster or quieter machine"),
    "fd_limit": Advice(
        "fd_limit", "hopbench ran out of file descriptors",
        "raise it (e.g. `ulimit -n 65536` before the run) or lower the concurrency / --workers share per "
        "process"),
})


def advice(name: str) -> Advice:
    """The registered advice ``name`` (a key of :data:`ADVICE`).

    Raises:
        KeyError: an unregistered name (a programming error: register it first).
    """
    return ADVICE[name]


#: what a warning says in place of a cure an earlier warning of the run already gave
SAME_CURE = "; the cure is the one above"


def cure_of(text: str) -> str | None:
    """The registered cure ``text`` gives (``CAUSE: CURE`` or ``...; cure: CURE``), the
    longest one where one holds another; None when it gives none. Never raises."""
    return next((c for c in _CURES if f": {c}" in text), None)


def one_cure_each(warnings: Sequence[str]) -> list[str]:
    """A run's warnings with each registered cure given once: a later warning whose cure
    an earlier one gave (the same cause, e.g. the emulator's lateness when neighbours
    took the CPU, after the saturation verdict that says so) keeps its cause and figures
    and says :data:`SAME_CURE` instead of repeating the cure, naming the warning that gave it
    (``cure: as for "error bound: all ttfb" above`` where the warning names its cure so).

    Args:
        warnings: the run's warnings in order (summary.json ``warnings``).

    Returns:
        list of str, one per warning, in order. Never raises.
    """
    given: dict[str, str] = {}
    out: list[str] = []
    for w in warnings:
        cure = cure_of(w)
        if cure is not None and cure in given:
            # named: the warning just above may give another cure (a new user's finding)
            w = (w.replace(f"cure: {cure}", f"cure: as for {given[cure]} above", 1) if f"cure: {cure}" in w
                 else w.replace(f": {cure}", f"{SAME_CURE} (as for {given[cure]})", 1))
        elif cure is not None:
            given[cure] = _label(w)
        out.append(w)
    return out


def _label(warning: str) -> str:
    """How a later warning names the one that gave its cure: its first words, quoted (``"error
    bound: all ttfb"``, ``"load generator saturated"``)."""
    words = warning.split(":", 1)[0].split()
    if warning.startswith("error bound:"):  # one per figure: the figure tells them apart
        words = warning.split()[:4]
    return '"' + " ".join(words[:5]).rstrip(":;,") + '"'


#: the registered cures, the longest first (a cure that holds a shorter one is matched whole)
_CURES: Final = tuple(sorted({a.cure for a in ADVICE.values() if a.cure}, key=len, reverse=True))
