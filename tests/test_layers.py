"""Import direction goes one way (STYLE.md §1): every module of the package sits in a
stage of the pipeline (a folder, or the top level's base and face), and a module
imports only modules of its own stage or of a stage before it, at module level or
inside a function alike; inside a stage the imports form no cycle, so its modules
have a rank too. The stages are the map drawn in docs/architecture.md; the public
surface is curated (STYLE.md §2).

A new module lands in a folder and so has a stage; a new top-level module must be
named in BASE (stdlib only) or FACE. A module that imports a later stage fails
:func:`test_layers_imports_point_down`: move the name it needs down, or the module up.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import hopbench

PACKAGE = Path(hopbench.__file__).parent

#: The pipeline's stages, first to last: a module may import its own stage and those before it.
STAGES: tuple[str, ...] = ("base", "protocols", "measure", "workload", "emulator", "config", "engine",
                           "observe", "driver", "check", "views", "report", "face")
#: The top level's base: the standard library only, below every folder.
BASE = frozenset({"hopbench._version", "hopbench._errors", "hopbench._exit", "hopbench._units",
                  "hopbench._clock", "hopbench._format", "hopbench._textfile", "hopbench._toml",
                  "hopbench._lazy", "hopbench._limits", "hopbench._advice", "hopbench.sse"})
#: The face: the public package, the command line and the entry points.
FACE = frozenset({"hopbench", "hopbench.cli", "hopbench._run_command", "hopbench.__main__", "hopbench.emulator.__main__"})
#: At most this many modules a folder (LAYOUT: h11 keeps 11, Locust 18).
FOLDER_MAX = 16


def stage(module: str) -> str:
    """The stage of a module name: base, face, or its folder under hopbench."""
    if module in BASE:
        return "base"
    if module in FACE:
        return "face"
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in STAGES) else "?"


PURE = ["hopbench.sse", "hopbench.protocols", "hopbench.measure._meter", "hopbench.measure._recorder", "hopbench.measure._hdr",
        "hopbench._toml", "hopbench._errors", "hopbench.measure._outcomes", "hopbench.config._gate_spec", "hopbench._format",
        "hopbench.measure._inflight", "hopbench.workload._pool", "hopbench.workload._lengths", "hopbench.workload._dataset",
        "hopbench.workload._cancel", "hopbench.measure._slo", "hopbench.config._slo_spec", "hopbench.measure._digest", "hopbench.driver._summary", "hopbench.driver._judge", "hopbench.driver._warnings",
        "hopbench.measure._counters", "hopbench.workload._trace", "hopbench.workload._sessions",
        "hopbench.protocols._marker", "hopbench.driver._overhead", "hopbench.driver._alignment", "hopbench.measure._burst"]
HIGH = ["hopbench.engine._runner", "hopbench.driver._single", "hopbench.cli", "hopbench.engine._transport", "trio", "httpx"]
# validating a profile must not start the emulator's server stack
LIGHT = {"hopbench.config._profile": ["uvicorn", "anyio", "httpx", "trio", "hopbench.emulator._serve",
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


def test_layers_every_module_has_a_stage() -> None:
    unplaced = sorted(m for m in _modules() if stage(m) not in STAGES)
    assert not unplaced, ("top-level modules that are neither BASE (stdlib only) nor FACE in "
                          f"tests/test_layers.py; put them in a stage's folder: {unplaced}")


def test_layers_folders_stay_small() -> None:
    sizes: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.parent != PACKAGE:
            sizes[path.parent.name] = sizes.get(path.parent.name, 0) + 1
    top = sum(1 for p in PACKAGE.glob("*.py"))
    big = {k: v for k, v in sizes.items() if v > FOLDER_MAX}
    assert not big, f"folders over {FOLDER_MAX} modules: {big}"
    assert top <= FOLDER_MAX, f"{top} modules at the top level (base and face only)"


@pytest.mark.parametrize("module", sorted(_modules()))
def test_layers_imports_point_down(module: str) -> None:
    here = STAGES.index(stage(module))
    bad = []
    for target, line in _imports(module, _modules()[module]):
        there = stage(target)
        if there not in STAGES:
            bad.append(f"line {line}: {target} (not a module of the package)")
        elif STAGES.index(there) > here:
            bad.append(f"line {line}: {target} (stage {there} comes after {stage(module)})")
    assert not bad, f"{module} (stage {stage(module)}) imports upward: " + "; ".join(dict.fromkeys(bad))


@pytest.mark.parametrize("folder", [s for s in STAGES if s not in ("base", "face")])
def test_layers_no_cycle_inside_a_stage(folder: str) -> None:
    graph: dict[str, set[str]] = {}
    for module, path in _modules().items():
        if stage(module) == folder:
            graph[module] = {t for t, _ in _imports(module, path) if stage(t) == folder and t != module}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"{folder}: its modules import each other in a cycle: {e.args[1]}")


def test_layers_checker_catches_lazy_and_relative_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from ._errors import HopbenchError\n"
                   "def f():\n    from .driver import _single\n    from .emulator import _serve\n"
                   "    import hopbench.cli\n", encoding="utf-8")
    assert [t for t, _ in _imports("hopbench._x", src)] == [
        "hopbench._errors", "hopbench.driver._single", "hopbench.emulator._serve", "hopbench.cli"]


@pytest.mark.slow
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
    modules = {"sse", "cli", *STAGES}
    assert public - modules <= set(hopbench.__all__), public - modules - set(hopbench.__all__)


def test_layers_emulator_exports_resolve() -> None:
    import hopbench.emulator as emulator

    for name in emulator.__all__:
        assert getattr(emulator, name) is not None, name


# A reader holds a function in one screenful and a class in one sitting (issue 35): no
# function over FUNCTION_MAX lines of code (its docstring not counted) and no class over
# CLASS_MAX lines, but for the measured hot loops, flat on purpose: each names the
# benchmark whose numbers keep it in one piece (the comment above it says the same).
FUNCTION_MAX = 100
CLASS_MAX = 700
HOT_LOOPS = {"hopbench/engine/_stream.py:StreamMixin._exchange": "benchmarks/bench_run.py"}


def _code_lines(node: ast.AST) -> int:
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    lines = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def _long_definitions(root: Path) -> list[str]:
    """``path:Qual.name (N lines)`` of every over-long function and class under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = prefix + child.name
                    limit = CLASS_MAX if isinstance(child, ast.ClassDef) else FUNCTION_MAX
                    n = _code_lines(child)
                    if n > limit and f"{rel}:{name}" not in HOT_LOOPS:
                        found.append(f"{rel}:{name} ({n} lines, at most {limit})")
                    visit(child, name + ".")
        visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_layers_functions_and_classes_stay_readable() -> None:
    long = _long_definitions(PACKAGE)
    assert not long, "split these (or, for a measured hot loop, name its benchmark in HOT_LOOPS): " + "; ".join(long)


