"""The ``[contract]`` table: what a gateway promises about its streams (``hopbench check``).

Role: validate the promises ``hopbench check`` holds a gateway to (docs/check.md).
``_profile`` reads the table with every profile (``hopbench run`` and ``validate``
refuse a bad one as ``check`` does); ``_check_profile`` adds the rules of a check
profile (``[upstream] listen``, not the gateway's address). Pure: no sockets, no load.

Without a ``[contract]`` table the HopBase contract applies (HopBase's
streaming-events documentation): event contents pass unchanged; only SSE comments
are added, about every 10 s between events; after 90-150 s without model output
the gateway retries or errors; once streaming, errors arrive as the protocol's
error event with the status still 200; a Messages stream cut upstream gets an
Anthropic ``error`` event before its end.

Invariants:
- Durations are the gateway's own settings, in the key's unit in the file
  (``keepalive_interval_s``, ``cancel_within_ms``) and integer nanoseconds in
  the record, converted here once.
- Every rule is checked before any load is sent: an unknown key or a wrong type
  raises ``ProfileError`` naming file, line and key; so does a keepalive
  interval the check cannot observe (its silence must stay below ``stall_min_s``,
  where the gateway would end the stream instead).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._toml import Table
from .._units import NS_PER_MS, s_to_ns

__all__ = ["CHECK_IDS", "CONTRACT_KEYS", "ContractSpec", "parse_contract", "keepalive_silence_ns"]

#: Every check's fixed id, in the order ``hopbench check`` runs them (docs/check.md).
CHECK_IDS: tuple[str, ...] = (
    "events_unchanged", "sdk_parse", "no_buffering", "keepalive_cadence", "midstream_error_shape",
    "disconnect_error_event", "fault_translation", "cancel_propagation", "usage_passthrough",
    "stall_handling", "retries",
)

#: The keys of ``[contract]``.
CONTRACT_KEYS: tuple[str, ...] = (
    "keepalive_interval_s", "keepalive_tolerance_s", "max_first_chunk_hold_ms", "max_event_hold_ms",
    "cancel_within_ms", "stall_min_s", "stall_max_s", "max_attempts", "disconnect_error_event", "skip",
)


@dataclass(frozen=True, slots=True)
class ContractSpec:
    """A gateway's streaming promises, in integer nanoseconds.

    The defaults are the HopBase contract (HopBase streaming-events documentation)
    where it states a number, and the limits docs/check.md gives where it does not.

    Attributes:
        keepalive_interval_ns: a comment at least this often during an upstream
            silence (HopBase: about every 10 s); 0: the gateway promises no keepalives.
        keepalive_tolerance_ns: lateness allowed on that interval (default: a
            quarter of it, at least 200 ms).
        max_first_chunk_hold_ns: the first body chunk held at most this long.
        max_event_hold_ns: any later event held at most this long (write
            upstream to read by the client).
        cancel_within_ns: a client's close reaches the upstream within this.
        stall_min_ns, stall_max_ns: the window after which an upstream silent
            since its last event is retried or errored (HopBase: 90-150 s).
        stall_set: the profile set the window (``stall_handling`` then runs
            without ``--long``).
        max_attempts: upstream attempts per client request at most (1: no retries).
        disconnect_error_event: a Messages stream cut upstream gets an
            Anthropic ``error`` event before its end (HopBase: yes).
        skip: check ids not to run (each reported ``skip``, "skipped by the contract").
        source: "HopBase" when no ``[contract]`` table was given, else "profile".
    """

    keepalive_interval_ns: int = 10 * 10**9
    keepalive_tolerance_ns: int = 2_500_000_000
    max_first_chunk_hold_ns: int = 50 * NS_PER_MS
    max_event_hold_ns: int = 50 * NS_PER_MS
    cancel_within_ns: int = 1000 * NS_PER_MS
    stall_min_ns: int = 90 * 10**9
    stall_max_ns: int = 150 * 10**9
    stall_set: bool = False
    max_attempts: int = 3
    disconnect_error_event: bool = True
    skip: tuple[str, ...] = field(default=())
    source: str = "HopBase"

    def to_json(self) -> dict[str, object]:
        """The contract as contract.json records it: the file's own keys and units."""
        return {
            "source": self.source,
            "keepalive_interval_s": self.keepalive_interval_ns / 1e9,
            "keepalive_tolerance_s": self.keepalive_tolerance_ns / 1e9,
            "max_first_chunk_hold_ms": self.max_first_chunk_hold_ns / NS_PER_MS,
            "max_event_hold_ms": self.max_event_hold_ns / NS_PER_MS,
            "cancel_within_ms": self.cancel_within_ns / NS_PER_MS,
            "stall_min_s": self.stall_min_ns / 1e9,
            "stall_max_s": self.stall_max_ns / 1e9,
            "max_attempts": self.max_attempts,
            "disconnect_error_event": self.disconnect_error_event,
            "skip": list(self.skip),
        }


