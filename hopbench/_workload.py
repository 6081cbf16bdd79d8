"""Workloads: length distributions, synthetic prompts, datasets (pure, seeded).

Role: turn a scenario's workload keys (``input_tokens``, ``max_tokens`` as a
distribution, ``dataset``, ``tokenizer``) into a pool of distinct requests,
each with its prompt, its requested input length and its ``max_tokens``. The
profile loader encodes one JSON body per pool entry once; the runner then only
picks an entry per request (``Picker``): no request is re-encoded.

Invariants:
- No clock and no I/O, except reading a dataset file (``read_dataset``) and a
  tokenizer file at profile load.
- Everything random is drawn from a ``random.Random`` the caller seeds: the same
  seed gives the same pool and the same picks.
- Synthetic prompts are made of ``WORDS``: four characters each, a space and a
  common three-letter English word, each a single token in the common BPE
  vocabularies (GPT-2 r50k, cl100k, o200k: a leading-space common word is one
  token in all of them). So N words are about N tokens for a BPE model and
  exactly ceil((4N-1)/4) = N for the emulator (characters / 4). With a
  tokenizer (``Tokenizer``) the length is made exact for that tokenizer.
- A distribution's draws lie in [min, max]: the pool takes quantiles of the
  distribution truncated to [min, max] at low-discrepancy points (``Dist.spread``),
  so the pool mean, and that of every prefix of the pool, is the truncated
  distribution's mean to within rounding.

Sources: ShareGPT's JSON (``[{"conversations": [{"from", "value"}]}]``, as
vLLM's benchmark_serving reads it), OpenAI chat JSONL (``{"messages": [...]}``,
OpenAI fine-tuning format), Anthropic Messages JSONL (``{"system"?, "messages"}``,
Anthropic API reference "Messages"), plain prompts JSONL (a string or
``{"prompt": ...}``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._errors import ProfileError

__all__ = [
    "Dist",
    "Message",
    "PoolEntry",
    "Picker",
    "Tokenizer",
    "WORDS",
    "DATASET_FORMATS",
    "DIST_KINDS",
    "estimate_tokens",
    "synthetic_prompt",
    "read_dataset",
    "load_tokenizer",
    "encode_body",
]

DIST_KINDS: tuple[str, ...] = ("fixed", "normal", "lognormal", "uniform")
DATASET_FORMATS: tuple[str, ...] = ("auto", "sharegpt", "openai", "anthropic", "prompts")

#: A space and a common three-letter English word: one token each in r50k,
#: cl100k and o200k, four characters each (the emulator counts characters / 4).
WORDS: tuple[str, ...] = tuple(" " + w for w in (
    "the and for you are not but can all one has had was her his may new now out see two way "
    "who use any day get how man own say she too our old big end put run set try ask few let "
    "top yes far off red law war car air art job key box low cut sun sea eye age act add buy "
    "pay win why did got its him men yet per via son ten six map fit hot"
).split())


# -- distributions -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Dist:
    """A token-length distribution: ``fixed``, ``normal``, ``lognormal`` or ``uniform``.

    Attributes:
        kind: the shape.
        mean: the mean in tokens (``fixed``: the value).
        stddev: the standard deviation in tokens (>= 0; ignored by ``fixed``).
        min: the smallest length drawn, tokens (>= 1).
        max: the largest length drawn, tokens (>= min).

    ``uniform`` spreads over [min, max] when both are given, else over
    mean ± stddev·√3 (which has that mean and standard deviation). ``lognormal``
    has the given mean and standard deviation (not those of its logarithm).
    """

    kind: Literal["fixed", "normal", "lognormal", "uniform"]
    mean: float
    stddev: float
    min: int
    max: int

    @staticmethod
    def fixed(n: int) -> "Dist":
        """A length that is always ``n`` tokens."""
        return Dist("fixed", float(n), 0.0, n, n)

    def problem(self) -> str | None:
        """Why these parameters make no distribution (None when they do)."""
        if self.min < 1:
            return f"expected min >= 1, got {self.min}"
        if self.min > self.max:
            return f"expected min <= max, got min = {self.min} > max = {self.max}"
        if self.stddev < 0:
            return f"expected stddev >= 0, got {self.stddev:g}"
        if not self.min <= self.mean <= self.max:
            return f"expected the mean within [min, max] = [{self.min}, {self.max}], got {self.mean:g}"
        return None

    @property
    def constant(self) -> bool:
        """True when every draw is the same length (``fixed``, or no spread)."""
        if self.kind == "uniform":
            return self.min == self.max or (self.stddev == 0 and not self._explicit_bounds())
        return self.kind == "fixed" or self.stddev == 0

    def _explicit_bounds(self) -> bool:
        return self.min > 1 or self.max < _UNBOUNDED

    def _quantile(self, u: float) -> float:
        """The value at probability ``u`` (0 < u < 1) of the untruncated shape."""
        if self.constant:
            return self.mean
        if self.kind == "normal":
            return statistics.NormalDist(self.mean, self.stddev).inv_cdf(u)
        if self.kind == "lognormal":
            sigma2 = math.log(1 + (self.stddev / self.mean) ** 2)
            mu = math.log(self.mean) - sigma2 / 2
            return math.exp(statistics.NormalDist(mu, math.sqrt(sigma2)).inv_cdf(u))
        lo, hi = self._uniform_bounds()
        return lo + u * (hi - lo)

    def _uniform_bounds(self) -> tuple[float, float]:
        if self._explicit_bounds():  # explicit bounds win
            return float(self.min) - 0.5, float(self.max) + 0.5
        half = self.stddev * math.sqrt(3)
        return self.mean - half, self.mean + half

    def _cdf(self, x: float) -> float:
        if self.kind == "normal":
            return statistics.NormalDist(self.mean, self.stddev).cdf(x)
        if self.kind == "lognormal":
            if x <= 0:
                return 0.0
            sigma2 = math.log(1 + (self.stddev / self.mean) ** 2)
            mu = math.log(self.mean) - sigma2 / 2
            return statistics.NormalDist(mu, math.sqrt(sigma2)).cdf(math.log(x))
        lo, hi = self._uniform_bounds()
        return min(1.0, max(0.0, (x - lo) / (hi - lo)))

    def stratified(self, n: int, rng: random.Random) -> list[int]:
        """``n`` lengths at evenly spaced quantiles of the truncated distribution, shuffled.

        Args:
            n: how many (>= 1).
            rng: shuffles the order (seeded by the caller).

        Returns:
            list of n integers in [min, max], in random order. Their mean is the
            mean of the distribution truncated to [min, max] (to within rounding
            and the quantile grid). Never raises for a valid ``Dist``.
        """
        if self.constant:
            return [min(self.max, max(self.min, round(self.mean)))] * n
        lo = self._cdf(self.min - 0.5)
        hi = self._cdf(self.max + 0.5)
        if hi - lo <= 0:  # the whole mass lies outside the bounds: a degenerate truncation
            return [min(self.max, max(self.min, round(self.mean)))] * n
        out = []
        for i in range(n):
            u = lo + (i + 0.5) / n * (hi - lo)
            u = min(max(u, 1e-12), 1 - 1e-12)
            out.append(min(self.max, max(self.min, round(self._quantile(u)))))
        rng.shuffle(out)
        return out

    def spread(self, n: int, base: int, rng: random.Random) -> list[int]:
        """``n`` lengths in an order whose every prefix is spread evenly over the
        truncated distribution.

        The i-th value is the quantile at the i-th point of the van der Corput
        sequence in ``base`` (2, 3, ...: a Halton sequence when two columns use
        two bases), rotated by one seeded random offset. So the first k values
        of the pool have the distribution's mean up to O(log k / k), not the
        O(1 / sqrt k) of independent draws; all n (a power of ``base``) are
        exactly the ``stratified`` grid.

        Args:
            n: how many (>= 1).
            base: the sequence's base (use a different one per column, so
                that columns are not correlated).
            rng: draws the offset (seeded by the caller).

        Returns:
            list of n integers in [min, max]. Never raises for a valid ``Dist``.
        """
        shift = rng.random()
        if self.constant:
            return [min(self.max, max(self.min, round(self.mean)))] * n
        lo = self._cdf(self.min - 0.5)
        hi = self._cdf(self.max + 0.5)
        if hi - lo <= 0:
            return [min(self.max, max(self.min, round(self.mean)))] * n
        out = []
        for i in range(n):
            v = (_van_der_corput(i, base) + shift + 0.5 / n) % 1.0
            u = min(max(lo + v * (hi - lo), 1e-12), 1 - 1e-12)
            out.append(min(self.max, max(self.min, round(self._quantile(u)))))
        return out


def _van_der_corput(i: int, base: int) -> float:
    """The i-th point (from 0) of the van der Corput sequence in ``base``, in [0, 1)."""
    f, r = 1.0, 0.0
    while i > 0:
        f /= base
        r += f * (i % base)
        i //= base
    return r


_UNBOUNDED = 10_000_000  # tokens: "no max" (larger than any model's context)


def dist_from(value: Any, where: Callable[[str], ProfileError], *, default_min: int = 1) -> Dist:
    """A ``Dist`` from a profile value: an integer, or a table
    ``{dist, mean, stddev, min, max}``.

    Args:
        value: the parsed TOML value.
        where: builds the ProfileError (file, line, key) for a reason.
        default_min: the min when none is given.

    Raises:
        ProfileError: wrong types, an unknown key, min > max, stddev < 0, a mean
        outside [min, max], a lognormal without a positive mean.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise where(f"expected a positive integer or a distribution table, got {value}")
        return Dist.fixed(value)
    if not isinstance(value, Mapping):
        raise where(f"expected a positive integer or a table {{ dist, mean, stddev, min, max }}, "
                    f"got {type(value).__name__}")
    allowed = ("dist", "mean", "stddev", "min", "max")
    for k in value:
        if k not in allowed:
            raise where(f"unknown key {k!r} in the distribution (expected: {', '.join(allowed)})")
    kind = value.get("dist", "fixed")
    if kind not in DIST_KINDS:
        raise where(f"expected dist one of {', '.join(repr(k) for k in DIST_KINDS)}, got {kind!r}")

    def num(name: str, default: Any, integer: bool = False) -> Any:
        v = value.get(name, default)
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or (isinstance(v, float) and not math.isfinite(v)):
            want = "an integer" if integer else "a number"
            raise where(f"expected {name} to be {want}, got {v!r}")
        return v

    lo = num("min", default_min, integer=True)
    hi = num("max", _UNBOUNDED, integer=True)
    if kind == "uniform" and "mean" not in value:
        if "min" not in value or "max" not in value:
            raise where('dist = "uniform" needs min and max (or mean and stddev)')
        mean = (lo + hi) / 2
    else:
        if "mean" not in value:
            raise where(f'dist = "{kind}" needs a mean')
        mean = num("mean", None)
    stddev = num("stddev", 0.0)
    if kind in ("normal", "lognormal") and "stddev" not in value:
        raise where(f'dist = "{kind}" needs a stddev')
    d = Dist(kind, float(mean), float(stddev), lo, hi)
    problem = d.problem()
    if problem is None and kind == "lognormal" and mean <= 0:
        problem = f"expected a positive mean for a lognormal, got {mean:g}"
    if problem is None and kind == "fixed" and (mean != int(mean)):
        problem = f"expected an integer mean for dist = \"fixed\", got {mean:g}"
    if problem:
        raise where(problem)
    return d


