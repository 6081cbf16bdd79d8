"""The profile: TOML in, frozen records out; one parser per profile table.

``config/_<table>_spec.py`` parses one profile table into its record; the records
themselves are in ``_records.py``. Every error names the file, the line and the
key, and what was expected (``ProfileError``); validating a profile sends no load
and loads no server stack.

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._profile import load_profile, parse_profile
    from ._records import LoadSpec, Profile, RunSpec, Scenario, TargetSpec, Timeouts

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "load_profile": "_profile",
    "LoadSpec": "_records",
    "parse_profile": "_profile",
    "Profile": "_records",
    "RunSpec": "_records",
    "Scenario": "_records",
    "TargetSpec": "_records",
    "Timeouts": "_records",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "load_profile",
    "LoadSpec",
    "parse_profile",
    "Profile",
    "RunSpec",
    "Scenario",
    "TargetSpec",
    "Timeouts",
]
