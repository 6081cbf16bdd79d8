"""Counted nouns agree with their count in every message: "1 worker", "3 workers", never
"worker(s)" (issue 39 follow-up: a new user read "1 worker(s)"). hopbench._format.plural."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hopbench._format import plural

PACKAGE = Path(__file__).resolve().parent.parent / "hopbench"
#: a noun with "(s)" glued on; "(s)" after a space is a unit (seconds: "steps (s)")
_MAYBE_PLURAL = re.compile(r"[A-Za-z]\((s|es)\)")


def _message_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal and f-string piece of a module but its docstrings, with its line."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_message_says_noun_s() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line, text in _message_strings(ast.parse(path.read_text(encoding="utf-8")))
             if _MAYBE_PLURAL.search(text)]
    assert found == [], "say the plural the count calls for (hopbench._format.plural): " + "; ".join(found)


def test_plural_agrees_with_the_count() -> None:
    assert [plural(n, "worker") for n in (0, 1, 2)] == ["workers", "worker", "workers"]
    assert plural(1, "is", "are") == "is" and plural(3, "is", "are") == "are"
    assert plural(2, "CPU") == "CPUs"


#: files another change (issue 39's follow-up) is editing at the time of writing: their
#: "{len(...)} nouns" are theirs to fix; remove a file from here once it passes
_PENDING = {"_run_command.py", "driver/_warnings.py", "config/_trace_spec.py"}
#: a word after the count that is a verb, not a noun to agree ("event 3 of {len(up)} differs")
_VERBS = {"differs", "is", "was", "has"}
_COUNTED_NOUN = re.compile(r" ([a-z]+s)\b")


def _len_then_plural_noun(tree: ast.AST) -> list[tuple[int, str]]:
    """f-strings that print ``{len(x)}`` followed by a plural noun written out ("{len(xs)} repeats"):
    wrong for a count of 1, which ``plural`` gets right."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        for a, b in zip(node.values, node.values[1:]):
            if (isinstance(a, ast.FormattedValue) and a.format_spec is None and isinstance(a.value, ast.Call)
                    and isinstance(a.value.func, ast.Name) and a.value.func.id == "len"
                    and isinstance(b, ast.Constant) and isinstance(b.value, str)
                    and (m := _COUNTED_NOUN.match(b.value)) is not None
                    and m.group(1) not in _VERBS and not m.group(1).endswith("ss")):
                found.append((node.lineno, m.group(1)))
    return found


def test_no_message_prints_a_length_then_a_fixed_plural() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {{len(...)}} {noun}"
             for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).as_posix() not in _PENDING
             for line, noun in _len_then_plural_noun(ast.parse(path.read_text(encoding="utf-8")))]
    assert found == [], "say the plural the count calls for (hopbench._format.plural): " + "; ".join(found)


def test_the_length_rule_catches_what_issue_39_found() -> None:
    tree = ast.parse('f"{len(folders)} repeats: at least 3"; f"{step}: {len(t)} requests"; '
                     'f"event {k} of {len(up)} differs"; f"{len(xs)} {plural(len(xs), \'repeat\')}"')
    assert _len_then_plural_noun(tree) == [(1, "repeats"), (1, "requests")]


def test_fmt_size_never_says_zero_mb() -> None:
    from hopbench._format import fmt_size

    assert [fmt_size(n) for n in (42_500, 99_999, 100_000, 1_300_000)] == ["42.5 KB", "100.0 KB", "0.1 MB", "1.3 MB"]
