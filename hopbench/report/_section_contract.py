"""report.html for a check folder: the streaming contract section (docs/check.md).

Role: render a ``hopbench check`` folder's contract.json as report.html's
"Streaming contract" section: the verdict counts, one row per check (status,
expected, observed, why) with the failures first, the contract held to, the
evidence samples, and the time each script step took. No figures: a check has
verdicts, not distributions. Every text from the folder is HTML-escaped
(``hopbench.report._html``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._html import escape, kv_table, table

__all__ = ["contract_section"]

_ORDER = {"fail": 0, "inconclusive": 1, "pass": 2, "skip": 3}


def contract_section(doc: Mapping[str, Any]) -> list[str]:
    """The "Streaming contract" section of a check folder's report.html.

    Args:
        doc: contract.json as read (``kind`` "hopbench-check").

    Returns:
        HTML fragments, in page order. Never raises on a well-formed contract.json;
        missing keys show as "-".
    """
    checks = [c for c in doc.get("checks") or [] if isinstance(c, Mapping)]
    counts = doc.get("counts") or {}
    contract = doc.get("contract") or {}
    out = ["<h2>Streaming contract</h2>",
           f'<p class="note">{escape(doc.get("target"))} held to the {escape(contract.get("source", "-"))} '
           f'contract: {escape(counts.get("pass", 0))} passed, {escape(counts.get("fail", 0))} failed, '
           f'{escape(counts.get("inconclusive", 0))} inconclusive, {escape(counts.get("skip", 0))} skipped '
           f'(exit {escape(doc.get("exit_code"))}, {escape(doc.get("duration_s"))} s). Failures first.</p>']
    rows = sorted(checks, key=lambda c: _ORDER.get(str(c.get("status")), 9))
    out.append(table(["check", "status", "expected", "observed", "why"],
                     [[c.get("id"), c.get("status"), c.get("expected"), c.get("observed"), c.get("why")]
                      for c in rows], left=5))
    out += ["<h3>The contract</h3>", kv_table(contract)]
    samples = [(c.get("id"), s) for c in rows if c.get("status") != "pass" for s in c.get("samples") or []]
    if samples:
        out.append("<h3>Evidence</h3>")
        out += [f"<p><b>{escape(cid)}</b></p><pre>{escape(json.dumps(s, indent=2, ensure_ascii=False))}</pre>"
                for cid, s in samples]
    steps = doc.get("step_duration_s")
    if isinstance(steps, Mapping) and steps:
        out += ["<h3>Script steps (s)</h3>", kv_table(steps)]
    return out
