"""Import direction goes one way (STYLE.md §1): every module of the package has a
rank, and a module imports only modules of a lower rank, at module level or
inside a function alike. The ranks are the map drawn in docs/architecture.md;
the public surface is curated (STYLE.md §2).

A new module without a rank fails :func:`test_layers_every_module_has_a_rank`:
give it the lowest rank above everything it imports, and update the map in
docs/architecture.md.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import hopbench

PACKAGE = Path(hopbench.__file__).parent

# rank -> modules. Read bottom-up: each line may import only the lines above it.
LAYERS: dict[int, tuple[str, ...]] = {
    # leaves: import nothing from hopbench
    0: ("hopbench._errors", "hopbench._exit", "hopbench._units", "hopbench._version", "hopbench._format",
        "hopbench._collector", "hopbench.protocols._observations", "hopbench.protocols._signals",
        "hopbench.protocols._template",
        "hopbench._wire_text", "hopbench._inflight", "hopbench._digest",
        "hopbench.emulator._record", "hopbench.emulator._wire", "hopbench.emulator._metrics",
        "hopbench.emulator._prefix",
        "hopbench._marker", "hopbench._overhead", "hopbench._burst"),
    # pure foundations: the clock constants, TOML with locations, the SSE scanner,
    # histograms and metric names, outcome/detail/rate names
    1: ("hopbench._clock", "hopbench._toml", "hopbench.sse", "hopbench._hdr", "hopbench._outcomes",
        "hopbench._html",
        "hopbench._lengths", "hopbench._textfile", "hopbench._schedule"),
    # pure core: decoder base, recorder, statistics, emulator config
    2: ("hopbench.protocols._base", "hopbench._recorder", "hopbench._stats", "hopbench.emulator._config",
        "hopbench._fields",
        "hopbench._dataset", "hopbench._slo_spec", "hopbench._stage_spec", "hopbench._series",
        "hopbench._saturation", "hopbench._trace", "hopbench._pacer", "hopbench._runqueue",
        "hopbench._dispatch"),
    # pure: protocol decoders, the budget grammar, emulator behaviour
    3: ("hopbench.protocols._chat", "hopbench.protocols._messages", "hopbench.protocols._responses",
        "hopbench._budget", "hopbench.emulator._behaviour", "hopbench.emulator._capacity",
        "hopbench._scrape_spec", "hopbench._report_scrape", "hopbench._live_metrics", "hopbench._workload",
        "hopbench._cancel", "hopbench._arms", "hopbench._slo", "hopbench._search", "hopbench._counters",
        "hopbench._report_workload", "hopbench._upstream"),
    # the profile (validates [emulator] and [gate] with their owners' parsers)
    4: ("hopbench.protocols._decode", "hopbench.emulator._app",
        "hopbench.emulator._embedded", "hopbench._sessions"),
    5: ("hopbench.protocols", "hopbench.emulator._serve", "hopbench._profile"),
    # per-stream meter (pure), the HTTP transport (I/O), the emulator's public surface
    6: ("hopbench._meter", "hopbench._transport", "hopbench.emulator"),
    # the runner (the only async code that stamps), results folder writer/reader
    7: ("hopbench._runner", "hopbench._results", "hopbench._scrape", "hopbench._capacity_report",
        "hopbench._gateway"),
    # the one finish path (judge, summary record) and the views of a results folder
    8: ("hopbench._finish", "hopbench._export", "hopbench._compare", "hopbench._summary_table",
        "hopbench._report_capacity",
        "hopbench._progress"),
    # one run (the single-process shell); report.html shows compare's verdicts (two runs);
    # the gate refuses a baseline by compare's load-shape rule
    9: ("hopbench._run", "hopbench._report_html", "hopbench._arms_report", "hopbench._gate"),
    # workers and stages drive _run's pieces
    10: ("hopbench._workers", "hopbench._stages"),
    11: ("hopbench._ray",),
    # the package's public surface, then the command line and the entry points
    12: ("hopbench",),
    13: ("hopbench.cli",),
    14: ("hopbench.__main__", "hopbench.emulator.__main__"),
}
RANK = {m: r for r, mods in LAYERS.items() for m in mods}

# (importer, imported) pairs of equal rank that may import each other: none today.
ALLOWED_SIBLINGS: frozenset[tuple[str, str]] = frozenset()

PURE = ["hopbench.sse", "hopbench.protocols", "hopbench._meter", "hopbench._recorder", "hopbench._hdr",
        "hopbench._toml", "hopbench._errors", "hopbench._outcomes", "hopbench._budget", "hopbench._format",
        "hopbench._inflight", "hopbench._workload", "hopbench._lengths", "hopbench._dataset",
        "hopbench._cancel", "hopbench._slo", "hopbench._slo_spec", "hopbench._digest", "hopbench._finish",
        "hopbench._counters", "hopbench._trace", "hopbench._sessions",
        "hopbench._marker", "hopbench._overhead", "hopbench._burst"]
HIGH = ["hopbench._runner", "hopbench._run", "hopbench.cli", "hopbench._transport", "trio", "httpx"]
# validating a profile must not start the emulator's server stack
LIGHT = {"hopbench._profile": ["uvicorn", "anyio", "httpx", "trio", "hopbench.emulator._serve",
                               "hopbench.emulator._app", "hopbench.emulator._embedded"]}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """Every hopbench module ``name`` imports, with its line: module level,
    inside functions and under ``if TYPE_CHECKING`` alike. ``from . import x``
    counts as importing ``pkg.x`` when that is a module, else ``pkg``."""
    modules = _modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "hopbench"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "hopbench":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((sub if sub in modules else target, node.lineno))
    return found


def test_layers_every_module_has_a_rank() -> None:
    missing = sorted(set(_modules()) - set(RANK))
    assert not missing, f"modules without a rank in tests/test_layers.py LAYERS: {missing}"
    stale = sorted(set(RANK) - set(_modules()))
    assert not stale, f"ranked modules that no longer exist: {stale}"


@pytest.mark.parametrize("module", sorted(_modules()))
def test_layers_imports_point_down(module: str) -> None:
    if module not in RANK:
        pytest.fail(f"{module} has no rank")
    bad = []
    for target, line in _imports(module, _modules()[module]):
        if target == module:
            continue
        rank = RANK.get(target)
        if rank is None:
            bad.append(f"line {line}: {target} (not a ranked module)")
        elif rank >= RANK[module] and (module, target) not in ALLOWED_SIBLINGS:
            bad.append(f"line {line}: {target} (rank {rank} >= {RANK[module]})")
    assert not bad, f"{module} (rank {RANK[module]}) imports upward: " + "; ".join(dict.fromkeys(bad))


def test_layers_checker_catches_lazy_and_relative_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from ._errors import HopbenchError\n"
                   "def f():\n    from . import _run\n    from .emulator import _serve\n"
                   "    import hopbench.cli\n", encoding="utf-8")
    assert [t for t, _ in _imports("hopbench._x", src)] == [
        "hopbench._errors", "hopbench._run", "hopbench.emulator._serve", "hopbench.cli"]


@pytest.mark.parametrize("module", PURE)
def test_layers_pure_core_imports_no_io(module: str) -> None:
    code = (f"import sys, {module}; bad = [m for m in {HIGH!r} if m in sys.modules]; "
            "print(','.join(bad)); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{module} pulls in: {proc.stdout.strip()} {proc.stderr[-500:]}"


def test_layers_validating_a_profile_loads_no_server_stack() -> None:
    profile = Path(__file__).parent.parent / "profiles" / "smoke.toml"
    for module, heavy in LIGHT.items():
        code = (f"import sys; from {module} import load_profile; load_profile({str(profile)!r}); "
                f"bad = [m for m in {heavy!r} if m in sys.modules]; print(','.join(bad)); "
                "sys.exit(1 if bad else 0)")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"validating loads: {proc.stdout.strip()} {proc.stderr[-500:]}"


def test_layers_public_names_are_exported() -> None:
    for name in hopbench.__all__:
        assert hasattr(hopbench, name), name
    public = {n for n in dir(hopbench) if not n.startswith("_")}
    modules = {"sse", "protocols", "emulator", "cli"}
    assert public - modules <= set(hopbench.__all__), public - modules - set(hopbench.__all__)


def test_layers_emulator_exports_resolve() -> None:
    import hopbench.emulator as emulator

    for name in emulator.__all__:
        assert getattr(emulator, name) is not None, name
