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
``_outputs`` (contract.json, table, JUnit, Markdown), ``_compare`` (two check
folders), ``_command`` (the command line's shell).

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._command import check_command
    from ._compare import compare_checks
    from ._outputs import contract_json, format_table, junit_xml, markdown, write_outputs
    from ._result import STATUSES, CheckResult, CheckRun, check_exit_code
    from ._script import run_check
    from ._upstream import UpstreamStartError

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "run_check": "_script",
    "check_command": "_command",
    "compare_checks": "_compare",
    "CheckRun": "_result",
    "CheckResult": "_result",
    "STATUSES": "_result",
    "check_exit_code": "_result",
    "format_table": "_outputs",
    "contract_json": "_outputs",
    "junit_xml": "_outputs",
    "markdown": "_outputs",
    "write_outputs": "_outputs",
    "UpstreamStartError": "_upstream",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = ["run_check", "check_command", "compare_checks", "CheckRun", "CheckResult", "STATUSES",
           "check_exit_code", "format_table", "contract_json", "junit_xml", "markdown", "write_outputs",
           "UpstreamStartError"]
