"""Every field a run writes is defined in the docs ("a figure is worth only its definition").

Runs six example profiles, shortened, on the embedded emulator (faults: error
samples, HTTP errors, stop classes; sessions: per-turn counters; trace: the
trace block of ``load``, the prompt cache; workloads: lengths; ab-arms: the
arms; smoke with ``--workers 2``: the workers' detail) and checks that each key of
summary.json, of a streams.jsonl line and of a timeline.jsonl line is named in
the results pages (docs/results.md and docs/results/*.md): as a literal
(`` `key` `` or ``"key"``), as a component of a dotted name there
(`` `load.peak_open` `` names ``peak_open``), or through a
pattern (`` `turn.<k>.streams` ``, `` `http_error.<status>` ``,
`` `tokens.{input,output}` ``, `` `failed.*` ``). The profile as given
(``profile``, ``resolved_load``) and the gate's budgets are the profile's own
keys: those are checked against the whole docs/ folder. Where the results pages hand a
part over to another doc (``worker_detail``: scaleout.md; the A/B arms'
comparisons: compare.md) that doc counts too. Scenario, arm and model names
are the user's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def results_text() -> str:
    """The results pages, one text: docs/results.md (the index) and every page of docs/results/."""
    pages = [DOCS / "results.md", *sorted((DOCS / "results").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


# (profile, replacements that shorten it: (old, new) on its text, extra arguments)
_RUNS: tuple[tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]], ...] = (
    ("faults.toml", (("requests = 600", "requests = 120"),), ()),
    ("sessions.toml", (("requests = 480", "requests = 48"),), ()),
    ("trace.toml", (('speedup = 2.0', 'speedup = 2.0\nend_ms = 4000'),), ()),
    ("workloads.toml", (("requests = 2000", "requests = 200"),), ()),
    ("ab-arms.toml", (("duration_s = 8", "duration_s = 3"),), ()),
    ("smoke.toml", (("duration_s = 10", "duration_s = 3"),), ("--workers", "2")),  # worker_detail, hosts
)


class DocNames:
    """The names a doc defines: backticked literals and patterns, quoted keys,
    and the components of dotted backticked names."""

    def __init__(self, text: str) -> None:
        ticks = set(re.findall(r"`([^`\n]{1,160})`", text))
        self.literals = {t.strip('"') for t in ticks} | set(re.findall(r'"([A-Za-z_][\w.\-=<>]*)"', text))
        self.components = {part for t in ticks for part in re.split(r"[.\s,()=\[\]:]+", t) if part}
        self.patterns = [p for t in ticks if any(c in t for c in "<{*") for p in [_pattern(t)] if p]

    def __contains__(self, key: str) -> bool:
        return (key in self.literals or key in self.components
                or any(p.fullmatch(key) for p in self.patterns))


def _pattern(token: str) -> re.Pattern[str] | None:
    """A doc's name pattern as a regex: ``<x>`` and ``*`` any name part,
    ``<a|b>`` and ``{a,b}`` alternatives; None for a token that is not one, or
    that has no letter of its own (`` `<name>` `` alone would define any key)."""
    out, i, own = "", 0, ""
    try:
        while i < len(token):
            c = token[i]
            if c in "<{":
                j = token.index(">" if c == "<" else "}", i)
                inner = token[i + 1:j]
                alts = inner.split("|") if c == "<" else [a.strip() for a in inner.split(",")]
                out += ("(" + "|".join(map(re.escape, alts)) + ")") if len(alts) > 1 else r"[^\s`]+"
                i = j + 1
            elif c == "*":
                out, i = out + r"[^\s`]+", i + 1
            else:
                out, own, i = out + re.escape(c), own + c, i + 1
        return re.compile(out) if re.search("[A-Za-z]", own) else None
    except (ValueError, re.error):
        return None


# where the keys are the user's names (scenarios, arms, models), not fields
_NAMED = (".scopes", ".warmup", ".profile.emulator.models", ".profile.upstream.models")

# the docs the results pages hand a part of summary.json to (each still checked against them too)
_DELEGATED = ((".worker_detail", "scaleout.md"), (".arm_differences.pairs[].metrics", "compare.md"),
              (".arm_differences.pairs[].rates", "compare.md"),
              (".arm_differences.pairs[].paired", "ab-arms.md"))


def _keys(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, key) for every key of a JSON document; user-named keys (``_NAMED``:
    scenario names...) are replaced by ``*`` and not yielded."""
    if isinstance(node, dict):
        named = path in _NAMED
        for key, value in node.items():
            if not named:
                yield path, key
            yield from _keys(value, f"{path}.{'*' if named else key}")
    elif isinstance(node, list):
        for item in node[:5]:
            yield from _keys(item, path + "[]")


