"""Beside the load: scrapes in, live figures out, the live progress panel.

Nothing here measures a stream: scrapes of the gateway's own metrics endpoints
(``Scraper``), live Prometheus figures of the run (``LiveMetrics``) and the
terminal's progress panel (``LiveProgress``).

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._live_metrics import LiveMetrics
    from ._progress import LiveProgress
    from ._scrape import Scraper

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "LiveMetrics": "_live_metrics",
    "LiveProgress": "_progress",
    "Scraper": "_scrape",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "LiveMetrics",
    "LiveProgress",
    "Scraper",
]
