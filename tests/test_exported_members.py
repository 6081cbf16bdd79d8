"""Each stage's public surface is short, resolves and is documented (STYLE.md §2; httpx's
``tests/test_exported_members.py`` keeps its own honest the same way).

A folder's ``__init__.py`` lists its public names in ``__all__`` and loads each from
the module that defines it on first use (hopbench/_lazy.py); ``import hopbench.<stage>``
alone loads none of its modules.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import hopbench

#: every stage folder with a curated surface (protocols and emulator predate the folders)
FOLDERS = ("protocols", "measure", "workload", "emulator", "config", "engine", "observe", "driver",
           "check", "views", "report")
#: a short surface: the names a user or another stage reaches for, not every module's
MAX_PUBLIC = 24
#: what a lazy ``__init__`` holds besides its public names
PLUMBING = {"annotations", "TYPE_CHECKING", "lazy_exports"}


def _package(folder: str) -> object:
    return importlib.import_module(f"hopbench.{folder}")


@pytest.mark.parametrize("folder", FOLDERS)
def test_exported_members_resolve_and_are_documented(folder: str) -> None:
    pkg = _package(folder)
    names = getattr(pkg, "__all__", None)
    assert names, f"hopbench.{folder} has no __all__"
    assert len(names) == len(set(names)), f"hopbench.{folder}.__all__ repeats a name"
    assert len(names) <= MAX_PUBLIC, f"hopbench.{folder} exports {len(names)} names (at most {MAX_PUBLIC})"
    for name in names:
        value = getattr(pkg, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith(f"hopbench.{folder}."), (
                f"hopbench.{folder}.{name} is defined in {value.__module__}: export it from its own stage")
            assert (value.__doc__ or "").strip(), f"hopbench.{folder}.{name} has no docstring"


@pytest.mark.parametrize("folder", FOLDERS)
def test_exported_members_are_all_of_the_public_names(folder: str) -> None:
    pkg = _package(folder)
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}  # type: ignore[attr-defined]
    public = {n for n in dir(pkg) if not n.startswith("_")} - PLUMBING - submodules
    assert public == set(pkg.__all__), (  # type: ignore[attr-defined]
        f"hopbench.{folder}: public but not in __all__: {sorted(public - set(pkg.__all__))}; "  # type: ignore[attr-defined]
        f"in __all__ but not public: {sorted(set(pkg.__all__) - public)}")  # type: ignore[attr-defined]


@pytest.mark.parametrize("folder", ["engine", "driver", "check", "views", "report", "observe"])
def test_exported_members_importing_a_stage_loads_none_of_its_modules(folder: str) -> None:
    # the heavy stages: a lazy surface keeps `import hopbench.<stage>` (and any pure module
    # beside it) from paying for trio, httpx, uvicorn or plotly
    code = (f"import sys, hopbench.{folder}; "
            f"loaded = sorted(m for m in sys.modules if m.startswith('hopbench.{folder}.')); "
            "heavy = [m for m in ('trio', 'httpx', 'uvicorn', 'plotly') if m in sys.modules]; "
            "print(loaded, heavy); sys.exit(1 if loaded or heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"import hopbench.{folder} loaded {proc.stdout.strip()} {proc.stderr[-300:]}"


def test_exported_members_the_package_keeps_its_public_imports() -> None:
    # what users import today stays importable (issue 35: "What must not change")
    from hopbench import parse_profile, run_profile  # noqa: F401
    from hopbench.protocols import decode_stream, new_decoder  # noqa: F401
    from hopbench.sse import SSEScanner  # noqa: F401

    assert set(hopbench.__all__) >= {"run_profile", "parse_profile", "load_profile", "SSEScanner"}
