"""A profile in, a results folder out: one process, worker processes, Ray, stages.

The driver runs a profile's load (the engine) in one process, in worker
processes or on Ray, merges their snapshots exactly, judges the run once
(complete, saturated, load held, warnings) and writes the results folder that
every view reads (``ResultsWriter``, ``read_summary``).

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._common import RunOutcome
    from ._ray import run_profile_ray
    from ._results import ResultsWriter, read_summary
    from ._single import run_profile
    from ._workers import run_profile_workers

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "read_summary": "_results",
    "ResultsWriter": "_results",
    "run_profile": "_single",
    "run_profile_ray": "_ray",
    "run_profile_workers": "_workers",
    "RunOutcome": "_common",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "read_summary",
    "ResultsWriter",
    "run_profile",
    "run_profile_ray",
    "run_profile_workers",
    "RunOutcome",
]
