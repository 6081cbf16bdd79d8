"""A check's verdict, and the exit status of a whole check run.

Role: the one record every check returns (``CheckResult``) and the one rule
that turns a list of them into ``hopbench check``'s exit status. Pure.

Statuses (docs/check.md): ``pass``; ``fail`` (the gateway broke its contract);
``skip`` (not applicable, e.g. no Messages scenario, or skipped by the contract:
``why`` says which); ``inconclusive`` (hopbench could not measure it, e.g. the
gateway never reached the upstream: ``why`` says what stood in the way).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pathlib import Path

from .._exit import EXIT_BREACH, EXIT_OK, EXIT_TARGET_FAILED
from ..config._contract_spec import ContractSpec
from ..config._records import Profile

__all__ = ["STATUSES", "CheckResult", "CheckRun", "Status", "check_exit_code", "worst"]

Status = Literal["pass", "fail", "skip", "inconclusive"]
#: every status, in the order a table sorts them (the worst first)
STATUSES: tuple[Status, ...] = ("fail", "inconclusive", "pass", "skip")


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's verdict (a line of contract.json's ``checks``).

    Attributes:
        id: the check's fixed id (``hopbench.config._contract_spec.CHECK_IDS``).
        status: "pass", "fail", "skip" or "inconclusive".
        expected: what the contract promises, in words and numbers (ms, s).
        observed: what hopbench saw, in the same units.
        why: for skip and inconclusive, the reason; for fail, the first break; else None.
        samples: a few stream samples as evidence: dicts with ``scenario``,
            ``request_id`` and the upstream's and client's bytes or values (text,
            cut to a few hundred characters).
        scenarios: the status per scenario name the check ran on.
        duration_ms: the check's wall time, ms (filled in by the runner).
    """

    id: str
    status: Status
    expected: str
    observed: str
    why: str | None = None
    samples: tuple[dict[str, Any], ...] = ()
    scenarios: dict[str, str] = field(default_factory=dict)
    duration_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of contract.json (keys: id, status, expected, observed, why, samples, ...)."""
        return {"id": self.id, "status": self.status, "expected": self.expected, "observed": self.observed,
                "why": self.why, "scenarios": dict(self.scenarios), "samples": list(self.samples),
                "duration_ms": self.duration_ms}


def worst(statuses: Iterable[str]) -> Status:
    """One status for several (per scenario): fail > inconclusive > pass > skip; skip when empty."""
    seen = set(statuses)
    for s in STATUSES:
        if s in seen:
            return s
    return "skip"


def check_exit_code(results: Sequence[CheckResult]) -> int:
    """``hopbench check``'s exit status: 1 when a check failed, 4 when none could be
    checked (no pass and no fail: every check skipped or inconclusive), else 0.
    (2, bad input, is raised before any check runs.)"""
    statuses = {r.status for r in results}
    if "fail" in statuses:
        return EXIT_BREACH
    if "pass" not in statuses:
        return EXIT_TARGET_FAILED
    return EXIT_OK


@dataclass
class CheckRun:
    """A finished check run.

    Attributes:
        results: one ``CheckResult`` per check id, in ``CHECK_IDS`` order.
        exit_code: 0 no check failed, 1 one did, 4 nothing could be checked,
            130 interrupted (whatever the finished checks found).
        contract: the contract held to.
        profile: the check profile.
        duration_s: the whole run's wall time, s.
        out_dir: where the outputs are, or None when not written.
        step_s: each finished script step's wall time, s.
        interrupted_by: "SIGINT" when an interrupt cut the script, else None.
        interrupted_at: the first script step it left unfinished ("SDK read" after
            the last step), else None.
    """

    results: list[CheckResult]
    exit_code: int
    contract: ContractSpec
    profile: Profile
    duration_s: float
    out_dir: Path | None = None
    step_s: dict[str, float] = field(default_factory=dict)
    interrupted_by: str | None = None
    interrupted_at: str | None = None
