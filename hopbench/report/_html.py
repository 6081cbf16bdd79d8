"""HTML cells and tables shared by report.html's sections (pure string building).

Every value is escaped (``html.escape`` with quotes); numbers use the terminal
summary's rounding (``hopbench._format.fmt_num``) so that the terminal and the
report agree.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._format import fmt_num

__all__ = ["escape", "cell", "table", "kv_table"]


def escape(value: object) -> str:
    """``str(value)`` escaped for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def cell(value: object) -> str:
    """A table cell's text: "-" for None, lower-case booleans, thousands
    separators for integers, the terminal's rounding for floats."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return fmt_num(value)
    return str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[object]], left: int = 1, cls: str = "") -> str:
    """An HTML table; the first ``left`` columns are left-aligned (class "l"); ``cls``: the
    table's class (``"wrap"``: as wide as the page, headers broken after ``_`` and ``.``; report.html's CSS)."""
    out = [f'<table class="{escape(cls)}"><tr>' if cls else "<table><tr>"]
    # a wrapping table's headers may break after "_" and "." (counter names), never inside a word
    heads = [escape(h).replace("_", "_<wbr>").replace(".", ".<wbr>") if cls == "wrap" else escape(h) for h in header]
    out += [f'<th class="{"l" if i < left else ""}">{h}</th>' for i, h in enumerate(heads)]
    out.append("</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{escape(cell(v))}</td>'
                                    for i, v in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def kv_table(data: Mapping[str, Any]) -> str:
    """A two-column key / value table; a dict or list value as its JSON text."""
    rows = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in data.items()]
    return table(["key", "value"], rows, left=2)
