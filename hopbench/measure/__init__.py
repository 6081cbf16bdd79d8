"""Stamps in, figures out: per-stream records, histograms and counters; the vocabulary.

Pure, synchronous and clock-free (STYLE.md §1): the engine stamps each read and
hands the meter the decoder's observations; the meter applies every metric rule
once per stream (:func:`measure`), the recorder keeps HDR histograms and counters
per scope, snapshots merge exactly across intervals, processes and machines.
The vocabulary lives here once: every metric (``METRICS``: name, unit, range,
which way is better), every outcome and rate.

The public names below load on first use (hopbench/_lazy.py); modules inside the
package import a name from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and readers; at run time see __getattr__
    from ._counters import RunCounters
    from ._meter import StreamMeter
    from ._rules import StreamRecord, measure
    from ._metrics import METRICS, MetricSpec
    from ._outcomes import OUTCOMES, RATES
    from ._recorder import Recorder, Snapshot

#: public name -> the module that defines it
_WHERE: dict[str, str] = {
    "measure": "_rules",
    "METRICS": "_metrics",
    "MetricSpec": "_metrics",
    "OUTCOMES": "_outcomes",
    "RATES": "_outcomes",
    "Recorder": "_recorder",
    "RunCounters": "_counters",
    "Snapshot": "_recorder",
    "StreamMeter": "_meter",
    "StreamRecord": "_rules",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "measure",
    "METRICS",
    "MetricSpec",
    "OUTCOMES",
    "RATES",
    "Recorder",
    "RunCounters",
    "Snapshot",
    "StreamMeter",
    "StreamRecord",
]
