"""Multi-turn sessions: a scenario's conversations, turn by turn, and the turn-index figures.

Role: ``session = { turns, think_time_s }`` in a ``[[scenario]]``
(docs/workloads.md, "Multi-turn sessions"). A session sends ``turns``
requests one after the other, each after a think time; each request holds
the whole conversation so far: every earlier user message, the text the
target actually streamed back for it, and a new user message (from the
scenario's pool: synthetic prompts, a dataset or plain prompts). This module
holds the spec (``parse_session``), the growing conversation with its
pre-encoded messages (``Conversation``: each message is JSON-encoded once and
the body of a turn is joined from those pieces, so a long conversation is
never re-encoded) and the turn-index figures (``record_turn``, ``turns_of``).

Invariants:
- Pure: no clock, no I/O, no trio. The runner sleeps the think time and
  sends.
- Each message is encoded exactly as ``protocols._requests.encode_body`` encodes it
  (``{"role", "content"}``, compact, non-ASCII kept): a turn's body equals
  ``encode_body`` of the whole conversation.
- Turn counts are drawn from a low-discrepancy pool (``Dist.spread``) seeded
  by the run seed and the scenario: every prefix of the sessions keeps the
  requested mean.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocols._requests import WIRES, Message, encode_body
from ._lengths import MAX_INPUT_TOKENS, Dist, dist_from, estimate_tokens
from ._pool import PoolEntry, Prepared

__all__ = ["SessionSpec", "Conversation", "parse_session", "record_turn", "turns_of", "MAX_TURNS"]

#: the largest number of turns a session may have (the turn-index counters grow with it)
MAX_TURNS = 1000
_TURN_POOL = 512
_MARK = "\u0000hopbench-turns\u0000"


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """A scenario's sessions.

    Attributes:
        turns: the turn count per session (a distribution; >= 1).
        think_ns: the pause before each turn after the first, integer ns.
        turn_counts: the drawn turn counts, cycled through by the sessions.
        entries: the scenario's pool (``workload._pool.PoolEntry``): turn 1 sends an
            entry's whole conversation, later turns its last user message.
        from_dataset: ``turns = "dataset"``: a session is one dataset record,
            its user messages sent one per turn, the target's answers in place
            of the record's own assistant turns (``Conversation(script=True)``).
    """

    turns: Dist
    think_ns: int
    turn_counts: tuple[int, ...]
    entries: tuple[PoolEntry, ...]
    #: ``turns = "dataset"``: each session replays one record's user turns
    from_dataset: bool = False


def parse_session(t: Any, entries: Sequence[PoolEntry], seed: int, index: int,
                  source: str = "prompts") -> SessionSpec:
    """Read a scenario's ``session`` table.

    Keys: ``turns`` (an integer >= 1 or a distribution table, at most
    ``MAX_TURNS``, or ``"dataset"`` with a dataset: each record's user
    turns; required), ``think_time_s`` (seconds >= 0, default 0).

    Args:
        t: the ``session`` table (``_toml.Table``: errors carry file, line and key).
        entries: the scenario's pool.
        seed, index: the run seed and the scenario's position.

    Raises:
        ProfileError: a missing or bad key, a session of 0 turns.
    """
    raw = t.raw("turns", None)
    if raw is None:
        raise t.error("turns", "expected the number of turns of a session (an integer >= 1 or a distribution)")
    if raw == "dataset":
        if source != "dataset":
            raise t.error("turns", 'turns = "dataset" needs a dataset (each record\'s user turns)')
        think_s = t.number("think_time_s", 0.0, min=0)
        t.done()
        longest = max(sum(1 for m in e.messages if m.role == "user") for e in entries)
        if longest > MAX_TURNS:
            raise t.error("turns", f"expected records of at most {MAX_TURNS} user turns, got {longest}")
        return SessionSpec(Dist.fixed(1), int(round(think_s * 1e9)), (1,), tuple(entries), True)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw < 1:
        raise t.error("turns", f"expected a session of at least 1 turn, got {raw}")
    turns = dist_from(raw, lambda r: t.error("turns", r))
    if turns.max > MAX_TURNS and turns.kind == "fixed":
        raise t.error("turns", f"expected at most {MAX_TURNS} turns, got {turns.max}")
    if turns.max > MAX_TURNS:
        turns = Dist(turns.kind, turns.mean, turns.stddev, turns.min, MAX_TURNS)
        problem = turns.problem()
        if problem:
            raise t.error("turns", f"{problem} (turns are capped at {MAX_TURNS}: set max)")
    # each turn adds a user message: the longest session's last turn sends them all (and the
    # answers), so its prompt must stay within the length limit (docs/workloads.md, "Length limits")
    sizes = [e.input_tokens if e.input_tokens is not None else estimate_tokens("".join(m.text for m in e.messages))
             for e in entries]
    mean_in = sum(sizes) / len(sizes) if sizes else 0.0
    if turns.max * mean_in > MAX_INPUT_TOKENS:
        fit = max(1, int(MAX_INPUT_TOKENS // mean_in))
        raise t.error("turns", f"sessions of up to {turns.max:,} turns of {mean_in:,.0f}-token user messages "
                               f"(the prompts' mean) send about {turns.max * mean_in:,.0f} prompt tokens by their "
                               f"last turn, above hopbench's limit of {MAX_INPUT_TOKENS:,}: at most {fit:,} turns "
                               "of these prompts, or shorter prompts")
    think_s = t.number("think_time_s", 0.0, min=0)
    t.done()
    rng = random.Random(f"hopbench-session:{seed}:{index}")
    counts = tuple(turns.spread(_TURN_POOL, 5, rng)) if not turns.constant else (int(turns.mean),)
    return SessionSpec(turns, int(round(think_s * 1e9)), counts, tuple(entries))


def _item(m: Message) -> bytes:
    return json.dumps({"role": m.role, "content": m.text}, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


class Conversation:
    """One session's conversation, its messages encoded once each.

    Args:
        protocol, model, include_usage, extra: the scenario's (as ``encode_body``).
        first: the pool entry of turn 1 (its whole conversation, system first).
        script: send ``first``'s user messages one per turn instead (a
            dataset record replayed as a session: its own assistant turns are
            left out, the target's answers take their place); ``turns`` then
            says how many.
    """

    __slots__ = ("protocol", "model", "include_usage", "extra", "system", "items", "chars", "turn", "first_max",
                 "script")

    def __init__(self, protocol: str, model: str, include_usage: bool, extra: Mapping[str, Any],
                 first: PoolEntry, script: bool = False) -> None:
        self.protocol = protocol
        self.model = model
        self.include_usage = include_usage
        self.extra = extra
        self.system = "\n".join(m.text for m in first.messages if m.role == "system")
        #: encoded message objects, in order (chat: the system message first)
        self.items: list[bytes] = []
        self.chars = len(self.system)
        self.turn = 0
        self.first_max = first.max_tokens
        if self.system and WIRES[protocol].system is None:  # chat: the system prompt is a message
            self.items.append(_item(Message("system", self.system)))
        users = [m for m in first.messages if m.role == "user"]
        #: script mode: the record's user messages still to send
        self.script = users[1:] if script else []
        for m in (users[:1] if script else [m for m in first.messages if m.role != "system"]):
            self.items.append(_item(m))
            self.chars += len(m.text)

    @property
    def turns(self) -> int:
        """Script mode: the turns this conversation has (sent and still to send)."""
        return self.turn + len(self.script) + (0 if self.turn else 1)

    def request(self, entry: PoolEntry | None) -> Prepared:
        """The next turn's request: the conversation so far plus ``entry``'s
        last user message (None for turn 1, whose messages are already in,
        and for every turn in script mode: the record's next user message).

        Returns:
            A ``Prepared`` whose body equals ``encode_body`` of the whole
            conversation; its shape's requested input is the conversation's
            characters / 4 (the emulator's count).
        """
        if entry is not None:
            last = entry.messages[-1]
            self.items.append(_item(last))
            self.chars += len(last.text)
        elif self.turn and self.script:  # the record's next user message
            last = self.script.pop(0)
            self.items.append(_item(last))
            self.chars += len(last.text)
        self.turn += 1
        max_tokens = entry.max_tokens if entry is not None else self.first_max
        head, tail = self._template(max_tokens)
        body = head + b",".join(self.items) + tail
        usage = WIRES[self.protocol].usage_option and b'"include_usage":true' in tail + head
        return Prepared(body, (max(1, -(-self.chars // 4)), max_tokens), usage,
                        fields=(("turn", self.turn),))

    def answer(self, text: str) -> None:
        """Append the text the target streamed back as the assistant's message."""
        self.items.append(_item(Message("assistant", text)))
        self.chars += len(text)

    def _template(self, max_tokens: int) -> tuple[bytes, bytes]:
        system = [Message("system", self.system)] if self.system and WIRES[self.protocol].system else []
        data = encode_body(self.protocol, self.model, [*system, Message("user", _MARK),
                                                       Message("assistant", _MARK)],
                           max_tokens, self.include_usage, self.extra)
        mark = b"[" + _item(Message("user", _MARK)) + b"," + _item(Message("assistant", _MARK)) + b"]"
        head, sep, tail = data.partition(mark)
        if not sep:  # pragma: no cover - encode_body always lists the turns
            raise ValueError("the conversation placeholder is not in the encoded body")
        return head + b"[", b"]" + tail


def record_turn(rec: Any, scope: str, turn: int, outcome: str, ttft_ns: int | None,
                input_tokens: int | None, cached_tokens: int | None) -> None:
    """Count one session turn's figures under ``scope`` (docs/results/counters.md, "Sessions").

    Counters ``turn.<k>.streams``, ``turn.<k>.completed``, ``turn.<k>.ttft_streams``
    and ``turn.<k>.ttft_ns`` (the sum of their TTFTs, ns), ``turn.<k>.input_streams``
    and ``turn.<k>.input_tokens`` (reported), and for streams whose usage
    reported cached tokens ``turn.<k>.cache_prompt_tokens`` (their input
    tokens) and ``turn.<k>.cached_tokens``.

    Args:
        rec: the ``Recorder``.
    """
    p = f"turn.{turn}."
    rec.incr(scope, p + "streams")
    if outcome == "completed":
        rec.incr(scope, p + "completed")
    if ttft_ns is not None:
        rec.incr(scope, p + "ttft_streams")
        rec.incr(scope, p + "ttft_ns", ttft_ns)
    if input_tokens:
        rec.incr(scope, p + "input_streams")
        rec.incr(scope, p + "input_tokens", input_tokens)
        if cached_tokens is not None:  # only where the usage reported it
            rec.incr(scope, p + "cache_prompt_tokens", input_tokens)
            rec.incr(scope, p + "cached_tokens", min(cached_tokens, input_tokens))


def turns_of(counters: Mapping[str, int]) -> list[dict[str, Any]]:
    """The turn-index breakdown of a scope, from its ``turn.*`` counters.

    Returns:
        list of ``{"turn", "streams", "completed", "ttft_mean_ms",
        "input_tokens_mean", "cached_ratio"}`` by turn (None when no stream
        of the turn had the figure: cached_ratio needs usage that reports
        cached tokens); empty without sessions.
    """
    turns = sorted({int(k.split(".")[1]) for k in counters if k.startswith("turn.") and k.count(".") == 2
                    and k.split(".")[1].isdigit()})
    out = []
    for k in turns:
        p = f"turn.{k}."
        n_ttft = counters.get(p + "ttft_streams", 0)
        n_in = counters.get(p + "input_streams", 0)
        tokens = counters.get(p + "input_tokens", 0)
        cache_prompt = counters.get(p + "cache_prompt_tokens", 0)
        out.append({
            "turn": k, "streams": counters.get(p + "streams", 0), "completed": counters.get(p + "completed", 0),
            "ttft_mean_ms": round(counters.get(p + "ttft_ns", 0) / n_ttft / 1e6, 3) if n_ttft else None,
            "input_tokens_mean": round(tokens / n_in, 1) if n_in else None,
            "cached_ratio": (round(counters.get(p + "cached_tokens", 0) / cache_prompt, 4)
                             if cache_prompt else None),
        })
    return out
