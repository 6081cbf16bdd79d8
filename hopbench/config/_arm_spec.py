"""A/B arms: one profile, two or more targets, the same requests on the same schedule.

Role: the ``[[arm]]`` tables of a profile (docs/profiles.md, "[[arm]]"):

    [[arm]]
    name = "direct"
    url = "http://127.0.0.1:8000"      # or "embedded" (its own emulator)

    [[arm]]
    name = "gateway"
    url = "http://127.0.0.1:4000"

The runner sends the scheduled requests to the arms in turn (arm 0, 1, ...,
then arm 0 again); each round of ``len(arms)`` consecutive requests sends one
request body (scenario, prompt and cancel choice drawn once per round, seeded)
to every arm, so the arms see the same prompts under the same load. Each arm
is its own results scope (its name), and ``hopbench run`` adds the arms'
differences to summary.json (``hopbench.views._arm_differences``, with the statistics of
``hopbench compare``).

Invariants: pure validation (no I/O, no clock). An arm's ``url = "embedded"``
starts its own emulator whose configuration is the profile's ``[emulator]``
table with the arm's ``[arm.emulator]`` keys on top (so two arms can differ by
one latency).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._toml import Table
from ..protocols._requests import PROTOCOLS

__all__ = ["ArmSpec", "parse_arms", "arm_of_request"]


def arm_of_request(n: int, arms: int) -> int:
    """The arm (its index in the profile's order) that request ``n`` (1-based, in the order
    they are planned) goes to, with ``arms`` arms: rounds of one request per arm, the order
    reversed every other round (round 0: arm 0, 1, ...; round 1: ..., 1, 0), so that going
    first in a round (sending a moment earlier, finding the client's loop idler) falls on
    every arm alike (counterbalanced; docs/ab-arms.md, "How the requests are shared"). An A/A
    study saw the fixed order as a +0.5 ms E2E difference, significant at p = 0.004.

    Raises:
        ValueError: ``n`` < 1 or ``arms`` < 1.
    """
    if n < 1 or arms < 1:
        raise ValueError(f"request number {n} and arm count {arms} must be at least 1")
    rnd, pos = divmod(n - 1, arms)
    return pos if rnd % 2 == 0 else arms - 1 - pos


@dataclass(frozen=True, slots=True)
class ArmSpec:
    """One ``[[arm]]``.

    Attributes:
        name: the arm's name: its results scope.
        url: its base URL, or None for an embedded emulator of its own.
        protocol: the protocol the arm is declared to speak, or None.
        emulator_config: embedded arms: the validated ``EmulatorConfig``
            (``[emulator]`` with ``[arm.emulator]`` on top); else None.
        target: the arm's ``TargetSpec`` (hopbench.config._records): ``[target]``
            with the arm's ``api_key_env``, ``auth``, ``headers`` and
            ``header_env`` on top (e.g. a provider key for "direct", the
            gateway's key for "gateway"); None in tests that build arms by hand.
        emulator_unused: the arm has a url and an ``emulator`` table (validated,
            not used: the run's notes say so).
    """

    name: str
    url: str | None
    protocol: str | None = None
    emulator_config: Any = field(default=None, compare=False, repr=False)
    target: Any = field(default=None, compare=False, repr=False)
    emulator_unused: bool = False

    @property
    def embedded(self) -> bool:
        """True when the arm is an emulator of its own."""
        return self.url is None


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``top``'s keys on top (sub-tables merged one level down: ``models``)."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def parse_arms(tables: list[Table], *, emulator: dict[str, Any], scenario_protocols: Sequence[str],
               workers: int, check_name: Callable[[str], str | None],
               check_url: Callable[[str], str | None],
               arm_target: Callable[[Table], Any] | None = None) -> tuple[ArmSpec, ...]:
    """Validate the ``[[arm]]`` tables.

    Args:
        tables: the profile's ``[[arm]]`` tables (possibly none).
        emulator: the profile's ``[emulator]`` table (already valid), the base
            of an embedded arm's configuration.
        scenario_protocols: every scenario's protocol.
        workers: ``run.workers`` (arms run in one process).
        check_name, check_url: the profile's rules for names and base URLs
            (``hopbench.config._records.check_name`` / ``_profile.check_base_url``).
        arm_target: reads an arm's own auth keys (``api_key_env``, ``auth``,
            ``headers``, ``header_env``) into its target (the profile's rules,
            ``hopbench.config._profile._arm_target``); None: no such keys allowed.

    Returns:
        the arms in profile order; empty when there are none.

    Raises:
        ProfileError: a single arm, a missing/duplicate/invalid/reserved name,
            a bad URL, arms that declare different protocols or one that the
            scenarios do not speak, an unknown key (also in ``[arm.emulator]``,
            which an arm with a url validates and does not use), or ``run.workers`` > 1; each names
            file:line and the key (``arm[1].url``).
    """
    if not tables:
        return ()
    if len(tables) == 1:
        raise tables[0].error(None, "expected two or more [[arm]] tables to compare (got one); "
                                    "for a single target use [target] url")
    if workers > 1:
        raise tables[0].error(None, f"A/B arms run in one process: expected run.workers = 1, got {workers}")
    from ..emulator._config import EmulatorConfig  # the emulator owns its keys

    out: list[ArmSpec] = []
    seen: dict[str, int] = {}
    protocols = sorted(set(scenario_protocols))
    first_protocol: tuple[int, str] | None = None
    for i, t in enumerate(tables):
        name = t.str("name", None, nonempty=True)
        if name is None:
            raise t.error("name", "required key is missing (each arm needs a name: its results scope)")
        problem = check_name(name)
        if problem:
            raise t.error("name", problem)
        if name.casefold() == "all":  # (case aside, as below: all.*.hgrm is the whole run's)
            raise t.error("name", f"{name!r} is reserved for the whole run (\"all\", case aside)")
        if name.casefold() in seen:  # each arm's files are <name>.*.hgrm: one on a case-insensitive disk
            raise t.error("name", f"expected a unique arm name (case aside: each names its results files), got "
                                  f"{name!r}, and arm[{seen[name.casefold()]}] has that name")
        seen[name.casefold()] = i
        raw_url = t.str("url", None, nonempty=True)
        if raw_url is None:
            raise t.error("url", "required key is missing: a base URL (http://host:port) or \"embedded\"")
        url: str | None = None
        if raw_url != "embedded":
            problem = check_url(raw_url)
            if problem:
                raise t.error("url", problem)
            url = raw_url.rstrip("/")
        protocol = t.str("protocol", None, choices=PROTOCOLS)
        if protocol is not None:
            if first_protocol is not None and first_protocol[1] != protocol:
                raise t.error("protocol", f"arms must speak one protocol to be compared: arm[{first_protocol[0]}] "
                                          f"says {first_protocol[1]!r}, this one {protocol!r}")
            first_protocol = first_protocol or (i, protocol)
            if protocols != [protocol]:
                raise t.error("protocol", f"the arm speaks {protocol!r} but the scenarios send "
                                          f"{', '.join(repr(p) for p in protocols)}")
        config = None
        unused = False
        if t.has("emulator"):
            sub = t.table("emulator")
            config = EmulatorConfig.from_table(Table(_merged(emulator, dict(sub.data)), sub.doc, sub.path))
            if url is not None:
                # validated, then unused (a run note says so), as [emulator] beside a [target]
                # url: an example profile runs against a real target after changing only its
                # urls (issue 39 item 3)
                config, unused = None, True
        elif url is None:
            config = EmulatorConfig.from_table(Table(dict(emulator), t.doc, ("emulator",)))
        target = arm_target(t) if arm_target is not None else None
        t.done()
        out.append(ArmSpec(name, url, protocol, config, target, unused))
    return tuple(out)
