"""report.html's lead: the run's verdict, its headline figures and its warnings, before any chart.

Role: the top of the page answers "did the run pass, and can its figures be
trusted?" (issue 39, "A gateway engineer's first hour"): the ``[gate]``
verdict when the profile has one (:func:`gate_view`: the same evaluation,
sentence and exit code as ``hopbench run`` prints at its end and writes to
gate.json), the run's figures (:func:`run_figures`), then the warnings
(:func:`warnings_html`), each sentence said once (:class:`Said`). The gate's
budget table is the page's "Gate" section (:attr:`GateView.section`), placed
with the other sections a profile exists for (docs/report.md, "Page order").

Invariants:

* Reads summary.json (and, for the gate's measured duration and noise,
  the folder's timeline.jsonl), never re-runs; every text from a results
  folder is HTML-escaped.
* The gate is evaluated as ``hopbench.views._after_run.after_run`` does
  (a budget relative to a baseline is inconclusive without one); a gate that
  cannot be evaluated is an amber box naming why, never a failed page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import HopbenchError
from .._exit import EXIT_BREACH, EXIT_OK
from .._format import cpu_phrase
from ..measure._burst import burst_warnings
from ..measure._outcomes import BROKEN, ERROR_RATE_WARN
from ..measure._recorder import ALL
from ..views._summary_table import load_text, tokens_phrase
from ._html import cell, escape, table
from ._series import RunData

__all__ = ["GateView", "Said", "gate_view", "gate_section", "run_figures", "warnings_html", "checkpoint"]

_CAUSE = "cause: "
#: a family of warnings this large shows its first in full, the others folded under it
FOLD_AT = 3


@dataclass(slots=True)
class Said:
    """The sentences the page has already said, so that a cause is said once (issue 39, item 6).

    A run that saturated its load generator says why in the gate's verdict, in
    summary.json's warnings (once per symptom) and in a capacity search's
    message, each with the same ``cause: ...`` clause; the page shows it the
    first time and "cause: as above" after.

    Attributes:
        texts: the texts shown so far, in page order.
    """

    texts: list[str] = field(default_factory=list)

    def fresh(self, text: str) -> str | None:
        """``text`` as the page should show it now, and remember it.

        Returns:
            None when the whole text was already said; the text with its
            ``cause: ...`` tail replaced by ``cause: as above`` when that tail was
            already said; else the text unchanged.
        """
        if any(text in old for old in self.texts):
            return None
        shown = text
        at = text.find(_CAUSE)
        tail = text[at:].rstrip(")")  # a cause quoted in parentheses is the same cause
        if at >= 0 and any(tail in old for old in self.texts):
            shown = text[:at] + _CAUSE + "as above" + text[at + len(tail):]
        self.texts.append(text)
        return shown


@dataclass(frozen=True, slots=True)
class GateView:
    """The ``[gate]``'s verdict as the page shows it.

    Attributes:
        sentence: the verdict in one sentence (``GateReport.headline``: ``gate FAILED: ...``).
        exit_code: the gate's exit code (0 pass, 1 fail, 5 inconclusive; :mod:`hopbench._exit`;
            2 when the budgets could not be evaluated).
        box: the verdict's ``<div id="gate-verdict">`` for the top of the page.
        rows: the "Gate" section's rows: (verdict, scope, budget, value, limit, samples, why),
            the run checks first; empty when the budgets could not be evaluated.
        notes: the gate's warnings and noise notes, then where the budgets came from.
    """

    sentence: str
    exit_code: int
    box: str
    rows: tuple[tuple[object, ...], ...] = ()
    notes: tuple[str, ...] = ()


_MARK = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "not judged": "NOT JUDGED"}


def gate_view(run: RunData, tag: str = "") -> GateView | None:
    """The run's ``[gate]`` verdict, evaluated from its results folder.

    Args:
        run: the run (summary.json ``gate`` holds the profile's ``[gate]`` table).
        tag: prefixed to the box's text when comparing two runs (``"[A] "``).

    Returns:
        None when the profile had no ``[gate]``; else the verdict box and the
        "Gate" section's rows. A gate that cannot be evaluated (a malformed
        budget, a scenario the run lacks) gives an amber box that says so.
    """
    if not run.summary.get("gate"):
        return None
    from ..views._gate import evaluate_gate

    try:
        report = evaluate_gate(run.summary, results_dir=run.path, missing_baseline="inconclusive")
    except HopbenchError as exc:
        sentence = f"gate not judged: {exc}"  # the gate itself exits 2 on such a table
        box = f'<div id="gate-verdict" class="warn"><b>{escape(tag)}{escape(sentence)}</b></div>'
        return GateView(sentence, 2, box)
    sentence, code = report.headline(), report.exit_code
    cls = "ok" if code == EXIT_OK else "bad" if code == EXIT_BREACH else "warn"
    exit_text = "" if f"exit {code}" in sentence else f" · exit {code}"  # an inconclusive sentence says it
    box = (f'<div id="gate-verdict" class="{cls}"><b>{escape(tag)}{escape(sentence)}</b>{exit_text} '
           "(the profile's [gate]; docs/gate.md)</div>")
    doc = report.to_json()
    rows: list[tuple[object, ...]] = [(_MARK.get(str(c["verdict"]), c["verdict"]), "run", c["name"], "", "", "",
                                       c["detail"]) for c in doc["checks"]]
    for b in doc["budgets"]:
        value = b["value"]
        rows.append((_MARK.get(str(b.get("verdict")), b["status"]), b["scope"], b["key"],
                     "n/a" if value is None else f"{cell(value)} {b['unit']}".rstrip(), b["limit_text"],
                     b["samples"], b.get("verdict_reason") or b["reason"]))
    notes = [f"warning: {w}" for w in doc["warnings"]]
    noise = doc.get("noise")
    if isinstance(noise, Mapping):
        notes += ([f"runner: {noise['runner']}"] if noise.get("runner") else []) + \
            [f"note: {n}" for n in noise.get("notes") or []]
    notes.append(f"budgets from {doc['source']}; verdicts weighed against the run's measured noise (docs/gate.md)")
    return GateView(sentence, code, box, tuple(rows), tuple(notes))


def gate_section(view: GateView, said: Said) -> str:
    """The "Gate" section's body: every run check and budget with its verdict and why.

    Args:
        view: the gate's verdict (:func:`gate_view`).
        said: the sentences the page said above: a "why" said whole reads "as above",
            a cause said reads "cause: as above".

    Returns:
        HTML; "" when the budgets could not be evaluated (the verdict box says why).
    """
    if not view.rows:
        return ""
    rows = [(*row[:-1], said.fresh(str(row[-1])) or "as above") for row in view.rows]
    return (table(["verdict", "scope", "budget", "value", "limit", "samples", "why"], rows, left=3)
            + "".join(f'<p class="note">{escape(n)}</p>' for n in view.notes))


def checkpoint(s: Mapping[str, Any]) -> bool:
    """summary.json is the checkpoint written during the load (hopbench.driver._single): the process
    never wrote its final summary (SIGKILL, out of memory): ``ended_at`` null, no ``interrupted_by``."""
    return s.get("complete") is False and not s.get("interrupted_by") and "ended_at" in s \
        and s.get("ended_at") is None


def run_figures(run: RunData) -> str:
    """The run's throughput and error rate (summary.json ``headline``, or
    computed from the counters for results written before it existed),
    green when every stream completed, red when errors pass the threshold.

    Returns:
        one ``<div>`` of class ok, warn or bad.
    """
    s = run.summary
    head = s.get("headline") if isinstance(s.get("headline"), Mapping) else None
    snap = run.snapshot
    started = head.get("started") if head else snap.counter(ALL, "started")
    completed = head.get("completed") if head else snap.counter(ALL, "completed")
    errors = head.get("errors") if head else sum(snap.counter(ALL, k) for k in BROKEN)
    if not started:
        return '<div class="bad">no stream was measured</div>'
    rate = errors / started
    cls = "bad" if not completed or rate > ERROR_RATE_WARN else "warn" if errors else "ok"
    parts = [f"{completed:,} of {started:,} streams completed", f"error rate {rate:.1%}"]
    if s.get("complete") is False:  # an interrupted run's figures cover the part that ran: never green
        cls = "bad"
        by = s.get("interrupted_by")
        parts.insert(0, "INCOMPLETE" + (f" (interrupted by {by})" if by else
                                        " (killed before its final write)" if checkpoint(s) else ""))
    elif s.get("saturated") and cls == "ok":
        cls = "warn"
    if head:
        if head.get("interrupted_rate"):
            parts.append(f"interrupted {head['interrupted_rate']:.1%}")
        parts += [f"{cell(head.get('completed_per_s'))} completed/s",
                  tokens_phrase(head, "tok/s", " (over the run)")]
    load = s.get("load")
    held = load_text(load) if isinstance(load, Mapping) else None
    if held is not None:
        parts.append(f"load: {held}")
    gen = s.get("generator")
    cpu = cpu_phrase(gen, s.get("workers")) if isinstance(gen, Mapping) else ""
    if cpu:
        parts.append(f"cpu: {cpu}")
    return f'<div class="{cls}"><b>{escape(" · ".join(parts))}</b></div>'


def _is_bad(w: str) -> bool:
    """Red: results that cannot be trusted as they stand (as the terminal summary does)."""
    return "saturated" in w or any(word in w for word in ("interrupted", "crashed", "partial")) \
        or w.startswith(("nothing completed", "no output", "error rate", "target lost", "target unreachable")) \
        or ": nothing completed:" in w or ": no output:" in w


def _run_warnings(run: RunData) -> list[str]:
    """summary.json's warnings, with those an older summary lacks (incomplete run, bursts, client lag)."""
    s = run.summary
    warnings = [w for w in s.get("warnings") or [] if isinstance(w, str)]
    if s.get("complete") is False and not any("interrupted" in w or "crashed" in w for w in warnings):
        warnings.insert(0, "run incomplete (complete: false): " + (
            "summary.json is a checkpoint written during the load: the run was killed before its final write; "
            if checkpoint(s) else "") + "results are partial")
    completed = run.snapshot.counter(ALL, "completed")
    # flags warn past summary.json's rule only (more than half of the completed streams;
    # bursts re-judged against the origin's record: hopbench.measure._burst)
    if not any("proxy buffering" in w or "origin_burst" in w for w in warnings):
        warnings += burst_warnings(dict(run.snapshot.scopes[ALL].counters) if ALL in run.snapshot.scopes else {},
                                   embedded=s.get("target") == "embedded")
    lagged = run.snapshot.counter(ALL, "client_lagged")
    if lagged * 2 > completed > 0 and not any("client_lagged" in w for w in warnings):
        warnings.append(f"{lagged} streams arrived in bursts because the client's own event loop was late "
                        "to read them (client_lagged: not evidence of a proxy; see loop_lag)")
    return warnings


