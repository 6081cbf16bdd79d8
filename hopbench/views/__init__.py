"""Read a results folder, never re-run: terminal tables, compare, gate and export.

Every view reads what the driver wrote (summary.json, the histograms,
streams.jsonl) and nothing else, so it can run anywhere, later, on a copied folder.

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._after_run import after_run
    from ._compare import compare_command
    from ._export import export_results
    from ._gate import gate_command

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "after_run": "_after_run",
    "compare_command": "_compare",
    "export_results": "_export",
    "gate_command": "_gate",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "after_run",
    "compare_command",
    "export_results",
    "gate_command",
]