# and no module over MODULE_MAX lines (the stop check's limit: a module is read in one sitting)
MODULE_MAX = 800


def test_layers_modules_stay_readable() -> None:
    long = {p.relative_to(PACKAGE.parent).as_posix(): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_MAX}
    assert not long, f"modules over {MODULE_MAX} lines; split them by job: {long}"


def test_layers_hot_loops_exist_and_name_their_benchmark() -> None:
    root = PACKAGE.parent
    for where, bench in HOT_LOOPS.items():
        path, qual = where.split(":")
        assert (root / bench).is_file(), bench
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
        node: ast.AST = tree
        for part in qual.split("."):
            node = next(c for c in ast.iter_child_nodes(node)
                        if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                        and c.name == part)
        comment_window = (root / path).read_text(encoding="utf-8").splitlines()[
            max(node.lineno - 6, 0):node.lineno + 30]  # type: ignore[attr-defined]
        assert any(Path(bench).name in line for line in comment_window), (
            f"{where} is kept flat for {bench}: say so in a comment beside it")


def test_layers_length_check_catches_a_long_function(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_MAX + 1))  # + the def line
    (pkg / "m.py").write_text(f'def f():\n    """doc\n    more"""\n{body}\n\n\ndef g():\n    return 1\n')
    assert _long_definitions(pkg) == [f"pkg/m.py:f ({FUNCTION_MAX + 2} lines, at most {FUNCTION_MAX})"]
