"""The docs point at things that exist.

Every relative link in README.md, docs/**/*.md, benchmarks/README.md and results/README.md
resolves to a file of the repository, and every ``#anchor`` in it to a heading of the file it
names, by GitHub's rule (:func:`github_anchor`).

In the same pages every code span that names code is checked (:func:`stale_spans`):

- a repository path (``hopbench/...py``, ``tests/...py``, ``benchmarks/...``) exists; so does a
  path inside the package without its ``hopbench/`` (``engine/_stream.py``) and a bare file
  name (``_meter.py``, ``bench_run.py``, ``cli.py``), found anywhere under hopbench/ or
  benchmarks/;
- a qualified name that starts with a module of the package (``_runner.LoadRunner``,
  ``emulator._config``, ``hopbench.measure._metrics.METRICS``), a class of it
  (``Summary.to_json``) or a standard-library module (``time.monotonic_ns()``) names something
  that exists;
- an example's import in a fenced block (``from hopbench.driver._results import read_summary``)
  names something that exists;
- a bare private name (``_meter``, ``_open_loop``) is a module of the package: the docs name a
  function or a method with its module or class (``LoadRunner._publish``), so an old module's
  short name (``_finish``, ``_run``, ``_report_html``) fails even where a method shares it.

Two small explicit rules keep this mechanical. Spans that look like code but name no Python
object (key suffixes such as ``_ms``, a Prometheus series' ``_sum``, an ASGI message type, a
JUnit class name) are listed in :data:`NOT_CODE`, each with what it is. A short module name
that two folders share (``_metrics``: measure's and the emulator's) resolves when either
module has the name. The package is read with :mod:`ast`, never imported: a name is found as a
module, a function, a class, a module or class assignment, an import, an ``__all__`` entry or,
in a class, an attribute set on ``self`` in one of its methods or one of its bases' (mixins
included).
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hopbench"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: Code spans that look like code names but name no Python object: they are never checked.
NOT_CODE: dict[str, str] = {
    "_s": "a profile key's unit suffix (docs/profiles.md)",
    "_ms": "a profile key's unit suffix (docs/profiles.md)",
    "_count": "a Prometheus histogram's series suffix",
    "_sum": "a Prometheus histogram's series suffix",
    "_total": "a Prometheus counter's suffix",
    "_now": "a timeline.jsonl key suffix (<phase>_now)",
    "profile._source": "a Prometheus label value of hopbench's live metrics",
    "hopbench.gate.run": "a JUnit class name written by hopbench gate",
    "http.disconnect": "an ASGI message type",
    "json.decode": "msgspec's json.decode, not the standard library's json",
}

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:|^//")
_FILE_SUFFIXES = (".json", ".jsonl", ".html", ".toml", ".md", ".py", ".hlog", ".hgrm", ".log", ".csv",
                  ".txt", ".yaml", ".yml", ".sse", ".png")
_QUALIFIED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")
_REPO_PATH = re.compile(r"(?:hopbench|tests|benchmarks)/[\w./\-]*")
_PACKAGE_PATH = re.compile(r"(?:protocols|measure|workload|emulator|config|engine|observe|driver|views|report)"
                           r"/[\w./\-]*\.py")
_BARE_FILE = re.compile(r"\w+\.py")
_BARE_PRIVATE = re.compile(r"_[A-Za-z]\w*")


def doc_files() -> list[Path]:
    """The Markdown files whose links are checked: README.md, docs/**/*.md,
    benchmarks/README.md and results/README.md, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            ROOT / "benchmarks" / "README.md", ROOT / "results" / "README.md"]


