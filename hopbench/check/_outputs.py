"""The check's outputs: contract.json, the terminal table, JUnit XML and Markdown for CI.

Role: write what a finished check run found, in the four forms docs/check.md
describes; each view shows the same statuses, expected and observed values.

Invariants:
- Nothing is ever cut: the table is plain text whose lines are as long as
  their values (a CI log or a file keeps every digit); the terminal may wrap.
- No secret reaches an output: requests' headers are never recorded, the target
  is its URL only.
"""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .._version import __version__
from ._result import STATUSES, CheckResult, CheckRun

__all__ = ["contract_json", "format_table", "junit_xml", "markdown", "write_outputs"]

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "inconclusive": "INCONCLUSIVE"}


def _counts(results: list[CheckResult]) -> dict[str, int]:
    return {s: sum(1 for r in results if r.status == s) for s in ("pass", "fail", "skip", "inconclusive")}


def contract_json(run: CheckRun) -> dict[str, Any]:
    """contract.json's document (docs/check.md, "contract.json")."""
    p = run.profile
    up = p.upstream
    return {
        "kind": "hopbench-check",
        "hopbench_version": __version__,
        "host": platform.node(),
        "profile": None if p.path is None else str(p.path),
        "target": p.target.url,
        "upstream_listen": None if up is None else up.listen,
        "scenarios": [{"name": s.name, "protocol": s.protocol} for s in p.scenarios],
        "contract": run.contract.to_json(),
        "exit_code": run.exit_code,
        # a SIGINT cut the script: the checks of the steps it did not finish are inconclusive
        "interrupted_by": run.interrupted_by,
        "interrupted_at": run.interrupted_at,
        "duration_s": round(run.duration_s, 3),
        "step_duration_s": {k: round(v, 3) for k, v in run.step_s.items()},
        "counts": _counts(run.results),
        "checks": [r.to_json() for r in run.results],
    }


def format_table(run: CheckRun) -> str:
    """The terminal table: one line per check (status, id, observed), its reason below when not a pass."""
    width = max(len(r.id) for r in run.results)
    marks = max(len(_MARK[r.status]) for r in run.results)  # INCONCLUSIVE, in words as gate says it
    indent = " " * (marks + 4)
    lines = [f"hopbench check: {run.profile.target.url} (contract: {run.contract.source})"]
    for r in run.results:
        lines.append(f"  {_MARK[r.status]:<{marks}}  {r.id:<{width}}  {r.observed}")
        if r.status != "pass":
            if r.expected:
                lines.append(f"{indent}{'':<{width}}  expected: {r.expected}")
            if r.why:
                lines.append(f"{indent}{'':<{width}}  why: {r.why}")
    c = _counts(run.results)
    lines.append(f"{c['pass']} passed, {c['fail']} failed, {c['inconclusive']} inconclusive, {c['skip']} skipped"
                 f" in {run.duration_s:.1f} s; exit {run.exit_code}")
    if run.interrupted_by is not None:
        lines.append(_interrupted(run))
    return "\n".join(lines)


def _interrupted(run: CheckRun) -> str:
    return (f"interrupted ({run.interrupted_by}) at the script's {run.interrupted_at} step: partial, "
            "the checks of the steps it did not finish are inconclusive")


def junit_xml(run: CheckRun) -> str:
    """JUnit XML: one testsuite, a testcase per check; fail -> <failure>, skip and inconclusive -> <skipped>
    (an inconclusive check is not a gateway failure; its message says why)."""
    c = _counts(run.results)
    suite = ET.Element("testsuite", name="hopbench check", tests=str(len(run.results)), failures=str(c["fail"]),
                       errors="0", skipped=str(c["skip"] + c["inconclusive"]), time=f"{run.duration_s:.3f}")
    for r in run.results:
        case = ET.SubElement(suite, "testcase", classname="hopbench.check", name=r.id,
                             time=f"{(r.duration_ms or 0) / 1000:.3f}")
        text = f"expected: {r.expected}\nobserved: {r.observed}" + (f"\nwhy: {r.why}" if r.why else "")
        if r.status == "fail":
            ET.SubElement(case, "failure", message=r.why or r.observed).text = text
        elif r.status in ("skip", "inconclusive"):
            ET.SubElement(case, "skipped", message=f"{r.status}: {r.why or ''}")
        ET.SubElement(case, "system-out").text = text
    doc: str = ET.tostring(suite, encoding="unicode", xml_declaration=True)
    return doc + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(run: CheckRun) -> str:
    """A Markdown table for a CI summary (e.g. ``$GITHUB_STEP_SUMMARY``): failures first."""
    order = {s: i for i, s in enumerate(STATUSES)}
    rows = sorted(run.results, key=lambda r: order[r.status])
    c = _counts(run.results)
    out = [f"### hopbench check: `{run.profile.target.url}`", "",
           f"{c['pass']} passed, {c['fail']} failed, {c['inconclusive']} inconclusive, {c['skip']} skipped "
           f"(contract: {run.contract.source}; exit {run.exit_code})", "",
           *([f"**{_interrupted(run)}**", ""] if run.interrupted_by is not None else []),
           "| check | status | expected | observed | why |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r.id}` | {r.status} | {_cell(r.expected)} | {_cell(r.observed)} | {_cell(r.why or '')} |")
    return "\n".join(out) + "\n"


def write_outputs(folder: Path, run: CheckRun) -> None:
    """Write contract.json, contract.xml (JUnit) and contract.md into ``folder``.

    Raises:
        OSError: the folder cannot be written.
    """
    (folder / "contract.json").write_text(json.dumps(contract_json(run), indent=2, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    (folder / "contract.xml").write_text(junit_xml(run), encoding="utf-8")
    (folder / "contract.md").write_text(markdown(run), encoding="utf-8")
