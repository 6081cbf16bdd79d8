"""What is sent: prompt and output lengths, datasets, prompt pools, sessions, traces, cancels.

Pure and seeded: the same profile and seed send the same requests in the same
order. A scenario's prompts become encoded bodies once, before the load
(``parse_workload``); a trace becomes a schedule (``TraceSpec``, ``read_trace``).

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._lengths import load_tokenizer
    from ._pool import parse_workload
    from ._trace import TraceSpec
    from ._trace_file import read_trace

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "load_tokenizer": "_lengths",
    "parse_workload": "_pool",
    "read_trace": "_trace_file",
    "TraceSpec": "_trace",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "load_tokenizer",
    "parse_workload",
    "read_trace",
    "TraceSpec",
]
