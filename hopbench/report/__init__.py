"""report.html: one self-contained page per results folder, one module per section.

Reads a results folder (never re-runs) and writes ``report.html`` beside it.

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._page import write_report

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "write_report": "_page",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "write_report",
]
