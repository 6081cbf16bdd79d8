"""Number formatting shared by the terminal summary and report.html.

Role: one rounding rule for reporting-unit figures (ms, tokens/s), so the
terminal and the HTML page show the same digits for the same value. Pure;
imports nothing from hopbench.
"""

from __future__ import annotations

__all__ = ["fmt_num"]


def fmt_num(value: object) -> str:
    """A reporting-unit float with about 3-4 significant figures."""
    if not isinstance(value, (int, float)):
        return "-"
    v = float(value)
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"
