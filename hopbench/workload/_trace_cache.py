"""What a trace implies for a server's prompt cache, and the window of a trace that is replayed.

Role: ``window`` cuts the replayed stretch out of a trace (``[start_ms, end_ms)``
and the period a looped replay repeats by); ``implied_hits`` /
``implied_hits_as_read`` say, per entry, the prompt tokens a server prefix cache
with blocks of ``block_tokens`` tokens should hit, in the first pass and in
later ones (``_Implied``: worked out as the runner reads the entries, so
loading a trace costs nothing here).

Invariants:
- Pure: no clock, no I/O.
- Hits count whole hash-id blocks that an earlier entry of the same model sent
  after the same prefix; a later pass of a looped replay hits all of an
  entry's full blocks.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from typing import Any, overload

from ._trace_file import _U64, TraceEntries, TraceEntry

__all__ = ["implied_hits", "implied_hits_as_read", "window"]

_TAIL_BLOCK = (1 << 22) - 1


@overload
def window(entries: TraceEntries, start_ms: float | None,
           end_ms: float | None) -> tuple[TraceEntries, float, float]: ...
@overload
def window(entries: Sequence[TraceEntry], start_ms: float | None,
           end_ms: float | None) -> tuple[Sequence[TraceEntry], float, float]: ...


def window(entries: Sequence[TraceEntry], start_ms: float | None,
           end_ms: float | None) -> tuple[Sequence[TraceEntry], float, float]:
    """The entries of ``[start_ms, end_ms)`` of trace time, with the window's start and period.

    Args:
        entries: the whole trace (time order).
        start_ms: window start (trace time); None: the first timestamp.
        end_ms: window end (exclusive); None: after the last entry.

    Returns:
        (entries in the window: a view of ``entries`` when it is ``TraceEntries``,
        else a list; start ms, period ms): the period, used by
        ``loop``, is ``end_ms - start_ms`` when an end is given, else the span
        from the start to the last entry plus the mean gap between entries
        (so the seam between two passes is a typical gap), at least 1 ms; 1 s
        for a single entry or entries all at one timestamp (no gap to go by:
        two rows at one instant looped every 1 ms, 2,000 requests/s).
        The entry list may be empty (the caller reports it).
    """
    kept: Sequence[TraceEntry]
    if isinstance(entries, TraceEntries):  # in time order: the window is a slice, found by bisection
        start = entries.t_ms(0) if start_ms is None else start_ms
        lo = entries.bisect_t(start)
        view = entries.view(lo, len(entries) if end_ms is None else entries.bisect_t(end_ms))
        first, last = (view.t_ms(0), view.t_ms(len(view) - 1)) if len(view) else (0.0, 0.0)
        kept = view
    else:
        start = entries[0].t_ms if start_ms is None else start_ms
        kept = [e for e in entries if e.t_ms >= start and (end_ms is None or e.t_ms < end_ms)]
        first, last = (kept[0].t_ms, kept[-1].t_ms) if kept else (0.0, 0.0)
    if end_ms is not None:
        period = end_ms - start
    elif len(kept) > 1 and last > first:
        span = last - start
        period = span + (last - first) / (len(kept) - 1)
    else:  # one entry, or all at one timestamp: no gap to repeat by; once a second
        period = 1000.0
    return kept, start, max(period, 1.0)


def implied_hits(entries: Sequence[TraceEntry], models: Sequence[str], block_tokens: int,
                 ) -> tuple[tuple[int, int], ...]:
    """The prompt-cache hits a trace implies, per entry: (first pass, later passes), tokens.

    A server cache with blocks of ``block_tokens`` tokens and room for every
    block (vLLM's automatic prefix caching, the emulator's prefix cache)
    serves a request the leading blocks of its prompt that an earlier request
    (of the same model) already sent, as full blocks, after the same prefix.
    In a looped replay every full hash-id block was sent in the first pass, so
    a later pass hits all of them.

    Args:
        entries: the replayed entries in schedule order.
        models: the model of each entry (its scenario's).
        block_tokens: tokens per hash id (the trace's block size).

    Returns:
        tuple of (hit tokens in the first pass, hit tokens in later passes), one per entry.
    """
    ids = {m: k for k, m in enumerate(dict.fromkeys(models))}
    return tuple(_Implied(entries, array.array("i", [ids[m] for m in models]), block_tokens))


def implied_hits_as_read(entries: Sequence[TraceEntry], model: Sequence[int],
                         block_tokens: int) -> Sequence[tuple[int, int]]:
    """``implied_hits`` worked out as it is read (``_Implied``), each entry's model given as
    an index (equal indices: one cache): what a ``TraceSpec`` holds.

    Returns:
        a sequence of (hit tokens in the first pass, hit tokens in later passes), one per
        entry; reading entry ``k`` walks the entries up to ``k`` once.
    """
    return _Implied(entries, model, block_tokens)


class _Implied(Sequence[tuple[int, int]]):
    """``implied_hits`` computed as it is read: entry ``k``'s figures walk the trie of the
    prefixes sent (in entry order) up to ``k`` the first time an entry at or past it is
    read, so loading a trace costs nothing here and the runner, which reads its entries
    in order, pays a few us per request (a dict look-up per block it shares, plus one).

    The trie is path-compressed: where an entry's prefix leaves the trie, one node is
    made and the rest of the entry's full blocks hang off it unmade (the node's tail:
    that entry, from that block on); a later entry that follows a tail makes its nodes
    one block at a time. The hits are those of the whole trie (every prefix of every
    earlier entry's full blocks), while the memory is ~2 dict entries per entry plus
    one per block shared (a trie of every prefix block took one per block: ~4 M for
    500,000 Mooncake-style lines).

    Args:
        entries: the replayed entries in schedule order.
        model: per entry, an index standing for its model (equal indices: one cache).
        block_tokens: tokens per hash id.
    """

    __slots__ = ("_entries", "_model", "_bt", "_hits", "_tries", "_nodes", "_columns")

    def __init__(self, entries: Sequence[TraceEntry], model: Sequence[int], block_tokens: int) -> None:
        self._entries, self._model, self._bt = entries, model, block_tokens
        self._hits: array.array[int] = array.array("q")  # first-pass hit blocks of the entries walked
        # per model: (parent node << 64 | hash id) -> node (ids of 2**64 or more: a tuple key),
        # and node -> its tail (entry << 22 | block index: at most 2,000,000 blocks a prompt)
        self._tries: dict[int, tuple[dict[object, int], dict[int, int]]] = {}
        self._nodes = 0
        self._columns: tuple[Sequence[int], Sequence[int], Sequence[int]] | None = None

    def __reduce__(self) -> tuple[Any, ...]:  # a worker gets the inputs, not the walk so far
        return (_Implied, (self._entries, self._model, self._bt))

    def __len__(self) -> int:
        return len(self._entries)

    def _cols(self) -> tuple[Sequence[int], Sequence[int], Sequence[int]]:
        """(input tokens, hash-id offsets, the flat hash ids) of the entries, read in place."""
        if self._columns is None:
            entries = TraceEntries.of(self._entries)
            inp, hoff, _, _, _ = entries.columns()
            self._columns = (inp, hoff, entries.ids_column())
        return self._columns

    def _walk_to(self, k: int) -> None:
        bt, hits_col, model = self._bt, self._hits, self._model
        inp, hoff, flat = self._cols()
        for e in range(len(hits_col), k + 1):
            a = hoff[e]
            full = min(hoff[e + 1] - a, inp[e] // bt)
            pair = self._tries.get(model[e])
            if pair is None:
                pair = self._tries[model[e]] = ({}, {})
            trie, tails = pair
            hits = 0
            node = 0
            while hits < full:
                h = flat[a + hits]
                key: object = node << 64 | h if h < _U64 else (node, h)
                nxt = trie.get(key)
                if nxt is None and node in tails:  # make the node's tail's first block a node
                    tail = tails.pop(node)
                    j, at = tail >> 22, tail & _TAIL_BLOCK
                    h_j = flat[hoff[j] + at]
                    self._nodes += 1
                    trie[node << 64 | h_j if h_j < _U64 else (node, h_j)] = self._nodes
                    if at + 1 < min(hoff[j + 1] - hoff[j], inp[j] // bt):
                        tails[self._nodes] = j << 22 | (at + 1)
                    if h_j == h:
                        nxt = self._nodes
                if nxt is None:  # the prefix leaves the trie here: one node, the rest its tail
                    self._nodes += 1
                    trie[key] = self._nodes
                    if hits + 1 < full:
                        tails[self._nodes] = e << 22 | (hits + 1)
                    break
                hits += 1
                node = nxt
            hits_col.append(hits)

    @overload
    def __getitem__(self, k: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[tuple[int, int]]: ...

    def __getitem__(self, k: int | slice) -> tuple[int, int] | Sequence[tuple[int, int]]:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        n_entries = len(self._entries)
        if k < 0:
            k += n_entries
        if not 0 <= k < n_entries:
            raise IndexError("trace entry index out of range")
        if k >= len(self._hits):
            self._walk_to(k)
        inp, hoff, _ = self._cols()
        return self._hits[k] * self._bt, min(hoff[k + 1] - hoff[k], inp[k] // self._bt) * self._bt
