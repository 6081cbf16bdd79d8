"""Lazy public names for a folder's ``__init__.py`` (PEP 562).

Role: base (standard library only). A folder whose modules pull in heavy
dependencies (trio, httpx, uvicorn, plotly) names its public surface in
``__all__`` but imports each name from the module that defines it on first
use, so that ``import hopbench.driver`` (or a pure module of that folder) does
not pay for the rest. Inside the package, modules import a name from the module
that defines it, never through a folder's ``__init__`` (that keeps the hot path
and the layer test exact).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose public names load on first use.

    Args:
        package: the package's ``__name__``.
        where: public name -> the submodule that defines it (``"_single"``).
        namespace: the package's ``globals()``: a name once loaded is stored there,
            so later lookups skip ``__getattr__``.

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's module level.

    Raises:
        AttributeError: (from ``__getattr__``) a name that is not public.
    """

    def getattr_(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(where))

    return getattr_, dir_
