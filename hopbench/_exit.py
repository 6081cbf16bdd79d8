"""Exit codes of every hopbench command, defined once.

Role: a leaf the command line (:mod:`hopbench.cli`, which maps errors to these
codes) and the few implementations that report a code of their own
(``GateReport.exit_code`` and its JSON, the emulator server) share. The same
code means the same thing in every subcommand:

====  ===========================================================================
0     success
1     a budget breached (``run``, ``gate``) / a worse verdict (``compare --fail-on-worse``)
      / no capacity measured (``search``; a ``[[stage]]`` run only warns: docs/slo.md)
2     bad input: profile, arguments, unreadable results, an address the emulator
      cannot listen on; also a target that cannot be reached at all (``run``)
3     hopbench itself failed mid-run (partial results written), or the results
      could not be written (e.g. a full disk)
4     the target failed the run (``run``): no stream completed, or the target
      died / stopped answering mid-run (results written)
5     inconclusive (``gate``, ``run``'s gate, ``compare --fail-on-worse``): no budget
      breached beyond the run's measured noise, but one could not be told from it
      (a breach within the noise, too few samples, a saturated run): retry on a
      quieter runner (docs/gate.md, "Noise"); a capacity search that measured a
      lower bound only (``search``: "capacity at least 16 requests/s; the upper
      bound was not judged: ..."; docs/slo.md)
130   interrupted by SIGINT (partial results written)
143   terminated by SIGTERM (partial results written)
====  ===========================================================================
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXIT_BREACH", "EXIT_CRASH", "EXIT_INCONCLUSIVE", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK",
           "EXIT_TARGET_FAILED", "EXIT_TERMINATED", "STOP_TARGET_FAILING", "STOP_TARGET_LOST", "STOP_TARGET_UNREACHABLE",
           "stop_exit_code"]

EXIT_OK: Final = 0
EXIT_BREACH: Final = 1
EXIT_INPUT: Final = 2
EXIT_CRASH: Final = 3
EXIT_TARGET_FAILED: Final = 4
EXIT_INCONCLUSIVE: Final = 5
EXIT_INTERRUPTED: Final = 130
EXIT_TERMINATED: Final = 143

# The stop reasons that carry an exit code of their own. A run's ``interrupted_by``
# (summary.json) is a sentence for people that starts with one of these kinds, or is a
# signal's name; the engine writes them (engine/_watch.py) and the exit code is read
# back from them here, one rule for the one-process run, the workers and Ray alike.
STOP_TARGET_UNREACHABLE: Final = "target unreachable"
STOP_TARGET_LOST: Final = "target lost"
STOP_TARGET_FAILING: Final = "target failing"


def stop_exit_code(reason: str | None) -> int | None:
    """The exit code a run's stop reason (``interrupted_by``) implies, None for none.

    ``"target unreachable: ..."`` is 2 (nothing ever answered: bad input, like a wrong
    URL), ``"target lost: ..."`` and ``"target failing: ..."`` (it answered, never streamed,
    kept failing: ``run.stop_on_failing_target``) 4, ``"SIGTERM"`` 143 and any other reason (SIGINT, a
    stop before the start) 130. Never raises.
    """
    if not reason:
        return None
    if reason.startswith(STOP_TARGET_UNREACHABLE):
        return EXIT_INPUT
    if reason.startswith((STOP_TARGET_LOST, STOP_TARGET_FAILING)):
        return EXIT_TARGET_FAILED
    return EXIT_TERMINATED if reason == "SIGTERM" else EXIT_INTERRUPTED
