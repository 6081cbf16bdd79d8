"""The load generator: the only async code and the only reader of the clock.

``LoadRunner`` runs one process's share of a profile's load on trio: the closed
loop's users, the open loop's and the trace's arrivals (wrk2-style: latency from
the intended start), each stream through hopbench's own HTTP/1.1 transport (or
httpx's), stamping every read on one monotonic clock and handing the bytes to the
scanner, the decoder and the meter. ``RunStats`` is what a run reports of itself;
``Tuning`` holds the open loop's knobs (a test seam: a profile never sets them).

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._open_loop import Tuning
    from ._runner import LoadRunner, RunStats

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "LoadRunner": "_runner",
    "RunStats": "_runner",
    "Tuning": "_open_loop",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "LoadRunner",
    "RunStats",
    "Tuning",
]
