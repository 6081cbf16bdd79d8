"""What ``hopbench run`` (and ``search``) prints after a run: the tables and the gate's verdict.

Role: :func:`after_run` is the views' side of ``hopbench._run_command.run_command``: it
reads the finished run's summary (as written to its results folder) and prints
the summary table, the A/B arms' differences, the ``[slo]`` lines, a staged
run's latency-vs-load table, and applies the profile's ``[gate]`` budgets
(printed, and written beside the results as gate.json), then the one line
naming the results folder.

Invariants:

* Reads a finished run, never runs anything: the summary and its folder in,
  lines on the consoles and gate.json out.
* ``quiet`` prints only the gate's verdict in one sentence (when there is a
  gate) and the results folder's line (and warnings on stderr); the gate is
  still applied and still decides its exit code (0, 1, or 5: inconclusive).
* Never raises on a gate.json that cannot be written: a warning says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from .._errors import ResultsError
from .._exit import EXIT_OK

__all__ = ["after_run"]


def after_run(summary: dict[str, Any], out_dir: Path, console: Console, err: Console, *, quiet: bool,
              apply_gate: bool, staged: bool) -> int:
    """Print a finished run's tables and verdicts; apply its ``[gate]``.

    Args:
        summary: the run's summary.json document (with ``arm_differences`` when added).
        out_dir: its results folder (the gate's baseline paths, gate.json).
        console: stdout; err: stderr (warnings).
        quiet: print only the gate's one-sentence verdict (and an A/B arms run's paired verdicts,
            one sentence each) and the results folder's line.
        apply_gate: apply the summary's ``gate`` budgets (``--no-gate``: False).
        staged: a ``[[stage]]`` or ``[search]`` run: its latency-vs-load table too.

    Returns:
        the gate's exit code (``EXIT_OK`` without a gate or with ``apply_gate`` False).
    """
    if not quiet:
        from ._capacity_table import slo_lines
        from ._summary_table import render_summary

        render_summary(_without_capacity_warning(summary) if staged else summary, console)
        if summary.get("arm_differences"):
            from ._arm_differences import render_arm_differences

            console.print(render_arm_differences(summary["arm_differences"]), highlight=False,
                          soft_wrap=True, markup=False)
        for line in slo_lines(summary):  # [slo] (docs/slo.md)
            console.print(line, highlight=False, soft_wrap=True)
        if staged:
            from ._capacity_table import render_capacity

            render_capacity(summary, console)
    elif summary.get("arm_differences"):  # -q: each arm's paired verdict in one sentence (docs/ab-arms.md)
        from ._arm_differences import paired_headlines

        for line in paired_headlines(summary["arm_differences"]):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    gate_exit = EXIT_OK
    if summary.get("gate") and apply_gate:
        from ._gate import evaluate_gate

        report = evaluate_gate(summary, results_dir=out_dir, missing_baseline="inconclusive")
        if not quiet:
            console.print(report.render("text"), markup=False, highlight=False, soft_wrap=True)
        else:  # one sentence: the verdict and why (docs/gate.md, "Noise")
            console.print(report.headline(), markup=False, highlight=False, soft_wrap=True)
        gate_exit = report.exit_code
        from ..driver._results import GATE_NAME, replace_text

        try:  # the verdict beside the results (docs/results.md): `hopbench export` reads it
            replace_text(out_dir / GATE_NAME, report.render("json"))
        except (OSError, ResultsError) as exc:
            err.print(f"hopbench: warning: {GATE_NAME} not written: {exc}", markup=False, highlight=False,
                      soft_wrap=True)
    console.print(f"results: {out_dir}", markup=False, highlight=False,
                  soft_wrap=True)  # also with --quiet: where to look (one line: copyable)
    return gate_exit


def _without_capacity_warning(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` without the warning that repeats its capacity message (a search stopped by
    hopbench's own saturation): the ``capacity:`` line after the latency-vs-load table gives it,
    cause and advice, once (issue 39 item 7: a saturated search printed its cause six times)."""
    cap = summary.get("capacity")
    message = cap.get("message") if isinstance(cap, dict) and cap.get("client_saturated") else None
    if not message:
        return summary
    repeat = "load generator saturated: " + str(message)
    return {**summary, "warnings": [w for w in summary.get("warnings") or [] if w != repeat]}
