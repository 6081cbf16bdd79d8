"""``hopbench compare A B`` on two check folders: which promises a release started or stopped keeping.

Role: read two contract.json files (``hopbench check`` outputs, docs/check.md) and
line their checks up by id, the checks whose status changed first (those that got
worse before those that got better), then the rest. Pure but for reading the two
files; ``hopbench compare`` hands two folders here when both hold a contract.json
(docs/check.md, "Comparing two releases").

A status is worse than another when it ranks lower: pass, then skip and
inconclusive (nothing known), then fail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._format import plural
from .._errors import ResultsError, UsageError

__all__ = ["CheckChange", "CheckComparison", "compare_checks", "is_check_folder"]

CONTRACT_NAME = "contract.json"
_RANK = {"pass": 0, "skip": 1, "inconclusive": 1, "fail": 2}


def is_check_folder(path: Path) -> bool:
    """Whether ``path`` is a check folder (holds contract.json) or a contract.json itself."""
    return (path / CONTRACT_NAME).is_file() or (path.name == CONTRACT_NAME and path.is_file())


def _read(path: Path) -> dict[str, Any]:
    file = path if path.name == CONTRACT_NAME else path / CONTRACT_NAME
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultsError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ResultsError(f"{file}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "hopbench-check" or not isinstance(doc.get("checks"), list):
        raise ResultsError(f"{file}: expected the contract.json of `hopbench check` (kind \"hopbench-check\", "
                           "a checks list)")
    return doc


@dataclass(frozen=True, slots=True)
class CheckChange:
    """One check in both folders.

    Attributes:
        id: the check id.
        base, candidate: its status in each ("absent" when a folder lacks it).
        change: "worse", "better", "changed" (between skip and inconclusive, or absent) or "same".
        observed: the candidate's observed value (the base's when absent there).
    """

    id: str
    base: str
    candidate: str
    change: str
    observed: str


@dataclass(frozen=True, slots=True)
class CheckComparison:
    """Two check folders' checks, the changed ones first."""

    base_dir: Path
    candidate_dir: Path
    base_target: str | None
    candidate_target: str | None
    rows: tuple[CheckChange, ...]

    @property
    def any_worse(self) -> bool:
        """Whether any check got worse (``--fail-on-worse`` exits 1 then)."""
        return any(r.change == "worse" for r in self.rows)

    def render(self, fmt: str = "text") -> str:
        """The comparison as "text" (a plain table, nothing cut), "markdown" or "json"."""
        if fmt == "json":
            return json.dumps({"kind": "hopbench-check-comparison", "base": str(self.base_dir),
                               "candidate": str(self.candidate_dir),
                               "checks": [{"id": r.id, "base": r.base, "candidate": r.candidate, "change": r.change,
                                           "observed": r.observed} for r in self.rows]}, indent=2) + "\n"
        changed = sum(1 for r in self.rows if r.change != "same")
        head = (f"check comparison: {self.base_dir} ({self.base_target}) -> {self.candidate_dir} "
                f"({self.candidate_target}): {changed} of {len(self.rows)} {plural(len(self.rows), 'check')} changed")
        if fmt == "markdown":
            lines = [f"### {head}", "", "| check | base | candidate | change | observed (candidate) |",
                     "|---|---|---|---|---|"]
            lines += [f"| `{r.id}` | {r.base} | {r.candidate} | {r.change} | {r.observed.replace('|', '/')} |"
                      for r in self.rows]
            return "\n".join(lines) + "\n"
        w = max([len(r.id) for r in self.rows] + [5])
        lines = [head, f"  {'check':<{w}}  {'base':<12}  {'candidate':<12}  change"]
        for r in self.rows:
            lines.append(f"  {r.id:<{w}}  {r.base:<12}  {r.candidate:<12}  {r.change}")
            if r.change != "same":
                lines.append(f"  {'':<{w}}  now: {r.observed}")
        return "\n".join(lines) + "\n"


def _change(a: str, b: str) -> str:
    if a == b:
        return "same"
    if a in _RANK and b in _RANK and _RANK[a] != _RANK[b]:
        return "worse" if _RANK[b] > _RANK[a] else "better"
    return "changed"


def compare_checks(base_dir: Path, candidate_dir: Path) -> CheckComparison:
    """Compare two check folders (``hopbench compare A B`` when both hold a contract.json).

    Args:
        base_dir, candidate_dir: check folders (or their contract.json files).

    Returns:
        The ``CheckComparison``: worse first, then better, then other changes, then the same,
        each group in the checks' own order.

    Raises:
        UsageError: only one of the two is a check folder.
        ResultsError: a contract.json that cannot be read or is not a check's.
    """
    if not (is_check_folder(base_dir) and is_check_folder(candidate_dir)):
        which = base_dir if not is_check_folder(base_dir) else candidate_dir
        raise UsageError(f"{which}: expected a check folder (contract.json) like the other one: a check folder "
                         "compares only with another check folder")
    a, b = _read(base_dir), _read(candidate_dir)
    sa = {c["id"]: c for c in a["checks"] if isinstance(c, dict) and "id" in c}
    sb = {c["id"]: c for c in b["checks"] if isinstance(c, dict) and "id" in c}
    ids = list(sa) + [i for i in sb if i not in sa]
    rows = []
    for i in ids:
        x, y = sa.get(i, {}), sb.get(i, {})
        st_a, st_b = str(x.get("status", "absent")), str(y.get("status", "absent"))
        rows.append(CheckChange(i, st_a, st_b, _change(st_a, st_b), str((y or x).get("observed", ""))))
    order = {"worse": 0, "better": 1, "changed": 2, "same": 3}
    rows.sort(key=lambda r: order[r.change])  # stable: the checks' own order inside a group
    return CheckComparison(base_dir, candidate_dir, a.get("target"), b.get("target"), tuple(rows))