def keepalive_silence_ns(c: ContractSpec) -> int:
    """The upstream silence ``keepalive_cadence`` produces: two intervals and their tolerance.

    Two whole intervals: the first keepalive may come at any point of the first
    one, so only the second shows the cadence.
    """
    return 2 * (c.keepalive_interval_ns + c.keepalive_tolerance_ns)


def _number(t: Table, name: str, default: float, *, allow_zero: bool = False) -> float:
    v = t.number(name, default, min=0.0) if allow_zero else t.number(name, default, positive=True)
    return float(v)


def parse_contract(t: Table) -> ContractSpec:
    """Validate a ``[contract]`` table (an empty one gives the HopBase contract).

    Args:
        t: the ``[contract]`` table.

    Returns:
        The contract, durations in ns.

    Raises:
        ProfileError: an unknown key, a wrong type or range, an unknown check id
            in ``skip``, ``stall_min_s`` above ``stall_max_s``, or a keepalive
            interval whose silence (``keepalive_silence_ns``) reaches
            ``stall_min_s``: the gateway would end such a silence as a stall, so
            the check could never see the cadence. Each names file, line and key.
    """
    if not t.data:
        return ContractSpec()
    interval_s = _number(t, "keepalive_interval_s", 10.0, allow_zero=True)
    tol_default = max(interval_s / 4, 0.2)
    tolerance_s = _number(t, "keepalive_tolerance_s", tol_default)
    first_ms = _number(t, "max_first_chunk_hold_ms", 50.0, allow_zero=True)
    event_ms = _number(t, "max_event_hold_ms", 50.0, allow_zero=True)
    cancel_ms = _number(t, "cancel_within_ms", 1000.0)
    stall_set = t.has("stall_min_s") or t.has("stall_max_s")
    stall_min_s = _number(t, "stall_min_s", 90.0)
    stall_max_s = _number(t, "stall_max_s", max(150.0, stall_min_s))
    if stall_max_s < stall_min_s:
        raise t.error("stall_max_s", f"expected at least stall_min_s ({stall_min_s:g}), got {stall_max_s:g}")
    attempts = t.int("max_attempts", 3, min=1)
    disconnect = t.bool("disconnect_error_event", True)
    skip = tuple(t.str_list("skip", []))
    for s in skip:
        if s not in CHECK_IDS:
            raise t.error("skip", f"unknown check id {s!r} (expected some of: {', '.join(CHECK_IDS)})")
    t.done()
    spec = ContractSpec(
        keepalive_interval_ns=s_to_ns(interval_s), keepalive_tolerance_ns=s_to_ns(tolerance_s),
        max_first_chunk_hold_ns=int(round(first_ms * NS_PER_MS)),
        max_event_hold_ns=int(round(event_ms * NS_PER_MS)),
        cancel_within_ns=int(round(cancel_ms * NS_PER_MS)),
        stall_min_ns=s_to_ns(stall_min_s), stall_max_ns=s_to_ns(stall_max_s), stall_set=stall_set,
        max_attempts=attempts, disconnect_error_event=disconnect, skip=skip, source="profile")
    if spec.keepalive_interval_ns and keepalive_silence_ns(spec) >= spec.stall_min_ns:
        raise t.error("keepalive_interval_s", (
            f"{interval_s:g} s is longer than the silence the check can produce: it needs "
            f"{keepalive_silence_ns(spec) / 1e9:g} s of upstream silence (two intervals and their "
            f"tolerance) and the gateway ends a silence of stall_min_s = {stall_min_s:g} s as a stall; "
            "expected an interval below (stall_min_s / 2 - keepalive_tolerance_s)"))
    return spec