# -- tokenizers ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Tokenizer:
    """An exact token counter, loaded from a local file only.

    Attributes:
        name: as the profile wrote it (``"tiktoken:o200k_base"`` or a path).
        count: text -> tokens.
    """

    name: str
    count: Callable[[str], int]


_TIKTOKEN_URLS = {
    name: f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    for name in ("o200k_base", "cl100k_base", "p50k_base")
}


def _tiktoken_cache_file(url: str) -> Path:
    """Where tiktoken caches ``url`` (tiktoken/load.py: ``read_file_cached``)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        base = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        base = Path(os.environ["DATA_GYM_CACHE_DIR"])
    else:
        base = Path(tempfile.gettempdir()) / "data-gym-cache"
    return base / hashlib.sha1(url.encode()).hexdigest()


def load_tokenizer(spec: str, base: Path) -> Tokenizer:
    """Load ``tiktoken:<encoding>`` (cached file only) or a ``tokenizer.json`` path.

    Args:
        spec: ``"tiktoken:o200k_base"`` (also cl100k_base, p50k_base) or a path
            to a Hugging Face ``tokenizer.json`` (relative to ``base``).
        base: the profile's folder.

    Returns:
        The tokenizer. Never downloads anything.

    Raises:
        ValueError: the package is not installed, the encoding's file is not
        cached, or the file cannot be read (the message says which and how to fix).
    """
    if spec.startswith("tiktoken:"):
        name = spec.split(":", 1)[1]
        if name not in _TIKTOKEN_URLS:
            raise ValueError(f"expected tiktoken:<one of {', '.join(_TIKTOKEN_URLS)}>, got {spec!r}")
        try:
            import tiktoken  # type: ignore[import-not-found]  # optional
        except ImportError:
            raise ValueError(f"{spec}: the optional package tiktoken is not installed "
                             "(pip install tiktoken), or use a tokenizer.json path") from None
        cached = _tiktoken_cache_file(_TIKTOKEN_URLS[name])
        if not cached.is_file():
            raise ValueError(f"{spec}: tiktoken's file for {name} is not cached locally ({cached}; "
                             "hopbench never downloads it: set TIKTOKEN_CACHE_DIR to a folder "
                             "holding it)")
        try:
            enc = tiktoken.get_encoding(name)
        except Exception as exc:  # a corrupt cache file: tiktoken's own errors vary
            raise ValueError(f"{spec}: tiktoken cannot load {cached}: {exc}") from None
        return Tokenizer(spec, lambda text: len(enc.encode(text, disallowed_special=())))
    path = Path(spec) if Path(spec).is_absolute() else base / spec
    try:
        from tokenizers import Tokenizer as HFTokenizer  # type: ignore[import-not-found]  # optional
    except ImportError:
        raise ValueError(f"{spec}: the optional package tokenizers is not installed "
                         "(pip install tokenizers)") from None
    if not path.is_file():
        raise ValueError(f"{spec}: no such tokenizer file {path}")
    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception subclass
        raise ValueError(f"{spec}: {path} is not a tokenizer.json: {exc}") from None
    return Tokenizer(spec, lambda text: len(tok.encode(text, add_special_tokens=False).ids))


def estimate_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    """Tokens of ``text``: exact with a tokenizer, else characters / 4 rounded up
    (the common rule of thumb, and the emulator's own count); at least 1."""
    if tokenizer is not None:
        return tokenizer.count(text)
    return max(1, math.ceil(len(text) / 4))


def synthetic_prompt(n_tokens: int, rng: random.Random, tokenizer: Tokenizer | None = None) -> str:
    """A prompt of ``n_tokens`` tokens made of ``WORDS``.

    Args:
        n_tokens: the length wanted (>= 1).
        rng: picks the words (so distinct prompts differ: no accidental prompt cache hits).
        tokenizer: when given, words are added or dropped until the tokenizer
            counts exactly ``n_tokens`` (or as close as one word allows).

    Returns:
        The text: 4·n - 1 characters without a tokenizer (the emulator counts n).
    """
    words = rng.choices(WORDS, k=n_tokens)
    if tokenizer is None:
        return "".join(words)[1:]
    text = "".join(words)[1:]
    n = tokenizer.count(text)
    for _ in range(4 * n_tokens + 8):  # bounded: each step moves the count by about one
        if n == n_tokens:
            break
        if n < n_tokens:
            words.append(rng.choice(WORDS))
        elif len(words) > 1:
            words.pop()
        else:
            break
        text = "".join(words)[1:]
        n = tokenizer.count(text)
    return text


# -- datasets -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Message:
    """One chat turn: role ``"system"``, ``"user"`` or ``"assistant"``, and its text."""

    role: str
    text: str


@dataclass(frozen=True, slots=True)
class Record:
    """One dataset record: the conversation to send and, when the dataset holds
    it, the reference reply (whose length can filter records).

    Attributes:
        messages: system (first, at most one) then user/assistant turns ending
            with a user turn.
        reply: the reference assistant reply that followed, or None.
        line: the 1-based line (JSONL) or array index + 1 (JSON) it came from.
    """

    messages: tuple[Message, ...]
    reply: str | None
    line: int


def _content_text(content: Any) -> str | None:
    """A message content as text: a string, or the text blocks of a block array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts) if parts else None
    return None


def _from_messages(obj: Mapping[str, Any], line: int, fail: Callable[[int, str], ProfileError]) -> Record:
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise fail(line, 'expected a non-empty "messages" array')
    out: list[Message] = []
    system = obj.get("system")  # Anthropic: a top-level system prompt (string or text blocks)
    if system is not None:
        text = _content_text(system)
        if text is None:
            raise fail(line, '"system": expected a string or an array of text blocks')
        out.append(Message("system", text))
    for i, m in enumerate(msgs):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise fail(line, f'messages[{i}]: expected an object with a "role"')
        role = m["role"]
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant"):
            raise fail(line, f'messages[{i}].role: expected system, user or assistant, got {role!r}')
        text = _content_text(m.get("content"))
        if text is None:
            raise fail(line, f'messages[{i}].content: expected a string or text blocks')
        if role == "system" and out and out[-1].role != "system":
            raise fail(line, f"messages[{i}]: a system message after the conversation started")
        out.append(Message(role, text))
    reply = None
    if out[-1].role == "assistant":  # fine-tuning style: the last turn is the reference reply
        reply = out.pop().text
    if not out or out[-1].role != "user":
        raise fail(line, "expected the conversation to end with a user message "
                         "(optionally followed by the assistant's reply)")
    return Record(tuple(out), reply, line)


_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
                   "assistant": "assistant", "bing": "assistant", "bard": "assistant",
                   "system": "system"}


def _from_sharegpt(obj: Mapping[str, Any], line: int, fail: Callable[[int, str], ProfileError]) -> Record | None:
    """The first user turn of a ShareGPT record, and the reply that follows it.

    Returns None for a record with no user turn (ShareGPT dumps hold empty ones;
    vLLM's benchmark skips them too).
    """
    conv = obj.get("conversations")
    if not isinstance(conv, list):
        raise fail(line, 'expected a "conversations" array')
    turns: list[Message] = []
    for i, turn in enumerate(conv):
        if not isinstance(turn, Mapping) or not isinstance(turn.get("value"), str):
            raise fail(line, f'conversations[{i}]: expected an object with a string "value"')
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise fail(line, f'conversations[{i}].from: expected human or gpt, got {turn.get("from")!r}')
        turns.append(Message(role, turn["value"]))
    system = [t for t in turns[:1] if t.role == "system"]
    rest = turns[len(system):]
    if not rest or rest[0].role != "user" or not rest[0].text.strip():
        return None
    reply = rest[1].text if len(rest) > 1 and rest[1].role == "assistant" else None
    return Record(tuple(system) + (rest[0],), reply, line)


def _from_prompt(obj: Any, line: int, fail: Callable[[int, str], ProfileError]) -> Record:
    if isinstance(obj, Mapping):
        obj = obj.get("prompt", obj.get("text"))
    if not isinstance(obj, str):
        raise fail(line, 'expected a JSON string or an object with a string "prompt"')
    if not obj.strip():
        raise fail(line, "expected a non-empty prompt")
    return Record((Message("user", obj),), None, line)


def _detect(first: Any) -> str:
    if isinstance(first, Mapping):
        if "conversations" in first:
            return "sharegpt"
        if "messages" in first:
            return "anthropic" if "system" in first else "openai"
    return "prompts"


def read_dataset(path: Path, fmt: str, fail: Callable[[int | None, str], ProfileError]) -> list[Record]:
    """Read a dataset file into records (at profile load; the only file I/O here).

    Args:
        path: the file: JSON (an array, ShareGPT) or JSONL (one record per line;
            blank lines skipped).
        fmt: one of ``DATASET_FORMATS``; "auto" looks at the extension and the
            first record.
        fail: builds a ProfileError for (line or None, reason) in ``path``.

    Returns:
        list of Record in file order (ShareGPT records without a user turn skipped).

    Raises:
        ProfileError: a missing or unreadable file, not UTF-8, empty, a broken
        line (file:line), a record without the fields its format needs, or no
        usable record at all.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise fail(None, f"cannot read the dataset {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise fail(line, f"the dataset is not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise fail(None, f"the dataset {path} is empty")
    items: list[tuple[int, Any]] = []
    if text.lstrip().startswith("["):  # one JSON array (ShareGPT's own files)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise fail(exc.lineno, f"broken JSON: {exc.msg}") from None
        starts = _array_lines(text, len(data)) if isinstance(data, list) else []
        items = [(starts[i] if i < len(starts) else 1, v) for i, v in enumerate(data)]
    else:
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((i, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise fail(i, f"broken JSON line: {exc.msg} (column {exc.colno})") from None
    if not items:
        raise fail(None, f"the dataset {path} holds no records")
    if fmt == "auto":
        fmt = _detect(items[0][1])

    def fail_at(line: int, reason: str) -> ProfileError:
        return fail(line, f"{fmt} record: {reason}")

    out: list[Record] = []
    for line, obj in items:
        if fmt == "prompts":
            out.append(_from_prompt(obj, line, fail_at))
            continue
        if not isinstance(obj, Mapping):
            raise fail_at(line, f"expected a JSON object, got {type(obj).__name__}")
        if fmt == "sharegpt":
            rec = _from_sharegpt(obj, line, fail_at)
            if rec is not None:
                out.append(rec)
        else:
            out.append(_from_messages(obj, line, fail_at))
    if not out:
        raise fail(None, f"the dataset {path} holds no record with a user prompt")
    return out


def _array_lines(text: str, n: int) -> list[int]:
    """The 1-based line where each top-level element of a JSON array starts."""
    decoder = json.JSONDecoder()
    lines: list[int] = []
    i = text.index("[") + 1
    line = 1 + text.count("\n", 0, i)
    pos = i
    for _ in range(n):
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        line += text.count("\n", pos, i)
        pos = i
        lines.append(line)
        try:
            _, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            break
    return lines


# -- pool and picks --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PoolEntry:
    """One distinct request of a scenario.

    Attributes:
        messages: the conversation to send (system first when present).
        input_tokens: the requested (synthetic) or estimated (dataset) input
            length in tokens, or None when the scenario sets none.
        max_tokens: the output cap sent, tokens.
    """

    messages: tuple[Message, ...]
    input_tokens: int | None
    max_tokens: int


def record_tokens(rec: Record, tokenizer: Tokenizer | None) -> int:
    """Input tokens of a record's messages: the tokenizer's count summed over the
    messages, else all their characters / 4 rounded up (as the emulator counts)."""
    if tokenizer is not None:
        return sum(tokenizer.count(m.text) for m in rec.messages)
    return estimate_tokens("".join(m.text for m in rec.messages))


class Picker:
    """Chooses the pool entry of each request: seeded, with or without replacement.

    With replacement, each pick is uniform (the runner's rng, one draw per
    request, as for a plain prompt list). Without, the entries are visited in
    the pool's own order, each once before any repeats: ``build_pool`` makes
    that order a seeded shuffle (datasets) or one whose every prefix is spread
    evenly over the length distributions (``Dist.spread``).

    Args:
        n: pool size (>= 1).
        replacement: the sampling mode.
    """

    __slots__ = ("n", "replacement", "_next")

    def __init__(self, n: int, replacement: bool = True) -> None:
        self.n = n
        self.replacement = replacement
        self._next = 0

    def pick(self, rng: random.Random) -> int:
        """The next entry's index, 0 <= i < n."""
        if self.n == 1:
            return 0
        if self.replacement:
            return rng.randrange(self.n)
        i = self._next
        self._next = (i + 1) % self.n
        return i


def encode_body(protocol: str, model: str, messages: Sequence[Message], max_tokens: int,
                include_usage: bool, extra: Mapping[str, Any]) -> bytes:
    """One streaming request body for a conversation, per the protocol's API reference.

    chat (OpenAI "Create chat completion"): ``messages`` with system as a
    ``system`` message; responses (OpenAI "Create a model response"): the
    system text as ``instructions``, a single user turn as the ``input`` string,
    else ``input`` as a message list; messages (Anthropic "Messages"): ``system``
    beside ``messages``. ``extra`` is merged last.

    Returns:
        UTF-8 JSON bytes (compact, non-ASCII kept).
    """
    system = "\n".join(m.text for m in messages if m.role == "system")
    turns = [{"role": m.role, "content": m.text} for m in messages if m.role != "system"]
    body: dict[str, Any]
    if protocol == "chat":
        msgs = ([{"role": "system", "content": system}] if system else []) + turns
        body = {"model": model, "messages": msgs, "stream": True, "max_tokens": max_tokens}
        if include_usage:
            body["stream_options"] = {"include_usage": True}
    elif protocol == "responses":
        body = {"model": model, "input": turns[0]["content"] if len(turns) == 1 else turns,
                "stream": True, "max_output_tokens": max_tokens}
        if system:
            body["instructions"] = system
    else:
        body = {"model": model, "messages": turns, "max_tokens": max_tokens, "stream": True}
        if system:
            body["system"] = system
    body.update(extra)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A scenario's ``dataset`` table, validated.

    Attributes:
        path: the file (resolved against the profile's folder).
        format: one of ``DATASET_FORMATS``.
        sample: keep this many records (drawn without replacement, seeded), or None for all.
        min_input_tokens / max_input_tokens: keep records whose prompt length
            (``record_tokens``) lies within these bounds (None: no bound).
        min_output_tokens / max_output_tokens: keep records whose reference reply
            length lies within these bounds; a bound drops records without a reply.
    """

    path: Path
    format: str
    sample: int | None
    min_input_tokens: int | None
    max_input_tokens: int | None
    min_output_tokens: int | None
    max_output_tokens: int | None


def filter_records(records: Sequence[Record], spec: DatasetSpec,
                   tokenizer: Tokenizer | None) -> list[tuple[Record, int]]:
    """The records within the spec's length bounds, each with its input tokens.

    Returns:
        list of (record, input tokens) in file order, possibly empty.
    """
    out = []
    for rec in records:
        n = record_tokens(rec, tokenizer)
        if spec.min_input_tokens is not None and n < spec.min_input_tokens:
            continue
        if spec.max_input_tokens is not None and n > spec.max_input_tokens:
            continue
        if spec.min_output_tokens is not None or spec.max_output_tokens is not None:
            if rec.reply is None:
                continue
            r = estimate_tokens(rec.reply, tokenizer)
            if spec.min_output_tokens is not None and r < spec.min_output_tokens:
                continue
            if spec.max_output_tokens is not None and r > spec.max_output_tokens:
                continue
        out.append((rec, n))
    return out


def build_pool(rng: random.Random, *, max_tokens: Dist, pool_size: int,
               input_dist: Dist | None = None, records: Sequence[tuple[Record, int]] | None = None,
               prompts: Sequence[tuple[Message, ...]] | None = None,
               tokenizer: Tokenizer | None = None) -> list[PoolEntry]:
    """The distinct requests of a scenario.

    Exactly one source: ``input_dist`` (``pool_size`` synthetic prompts at
    ``Dist.spread`` lengths), ``records`` (one entry per dataset record, with its
    estimated length) or ``prompts`` (plain prompts, cycled to ``pool_size``
    entries so that a ``max_tokens`` distribution has room).

    Args:
        rng: seeded by the caller (run seed and scenario index).
        max_tokens: the output-cap distribution (``Dist.spread`` over the pool).
        pool_size: entries for synthetic or plain prompts (>= 1).

    Returns:
        list of PoolEntry, non-empty.
    """
    entries: list[PoolEntry] = []
    if input_dist is not None:
        lengths = input_dist.spread(pool_size, 2, rng)
        caps = max_tokens.spread(pool_size, 3, rng)
        for n, cap in zip(lengths, caps):
            entries.append(PoolEntry((Message("user", synthetic_prompt(n, rng, tokenizer)),), n, cap))
    elif records is not None:
        order = list(records)
        rng.shuffle(order)  # the pool's order is the sending order without replacement
        caps = max_tokens.spread(len(order), 3, rng)
        for (rec, n), cap in zip(order, caps):
            entries.append(PoolEntry(rec.messages, n, cap))
    else:
        convs = list(prompts or ())
        k = len(convs) if max_tokens.constant else max(pool_size, len(convs))
        caps = max_tokens.spread(k, 3, rng)
        for i in range(k):
            entries.append(PoolEntry(convs[i % len(convs)], None, caps[i]))
    return entries


#: scenario keys that switch a scenario to a pool of requests built here
WORKLOAD_KEYS: tuple[str, ...] = ("input_tokens", "dataset", "tokenizer", "prompt_pool", "replacement")
DEFAULT_POOL = 512


@dataclass(frozen=True, slots=True)
class Workload:
    """A scenario's request pool and how it is sampled.

    Attributes:
        entries: the distinct requests (bodies are encoded once per entry).
        replacement: the ``Picker`` mode.
        source: "synthetic", "dataset" or "prompts" (for the record).
        tokenizer: the exact tokenizer's name, or None (word-based count).
    """

    entries: tuple[PoolEntry, ...]
    replacement: bool
    source: str
    tokenizer: str | None


def uses_workload(t: Any) -> bool:
    """True when a scenario table (``_toml.Table``) uses any workload key or a
    ``max_tokens`` distribution."""
    return any(k in t.data for k in WORKLOAD_KEYS) or isinstance(t.data.get("max_tokens"), Mapping)


def parse_workload(t: Any, base: Path, seed: int, index: int,
                   prompts: Sequence[Any] | None) -> Workload:
    """Read a scenario's workload keys and build its pool.

    Args:
        t: the ``[[scenario]]`` table (``_toml.Table``: errors carry file, line, key).
        base: the profile's folder (datasets and tokenizer files are relative to it).
        seed: the run seed; ``index``: the scenario's position (each scenario
            gets its own seeded random source).
        prompts: the scenario's plain prompts when it has no ``input_tokens``
            or ``dataset`` (already read), else None.

    Raises:
        ProfileError: any bad key, distribution, dataset or tokenizer, before any load.
    """
    from ._toml import MISSING

    if "input_tokens" in t.data and "dataset" in t.data:
        raise t.error("dataset", "expected input_tokens or dataset, not both")
    if prompts is not None and ("input_tokens" in t.data or "dataset" in t.data):
        key = "input_tokens" if "input_tokens" in t.data else "dataset"
        raise t.error(key, f"expected one prompt source: prompts / prompts_file or {key}, not both")
    tokenizer: Tokenizer | None = None
    spec = t.str("tokenizer", None, nonempty=True)
    if spec is not None:
        try:
            tokenizer = load_tokenizer(spec, base)
        except ValueError as exc:
            raise t.error("tokenizer", str(exc)) from None
    pool = t.int("prompt_pool", DEFAULT_POOL, min=1, max=100_000)
    # without replacement by default: each round of picks is the whole stratified
    # pool, so the lengths sent have the requested mean without sampling noise
    replacement = t.bool("replacement", False)
    max_tokens = dist_from(t.raw("max_tokens", 256), lambda r: t.error("max_tokens", r))
    rng = random.Random(f"hopbench-workload:{seed}:{index}")
    if t.has("input_tokens"):
        dist = dist_from(t.raw("input_tokens"), lambda r: t.error("input_tokens", r))
        entries = build_pool(rng, max_tokens=max_tokens, pool_size=pool, input_dist=dist,
                             tokenizer=tokenizer)
        return Workload(tuple(entries), replacement, "synthetic", spec)
    if t.has("dataset"):
        dt = t.table("dataset")
        rel = dt.str("path", MISSING, nonempty=True)
        path = Path(rel) if Path(rel).is_absolute() else base / rel
        fmt = dt.str("format", "auto", choices=DATASET_FORMATS)
        sample = dt.int("sample", None, min=1)
        bounds = {k: dt.int(k, None, min=1) for k in
                  ("min_input_tokens", "max_input_tokens", "min_output_tokens", "max_output_tokens")}
        for lo, hi in (("min_input_tokens", "max_input_tokens"), ("min_output_tokens", "max_output_tokens")):
            if bounds[lo] is not None and bounds[hi] is not None and bounds[lo] > bounds[hi]:
                raise dt.error(lo, f"expected {lo} <= {hi}, got {bounds[lo]} > {bounds[hi]}")
        dt.done()
        ds = DatasetSpec(path, fmt, sample, **bounds)
        where = dt.key_name()

        def fail(line: int | None, reason: str) -> ProfileError:
            return ProfileError(f"{reason} (dataset of {where})", path=path, line=line)

        records = read_dataset(path, fmt, fail)
        kept = filter_records(records, ds, tokenizer)
        if not kept:
            raise dt.error(None, f"no record of {path} ({len(records)} read) passes the length filters")
        if sample is not None:
            if sample > len(kept):
                raise dt.error("sample", f"expected at most the {len(kept)} records that pass the "
                                         f"filters, got {sample}")
            kept = [kept[i] for i in sorted(rng.sample(range(len(kept)), sample))]
        entries = build_pool(rng, max_tokens=max_tokens, pool_size=pool, records=kept)
        return Workload(tuple(entries), replacement, "dataset", spec)
    convs: list[tuple[Message, ...]] = []
    for p in prompts or ():
        if isinstance(p, Mapping):  # a prompts_file line {"messages": [...]}

            def bad(line: int, reason: str) -> ProfileError:
                return t.error("prompts_file", reason)

            convs.append(_from_messages(p, 0, bad).messages)
        else:
            convs.append((Message("user", p),))
    entries = build_pool(rng, max_tokens=max_tokens, pool_size=pool, prompts=convs)
    return Workload(tuple(entries), replacement, "prompts", spec)
