"""The request bodies of a trace replay: prompt text made from shared, pre-encoded blocks.

Role: ``TraceBodies`` builds each trace entry's prompt as the join of its hash
ids' blocks of words and words unique to the request; ``body_template`` splits
an encoded request body around its prompt, so that the runner joins bytes
(head + prompt + tail) instead of encoding a large body per request.

Invariants:
- Pure: no clock, no I/O.
- Everything random is seeded by the run seed and the hash id (or the entry
  and pass): every worker builds the same text for a hash id, so a shared
  server cache sees the trace's sharing exactly.
- A prompt is the concatenation of its hash ids' blocks (``block_tokens``
  words of 4 characters each: one token each for the emulator and for common
  BPE vocabularies, ``_lengths.WORDS``), cut to ``input_tokens``; tokens past
  the last hash id are words unique to the request. The words need no JSON
  escaping.
"""

from __future__ import annotations

import array
import hashlib
import json
import sys
from collections.abc import Callable
from typing import Protocol

from ._lengths import WORDS
from ._trace_file import TraceEntries

__all__ = ["TraceBodies", "body_template"]


class _Replay(Protocol):
    """What ``TraceBodies`` reads of a replay (``_trace.TraceSpec``)."""

    @property
    def entries(self) -> TraceEntries: ...

    @property
    def block_tokens(self) -> int: ...


_PROMPT_MARK = "\u0000hopbench-prompt\u0000"


def body_template(encode: Callable[[str], bytes]) -> tuple[bytes, bytes]:
    """Split an encoded body around its prompt: (bytes before, bytes after).

    Args:
        encode: encodes the request with the given prompt text (the caller
            binds protocol, model, max_tokens, extra).

    Returns:
        (head, tail): ``head + json_string_body(prompt) + tail`` is the body
        for any prompt whose JSON string needs no escaping (the synthetic words).
    """
    data = encode(_PROMPT_MARK)
    mark = json.dumps(_PROMPT_MARK)[1:-1].encode("ascii")
    head, sep, tail = data.partition(mark)
    if not sep:  # pragma: no cover - encode() must put the prompt in the body
        raise ValueError("the prompt placeholder is not in the encoded body")
    return head, tail


class TraceBodies:
    """Builds the prompt bytes of trace entries from shared, pre-encoded blocks.

    Block texts are made once per hash id (seeded by the run seed and the
    id) and kept as bytes from the second time one is sent (a block sent
    once is made when it is sent and not kept; made again, it is the same:
    a long trace's one-off blocks would otherwise hold ``block_tokens`` x 4
    bytes each for ever); a request's prompt is the join of its blocks'
    bytes (the last one cut to the input length) and of words unique to it.
    The words need no JSON escaping, so the bytes go into the body as they are.
    Which ids were sent is a bitmap for ids below 2**26 (at most 8 MiB, grown
    as ids are sent), a set above.

    Args:
        spec: the trace.
        seed: the run seed.
    """

    __slots__ = ("spec", "seed", "_blocks", "_sent", "_sent_big")

    def __init__(self, spec: _Replay, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self._blocks: dict[int, bytes] = {}
        self._sent = bytearray()  # bit h: block h was made before
        self._sent_big: set[int] = set()

    def _sent_before(self, h: int) -> bool:
        """Whether block ``h`` was made before; notes that it is now."""
        if h >= _BITMAP_IDS:
            if h in self._sent_big:
                return True
            self._sent_big.add(h)
            return False
        sent, at, bit = self._sent, h >> 3, 1 << (h & 7)
        if at >= len(sent):
            sent.extend(bytes(at + 1 - len(sent)))
        was = sent[at] & bit
        sent[at] |= bit
        return bool(was)

    def _block(self, h: int) -> bytes:
        b = self._blocks.get(h)
        if b is None:
            # seeded by the id alone: the same text whenever (and in whichever worker) it is made
            b = _words(f"hopbench-trace-block:{self.seed}:{h}", self.spec.block_tokens)
            if self._sent_before(h):
                self._blocks[h] = b
        return b

    def prompt(self, i: int, rep: int = 0) -> bytes:
        """Entry ``i``'s prompt text as UTF-8 (ASCII) bytes: 4 characters per token.

        ``rep`` (the pass) changes only the words past the hash-id blocks, so
        those stay unique to each request also when a trace is looped.
        """
        entries = self.spec.entries
        bt = self.spec.block_tokens
        parts: list[bytes] = []
        left = entries.input_tokens(i)
        for h in entries.hash_ids(i):
            if left <= 0:
                break
            block = self._block(h)
            take = min(left, bt)
            parts.append(block if take == bt else block[: 4 * take])
            left -= take
        if left > 0:
            parts.append(_words(f"hopbench-trace-tail:{self.seed}:{i}:{rep}", left))
        return b"".join(parts)


#: hash ids below this are noted in TraceBodies' bitmap (8 MiB at most), larger ones in a set
_BITMAP_IDS = 1 << 26
_WORD_BYTES: tuple[bytes, ...] = tuple(w.encode("ascii") for w in WORDS)
_BIG_ENDIAN = sys.byteorder == "big"


def _words(key: str, n: int) -> bytes:
    """``n`` words of ``_lengths.WORDS`` (4 ASCII bytes each) drawn from ``key`` alone:
    the same ``key`` always gives the same text (any process, any machine).

    The word indices are the 16-bit little-endian values of SHAKE-128's output for ``key``,
    modulo the vocabulary (a skew of under 0.2 % between words, which only the
    text's look depends on): one C call for the randomness, ~4 us for a
    32-token block where a seeded ``random.Random`` took ~11 us (its seeding
    from a string hashes it with SHA-512, then fills 624 words of state).
    """
    if n <= 0:
        return b""
    words, size = _WORD_BYTES, len(_WORD_BYTES)
    raw = hashlib.shake_128(key.encode("utf-8")).digest(2 * n)
    if _BIG_ENDIAN:  # little-endian values on every machine (workers may differ)
        swapped = array.array("H", raw)
        swapped.byteswap()
        raw = swapped.tobytes()
    draw = memoryview(raw).cast("H")
    return b"".join([words[x % size] for x in draw])
