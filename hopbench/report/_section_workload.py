"""report.html's "Workload" section: requested vs reported lengths, the prompt cache, session turns.

Reads only summary.json's scopes (``lengths``, ``cache``, ``turns``: docs/results.md)
of one run or two (A and B): nothing is recomputed. The section is left out
when no scope has any of them (a plain-prompt run).

- Lengths: per scope and direction, streams, mean requested and mean reported
  tokens and their ratio (docs/workloads.md, "What the results show").
- Prompt cache: per scope, streams that reported cached tokens, prompt and
  cached tokens, the hit ratio and, for a trace replay, the ratio the trace
  implies.
- Session turns: mean TTFT and mean input tokens by turn, one line per scope
  (and run), so TTFT growth with the context is visible; a table beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._html import cell, escape, table

__all__ = ["workload_section"]


_e, _cell, _table = escape, cell, table


def _pct(x: Any) -> str | None:
    return None if not isinstance(x, (int, float)) else f"{100 * x:.1f} %"


def workload_section(runs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The section's HTML parts, or [] when no scope of any run has workload figures.

    Args:
        runs: (tag, summary.json scopes) per run: tag "" for a lone run, "A" / "B" when comparing.

    Returns:
        list of HTML strings (headings, tables, at most one plotly figure div;
        plotly.js itself is on the page already).
    """
    length_rows: list[list[object]] = []
    cache_rows: list[list[object]] = []
    turn_rows: list[list[object]] = []
    lines: list[tuple[str, list[int], list[float | None]]] = []
    for tag, scopes in runs:
        for name, scope in scopes.items():
            label = f"{tag} {name}".strip()
            for direction, v in (scope.get("lengths") or {}).items():
                ratio = v.get("ratio")
                length_rows.append([label, direction, v.get("streams"), v.get("requested_mean"),
                                    v.get("reported_mean"),
                                    f"×{ratio:.3f}" if isinstance(ratio, (int, float)) else None,
                                    v.get("over_max")])  # output only: the target ignores max_tokens
            cache = scope.get("cache")
            if cache:
                cache_rows.append([label, cache.get("streams"), cache.get("prompt_tokens"),
                                   cache.get("cached_tokens"), _pct(cache.get("hit_ratio")),
                                   _pct(cache.get("implied_hit_ratio"))])
            turns = scope.get("turns") or []
            if turns and name != "all":
                lines.append((label, [t["turn"] for t in turns], [t.get("ttft_mean_ms") for t in turns]))
            for t in turns if name != "all" else ():
                turn_rows.append([label, t.get("turn"), t.get("streams"), t.get("completed"),
                                  t.get("ttft_mean_ms"), t.get("input_tokens_mean"), _pct(t.get("cached_ratio"))])
    if not (length_rows or cache_rows or turn_rows):
        return []
    parts = ["<h2>Workload</h2>",
             '<p class="note">What was asked and what the server reported (docs/workloads.md); from '
             "summary.json's lengths, cache and turns.</p>"]
    if length_rows:
        parts += ["<h3>Lengths: requested and reported (mean tokens)</h3>",
                  _table(["scope", "direction", "streams", "requested mean", "reported mean", "ratio",
                          "over max_tokens"], length_rows)]
    if cache_rows:
        parts += ["<h3>Prompt cache</h3>",
                  _table(["scope", "streams reporting it", "prompt tokens", "cached tokens", "hit ratio",
                          "implied by the trace"], cache_rows)]
    if turn_rows:
        import plotly.graph_objects as go
        import plotly.io as pio

        fig = go.Figure()
        for label, xs, ys in lines:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label))
        fig.update_layout(template="plotly_white", title={"text": "Session turns: mean TTFT by turn"},
                          xaxis={"title": {"text": "turn"}, "dtick": 1},
                          yaxis={"title": {"text": "mean TTFT (ms)"}, "rangemode": "tozero"}, height=380)
        parts += ["<h3>Session turns</h3>",
                  str(pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id="fig-turns",
                                  config={"displaylogo": False, "responsive": True})),
                  _table(["scope", "turn", "streams", "completed", "mean TTFT (ms)", "mean input tokens",
                          "cached"], turn_rows)]
    return parts