def name_files() -> list[Path]:
    """The Markdown files whose code spans are checked: README.md, docs/**/*.md (the
    results pages included) and benchmarks/README.md, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) for every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before duplicates are numbered).

    Links become their text and code spans and emphasis lose their marks (as rendered),
    then the text is lower-cased, every character that is not a letter, a digit, ``-``,
    ``_`` or a space is dropped, and each space becomes ``-``.

    Args:
        heading: the heading's Markdown text, without the leading ``#`` marks.

    Returns:
        The anchor, without ``#``; possibly empty.
    """
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor of a Markdown file: its headings' (a repeated one gets ``-1``, ``-2``,
    ... in order, as on GitHub) and any ``<a name/id="...">``."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = path.read_text(encoding="utf-8")
    for _, line in prose_lines(text):
        if (m := _HEADING.match(line)) is not None:
            base = github_anchor(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        found.update(_HTML_ID.findall(line))
    return frozenset(found)


def relative_links(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, target) for each relative link or image of a Markdown file, inline or
    as a reference definition; links inside code (spans and fenced blocks) are not links."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub("", line)
        targets = _LINK.findall(line)
        if (m := _REFERENCE.match(line)) is not None:
            targets.append(m.group(1))
        for target in targets:
            if not _SCHEME.match(target):
                yield number, target


def broken_link(source: Path, target: str) -> str | None:
    """Why a relative link of ``source`` does not resolve, or None when it does."""
    file_part, _, anchor = target.partition("#")
    file_part = file_part.split("?", 1)[0]
    dest = (source.parent / file_part).resolve() if file_part else source
    if not dest.exists():
        return "no such file"
    if not dest.is_relative_to(ROOT):
        return "outside the repository"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading with anchor #{anchor} in {dest.relative_to(ROOT)}"
    return None


def test_github_anchor_follows_githubs_rule(tmp_path: Path) -> None:
    assert github_anchor("Exit codes of `hopbench run`") == "exit-codes-of-hopbench-run"
    assert github_anchor("`<scope>.<metric>.hgrm`") == "scopemetrichgrm"
    assert github_anchor("A/B arms") == "ab-arms"
    assert github_anchor("Trace replay schedule lag (`bench_trace.py`)") == "trace-replay-schedule-lag-bench_tracepy"
    assert github_anchor("1. Scraping the gateway (`[[scrape]]`)") == "1-scraping-the-gateway-scrape"
    assert github_anchor("SLOs, goodput -- and [links](x.md)") == "slos-goodput----and-links"
    doc = tmp_path / "d.md"
    doc.write_text("# Rates\n\n```\n# not a heading\n```\n## Rates\n### Rates\n<a name=\"here\"></a>\n",
                   encoding="utf-8")
    assert anchors(doc) == {"rates", "rates-1", "rates-2", "here"}


def test_relative_links_are_found_outside_code(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("[a](x.md#y) ![b](img.png) [c](https://e.org) `[d](code.md)`\n"
                   "```\n[e](fenced.md)\n```\n[f]: ref.md\n[g [h]](i.md \"title\")\n", encoding="utf-8")
    assert [t for _, t in relative_links(doc)] == ["x.md#y", "img.png", "ref.md", "i.md"]


def test_docs_relative_links_resolve() -> None:
    broken = []
    for doc in doc_files():
        for number, target in relative_links(doc):
            if (why := broken_link(doc, target)) is not None:
                broken.append(f"{doc.relative_to(ROOT)}:{number}: ({target}): {why}")
    assert not broken, "broken links:\n" + "\n".join(broken)


# -- docs/architecture.md: the paths and names it cites ----------------------------------------


@cache
def _modules() -> dict[str, ast.Module]:
    """The package's modules by dotted name (``hopbench.engine._runner``; a package by its
    own name), parsed."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


@cache
def _classes() -> dict[str, tuple[ast.ClassDef, ...]]:
    """Every class of the package (nested ones too) by its name."""
    found: dict[str, list[ast.ClassDef]] = {}
    for tree in _modules().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(node)
    return {name: tuple(nodes) for name, nodes in found.items()}


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A body's statements, and those of its ``if``, ``try`` and ``with`` blocks, in order."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With)):
            for block in (stmt.body, getattr(stmt, "orelse", []), getattr(stmt, "finalbody", []),
                          *(h.body for h in getattr(stmt, "handlers", []))):
                yield from _statements(block)


def _members(node: ast.Module | ast.ClassDef) -> dict[str, ast.AST]:
    """The names a module or class body defines, with the node that defines each (in its
    ``if``, ``try`` and ``with`` blocks too: ``_fast_loads`` is set under ``try``)."""
    members: dict[str, ast.AST] = {}
    for stmt in _statements(node.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        members[name.id] = stmt
                        if name.id == "__all__" and isinstance(stmt.value, (ast.List, ast.Tuple)):
                            members.update({e.value: stmt for e in stmt.value.elts
                                            if isinstance(e, ast.Constant) and isinstance(e.value, str)})
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            members[stmt.target.id] = stmt
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                members[alias.asname or alias.name.split(".")[0]] = alias
    if isinstance(node, ast.ClassDef):  # attributes set on self in a method
        for stmt in ast.walk(node):
            targets = (stmt.targets if isinstance(stmt, ast.Assign)
                       else [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else [])
            for target in targets:
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self"):
                    members.setdefault(target.attr, stmt)
    return members


def _resolve(node: ast.Module | ast.ClassDef, parts: list[str], seen: frozenset[int] = frozenset()) -> bool:
    """Whether ``parts`` (a dotted name's rest) names something inside ``node``; a class's
    bases (by name, anywhere in the package) are searched too."""
    if not parts:
        return True
    member = _members(node).get(parts[0])
    if member is not None:
        if len(parts) == 1:
            return True
        if isinstance(member, ast.ClassDef):
            return _resolve(member, parts[1:], seen)
        if isinstance(member, ast.alias):  # an imported class: look it up by its name
            return any(_resolve(c, parts[1:], seen) for c in _classes().get(member.name.split(".")[-1], ()))
        return False
    if isinstance(node, ast.ClassDef) and id(node) not in seen:
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
            if any(_resolve(c, parts, seen | {id(node)}) for c in _classes().get(name, ())):
                return True
    return False


def code_name_exists(name: str) -> bool | None:
    """Whether a qualified name of the docs names something that exists.

    Args:
        name: dotted, e.g. ``_runner.LoadRunner._send_own``, ``Summary.to_json``,
            ``time.monotonic_ns()`` (a trailing ``()`` is ignored).

    Returns:
        True or False when the name starts with a module of the package (any tail of its dotted
        name: ``_runner``, ``engine._runner``, ``hopbench.engine._runner``), a class of the
        package, a standard-library module, or ``_`` (a private module's name that no module
        has any more: ``_run.finish_run``); None when it starts with none of those and so is
        not a code name (``load.due``, ``run.load_held``: keys of the results and the gate).
    """
    parts = name.removesuffix("()").split(".")
    modules = _modules()
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        matches = [tree for dotted, tree in modules.items()
                   if dotted == prefix or (parts[0] != "hopbench" and dotted.endswith("." + prefix))]
        if matches:
            return any(_resolve(tree, parts[k:]) for tree in matches)
    if parts[0] in _classes():
        return any(_resolve(c, parts[1:]) for c in _classes()[parts[0]])
    if parts[0] in sys.stdlib_module_names:
        try:
            obj: object = importlib.import_module(parts[0])
        except ImportError:
            return False
        for part in parts[1:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False if parts[0].startswith("_") else None  # a private module's name, gone


def doc_spans(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every code span of a Markdown file outside fenced blocks."""
    text = path.read_text(encoding="utf-8")
    return [(number, span[1:-1].strip()) for number, line in prose_lines(text)
            for span in _CODE_SPAN.findall(line)]


@cache
def _module_names() -> frozenset[str]:
    """The short names of the package's modules (``_meter``, ``_open_loop``, ``sse``)."""
    return frozenset(dotted.rpartition(".")[2] for dotted in _modules())


@cache
def _file_names() -> frozenset[str]:
    """The file names of the package's and the benchmarks' Python files."""
    return frozenset(p.name for folder in (PACKAGE, ROOT / "benchmarks") for p in folder.rglob("*.py"))


def span_exists(span: str) -> bool | None:
    """Whether one code span of the docs names something that exists.

    Args:
        span: a code span's text, without its backticks.

    Returns:
        True or False for a span that names a path, a file, a code name or a private name
        (the rules in this module's docstring); None for a span that names none of those
        (``[load].concurrency``, ``load.due``, a command line) or one listed in NOT_CODE.
    """
    if span in NOT_CODE:
        return None
    if _REPO_PATH.fullmatch(span):
        return (ROOT / span).exists()
    if _PACKAGE_PATH.fullmatch(span):
        return (PACKAGE / span).exists()
    if _BARE_FILE.fullmatch(span):
        return span in _file_names()
    if span.endswith(_FILE_SUFFIXES):
        return None
    if _BARE_PRIVATE.fullmatch(span):
        return span in _module_names()
    if _QUALIFIED.fullmatch(span):
        return code_name_exists(span)
    return None


_IMPORT = re.compile(r"^\s*from\s+(hopbench(?:\.\w+)*)\s+import\s+([\w\s,]+?)\s*$|^\s*import\s+(hopbench(?:\.\w+)*)\s*$")


def example_imports(path: Path) -> list[tuple[int, str]]:
    """(line number, dotted name) of every hopbench name the examples in a Markdown file's
    fenced blocks import (``from hopbench.driver._results import read_summary`` gives
    ``hopbench.driver._results.read_summary``)."""
    found, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif fenced and (m := _IMPORT.match(line)) is not None:
            if m.group(3):
                found.append((number, m.group(3)))
            else:
                found += [(number, f"{m.group(1)}.{name.strip()}") for name in m.group(2).split(",")
                          if name.strip()]
    return found


def stale_spans(path: Path) -> tuple[int, list[str]]:
    """How many code spans and example imports of a Markdown file were checked, and those
    that name nothing (``line N: span``)."""
    checked, stale = 0, []
    for n, span in [*doc_spans(path), *example_imports(path)]:
        found = span_exists(span)
        checked += found is not None
        if found is False:
            stale.append(f"line {n}: {span}")
    return checked, stale


def test_code_name_exists_reads_the_package() -> None:
    assert code_name_exists("hopbench.measure._metrics.METRICS")
    assert code_name_exists("emulator._config")
    assert code_name_exists("protocols._base.FAST_PATHS")
    assert code_name_exists("_recorder.Recorder.take_interval")
    assert code_name_exists("time.monotonic_ns()")
    assert code_name_exists("_runner.LoadRunner.counters")  # set on self in a method
    assert code_name_exists("protocols._base._fast_loads")  # set under try
    assert code_name_exists("_runner.LoadRunner.no_such_method") is False
    assert code_name_exists("_run.finish_run") is False  # the module is driver/_single.py now
    assert code_name_exists("NoSuchModule.x") is None
    assert code_name_exists("load.due") is None


def test_span_exists_rules() -> None:
    assert span_exists("hopbench/engine/_stream.py")
    assert span_exists("engine/_stream.py")
    assert span_exists("_meter.py") and span_exists("bench_run.py") and span_exists("cli.py")
    assert span_exists("_open_loop") and span_exists("LoadRunner._publish")
    assert span_exists("_publish") is False  # a method: named with its class
    assert span_exists("engine._open_loop.LOOKAHEAD_NS")
    assert span_exists("_metrics.METRICS") and span_exists("_metrics.EmulatorMetrics")  # two _metrics modules
    for gone in ("hopbench/_runner.py", "engine/_finish.py", "_finish.py", "_finish", "_report_html",
                 "_runner.LOOKAHEAD_NS", "_trace.body_template", "_nosuch_name", "bench_nosuch.py"):
        assert span_exists(gone) is False, gone
    assert span_exists("_ms") is None and span_exists("http.disconnect") is None
    assert span_exists("[load].concurrency") is None and span_exists("load.due") is None


def test_example_imports_are_read(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("from hopbench.x import y\n```python\nfrom hopbench.driver._results import a, b\n"
                   "import hopbench.views\nfrom os import path\n```\n", encoding="utf-8")
    assert example_imports(doc) == [(3, "hopbench.driver._results.a"), (3, "hopbench.driver._results.b"),
                                    (4, "hopbench.views")]
    assert stale_spans(doc)[1] == ["line 3: hopbench.driver._results.a", "line 3: hopbench.driver._results.b"]


def test_architecture_names_enough_code() -> None:
    checked, _ = stale_spans(ARCHITECTURE)
    assert checked >= 100  # the map names its modules (a check of nothing passes too easily)


@pytest.mark.parametrize("doc", [p.relative_to(ROOT).as_posix() for p in name_files()])
def test_docs_name_only_what_exists(doc: str) -> None:
    _, stale = stale_spans(ROOT / doc)
    assert not stale, f"{doc} names what does not exist:\n" + "\n".join(stale)


def test_readme_is_a_front_door_of_at_most_150_lines() -> None:
    # issue 35: what it is, the two commands, one profile, what a run prints, the commands, links;
    # the rest lives in docs/ (a new section there, a link here)
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move detail to docs/ and link it"
