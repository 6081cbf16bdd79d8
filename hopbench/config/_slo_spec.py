"""Service-level objectives as a profile states them: the ``[slo]`` table (docs/slo.md).

Role: validate ``[slo]`` (profile-wide) and ``[scenario.slo]`` (a scenario's
overrides, key by key) into a frozen ``Slo`` (hopbench.measure._slo) before any load is sent. Judging
requests against it is ``hopbench.measure._slo`` (on the meter's ``StreamRecord``).

Invariants:
- Limits are milliseconds in the file (``ttft_ms``) and integer nanoseconds in
  the record, converted here once; each is a positive number or absent (no
  objective on that figure). Zero, negative and non-numbers are errors naming
  file, line and key.
- A request that did not complete is never good (DistServe's goodput counts
  requests that finished within their SLOs): ``completed`` is always an
  objective; the key accepts only ``true``.
- ``target`` (the good fraction a load must keep) is in (0, 1]; ``confidence``
  (of the Wilson lower bound the capacity search judges with) is in (0.5, 1).
"""

from __future__ import annotations

import re
from dataclasses import replace

from .._toml import Table
from .._units import NS_PER_MS
from ..measure._slo import Slo

__all__ = ["parse_slo", "SLO_KEYS"]

#: The keys of ``[slo]`` and ``[scenario.slo]``.
SLO_KEYS: tuple[str, ...] = ("ttft_ms", "content_ttft_ms", "itl_ms", "itl_stat", "tpot_ms", "e2e_ms",
                             "completed", "target", "confidence")

_STAT = re.compile(r"(?:mean|max|p(\d{1,2}(?:\.\d+)?))\Z")


def _ms(t: Table, name: str, default: int | None) -> int | None:
    if not t.has(name):
        return default
    v = t.raw(name)
    if isinstance(v, str):
        raise t.error(name, f"expected a positive number of milliseconds (the key's unit), got {v!r}")
    ms = t.number(name, positive=True)
    return int(round(ms * NS_PER_MS))


def parse_slo(t: Table, base: Slo | None = None) -> Slo:
    """Validate an ``[slo]`` table (marks its keys read, rejects others).

    Args:
        t: the ``[slo]`` or ``[scenario.slo]`` table.
        base: what the table overrides (the profile-wide SLO for a scenario's),
            or None for the defaults.

    Returns:
        The objectives.

    Raises:
        ProfileError: a limit that is not a positive number, an ``itl_stat``
            that is not mean / max / pNN, ``completed = false``, a target outside
            (0, 1], a confidence outside (0.5, 1), an unknown key; naming file,
            line and key.
    """
    b = base or Slo()
    out = replace(
        b,
        ttft_ns=_ms(t, "ttft_ms", b.ttft_ns),
        content_ttft_ns=_ms(t, "content_ttft_ms", b.content_ttft_ns),
        itl_ns=_ms(t, "itl_ms", b.itl_ns),
        tpot_ns=_ms(t, "tpot_ms", b.tpot_ns),
        e2e_ns=_ms(t, "e2e_ms", b.e2e_ns),
    )
    stat = t.str("itl_stat", b.itl_stat)
    m = _STAT.match(stat)
    if not m or (m.group(1) is not None and not 0 < float(m.group(1)) < 100):
        raise t.error("itl_stat", f'expected "mean", "max" or a percentile "p50".."p99.9", got {stat!r}')
    if t.bool("completed", True) is not True:
        raise t.error("completed", "a request that did not complete is never good (goodput counts "
                                   "finished requests): only true is accepted")
    target = t.number("target", b.target)
    if not 0 < target <= 1:
        raise t.error("target", f"expected a good fraction in (0, 1], got {target:g}")
    confidence = t.number("confidence", b.confidence)
    if not 0.5 < confidence < 1:
        raise t.error("confidence", f"expected a confidence in (0.5, 1), got {confidence:g}")
    t.done()
    return replace(out, itl_stat=stat, target=float(target), confidence=float(confidence))
