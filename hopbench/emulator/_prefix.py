"""The emulator's prefix cache: prompt blocks hashed, looked up and kept in LRU order.

Role: model the automatic prefix caching of inference servers (vLLM's APC,
SGLang's radix cache) closely enough that a workload's prefix-sharing pattern
shows in the emulator's timing and usage. A prompt is cut into blocks of
``block_tokens`` tokens; the emulator counts 4 characters per token
(``_behaviour.input_tokens_of``), so a block is ``4 * block_tokens``
characters of the prompt text (every string the token count reads, joined
without separators, in the order system, instructions, messages, input).

Invariants:
- A block's key is a hash of the whole prefix up to and including it (a
  chain, as vLLM hashes blocks), and of the model: equal blocks after
  different prefixes never share an entry.
- Only full blocks are cached; a prompt's last partial block never hits.
- A lookup counts the leading blocks found (it stops at the first miss),
  then inserts every full block of the prompt as most recently used; past
  ``capacity_blocks`` the least recently used blocks are evicted.
- Pure and synchronous: no clock, no I/O; the same requests in the same
  order give the same hits.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PrefixCache", "CacheResult", "CHARS_PER_TOKEN"]

#: the emulator's token count: characters / 4 (``_behaviour.input_tokens_of``)
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class CacheResult:
    """What the cache did for one prompt.

    Attributes:
        hit_tokens: tokens of the leading blocks found in the cache (their
            prefill is skipped; reported as cached tokens).
        new_tokens: tokens of the full blocks that were not cached and now
            are (Anthropic's ``cache_creation_input_tokens``).
    """

    hit_tokens: int
    new_tokens: int


class PrefixCache:
    """An LRU cache of prompt blocks, keyed by a hash chain (see the module docstring).

    Args:
        capacity_blocks: blocks kept (>= 1).
        block_tokens: tokens per block (>= 1).
    """

    __slots__ = ("capacity_blocks", "block_tokens", "_blocks")

    def __init__(self, capacity_blocks: int, block_tokens: int) -> None:
        if capacity_blocks < 1 or block_tokens < 1:
            raise ValueError("capacity_blocks and block_tokens must be >= 1")
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup(self, model: str, parts: Sequence[str]) -> CacheResult:
        """Look a prompt up and insert its full blocks.

        Args:
            model: the request's model (each model has its own entries).
            parts: the prompt's strings in order; they are joined without a
                separator before being cut into blocks.

        Returns:
            The ``CacheResult``. Never raises.
        """
        text = "".join(parts)
        step = self.block_tokens * CHARS_PER_TOKEN
        n_full = len(text) // step
        h = hashlib.blake2b(model.encode("utf-8", "surrogatepass"), digest_size=16)
        blocks = self._blocks
        hits = 0
        missed = False
        new = 0
        for i in range(n_full):
            h.update(text[i * step:(i + 1) * step].encode("utf-8", "surrogatepass"))
            key = h.copy().digest()
            if key in blocks:
                blocks.move_to_end(key)
                if not missed:
                    hits += 1
            else:
                missed = True
                blocks[key] = None
                new += 1
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
        return CacheResult(hits * self.block_tokens, new * self.block_tokens)