def warnings_html(run: RunData, said: Said | None = None) -> str:
    """The run's warnings, red ones first, each sentence said once.

    A warning the page already said whole (e.g. in the gate's verdict) is left
    out; a ``cause: ...`` already said reads "cause: as above"; a family of
    :data:`FOLD_AT` or more warnings with the same lead (the text before the
    first colon, e.g. six "error bound" warnings) shows its first in full and
    folds the others into a ``<details>`` under it.

    Args:
        run: the run.
        said: the sentences said above on the page (updated); None: nothing yet.

    Returns:
        the boxes (``<div class="bad|warn|ok">``) and the folder's notes.
    """
    said = said if said is not None else Said()
    warnings = _run_warnings(run)
    families: dict[str, list[str]] = {}
    for w in sorted(warnings, key=lambda w: not _is_bad(w)):  # stable: red first, each in its order
        shown = said.fresh(w)
        if shown is not None:
            families.setdefault(w.partition(":")[0] if ":" in w else w, []).append(shown)
    out = []
    for lead, members in families.items():
        first, rest = members[0], members[1:]
        cls = "bad" if any(_is_bad(m) for m in members) else "warn"
        if len(members) < FOLD_AT:
            out += [f'<div class="{"bad" if _is_bad(m) else "warn"}">{escape(m)}</div>' for m in members]
            continue
        items = "".join(f"<li>{escape(m)}</li>" for m in rest)
        out.append(f'<div class="{cls}">{escape(first)}<details><summary>{len(rest)} more '
                   f'&ldquo;{escape(lead)}&rdquo; warnings</summary><ul>{items}</ul></details></div>')
    if not warnings:
        out.append('<div class="ok">no warnings: the run completed and the load generator kept up</div>')
    out += [f'<p class="note">{escape(n)}</p>' for n in run.notes]
    return "".join(out)
