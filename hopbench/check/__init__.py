"""``hopbench check``: hold a gateway to its streaming contract (docs/check.md).

Role: the pipeline stage after ``driver``: it drives the emulator behind a
gateway (``[upstream] listen``) through a script of behaviours, one check at a
time, compares what the upstream wrote with what the client read, and grades
each check ``pass``, ``fail``, ``skip`` or ``inconclusive``::

    run = run_check("profiles/check.toml", "results/check")
    print(format_table(run)); raise SystemExit(run.exit_code)

Modules: ``_script`` (the runner and its script), ``_checks`` (one pure function
a check), ``_upstream`` (the scripted emulator, capturing its writes),
``_probe`` (the client), ``_wire`` (streams as timelines), ``_sdk`` (the
official SDKs' reading), ``_result`` (the verdict record and exit status),
``_outputs`` (contract.json, table, JUnit, Markdown).
"""

from __future__ import annotations

from ._outputs import contract_json, format_table, junit_xml, markdown, write_outputs
from ._result import STATUSES, CheckResult, CheckRun, check_exit_code
from ._script import run_check
from ._upstream import UpstreamStartError

__all__ = ["run_check", "CheckRun", "CheckResult", "STATUSES", "check_exit_code", "format_table",
           "contract_json", "junit_xml", "markdown", "write_outputs", "UpstreamStartError"]
