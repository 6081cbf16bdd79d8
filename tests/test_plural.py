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