def _is_profile_echo(path: str) -> bool:
    return path.startswith((".profile", ".resolved_load", ".gate"))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("docs-fields")
    shutil.copytree(ROOT / "profiles" / "data", base / "data")  # the profiles' relative paths
    folders = []
    for name, edits, args in _RUNS:
        text = (ROOT / "profiles" / name).read_text(encoding="utf-8")
        for old, new in edits:
            assert old in text, f"profiles/{name} changed: {old!r} not found (update this test)"
            text = text.replace(old, new)
        prof = base / name
        prof.write_text(text, encoding="utf-8")
        out = base / name.replace(".toml", "")
        proc = subprocess.run([sys.executable, "-m", "hopbench", "run", str(prof), "--out", str(out),
                               "--no-progress", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert (out / "summary.json").exists(), proc.stderr[-2000:]
        folders.append(out)
    return folders


def test_the_patterns_read_the_docs_as_written() -> None:
    names = DocNames("`turn.<k>.streams`, `http_error.<status>`, `tokens.{input,output}`, "
                     '`failed.*`, `stop.<stop|length>`, `load.peak_open`, "ground_truth": x, `<name>`, `*`')
    for key in ("turn.3.streams", "http_error.503", "tokens.output", "failed.engine_error",
                "stop.length", "peak_open", "ground_truth"):
        assert key in names, key
    for key in ("turn.3.other", "tokens.cached", "stop.other", "peak", "status"):
        assert key not in names, key


@pytest.mark.slow
def test_every_field_a_run_writes_is_defined_in_the_docs(outputs: list[Path]) -> None:
    results = DocNames(results_text())
    delegated = {doc: DocNames(results_text() + "\n" + (DOCS / doc).read_text(encoding="utf-8"))
                 for _, doc in _DELEGATED}
    every_doc = DocNames("\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))))
    missing: dict[str, str] = {}
    seen = 0
    for out in outputs:
        docs: list[tuple[str, Any]] = [("summary.json", json.loads((out / "summary.json").read_text()))]
        for log in ("streams.jsonl", "timeline.jsonl"):
            # (with --workers too: the workers' parts merged into one streams.jsonl, none left;
            # docs/results/folder.md)
            assert not list(out.glob("streams.part-*.jsonl")), out.name
            lines = (out / log).read_text(encoding="utf-8").splitlines()
            assert lines, f"{out.name}: {log} is empty"
            docs += [(log, json.loads(line)) for line in lines[:300]]
        for file, doc in docs:
            for path, key in _keys(doc):
                seen += 1
                if _is_profile_echo(path):  # a profile key, maybe by its dotted name ("load.loop")
                    known = key in every_doc or all(part in every_doc for part in key.split("."))
                else:
                    doc_of = next((d for prefix, d in _DELEGATED if path.startswith(prefix)), None)
                    known = key in (results if doc_of is None else delegated[doc_of])
                if not known:
                    missing.setdefault(f"{file}: {path}.{key}".replace(": .", ": "), out.name)
    assert seen > 500  # the runs wrote what they should (a test of nothing passes too easily)
    assert not missing, "not defined in docs/results.md nor docs/results/:\n" + "\n".join(
        f"  {k}  (from {v})" for k, v in sorted(missing.items()))


def test_a_saturation_verdicts_fields_are_defined_in_the_docs() -> None:
    # (the example runs are not saturated: their causes list is empty)
    from hopbench.engine._saturation import GeneratorFigures, judge

    verdict = judge(GeneratorFigures(loop_lag_ns=40_000_000, schedule_lag_ns=0, cpu_mean=0.97, cpu_max=0.99,
                                     run_ns=60_000_000_000)).to_json()
    assert verdict["causes"], verdict
    results = DocNames(results_text())
    assert [key for _, key in _keys(verdict) if key not in results] == []
