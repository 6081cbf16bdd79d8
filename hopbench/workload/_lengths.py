"""Token lengths: distributions, synthetic prompts, tokenizers (pure, seeded).

Role: the length side of a workload (docs/workloads.md). ``Dist`` is a
``fixed`` / ``normal`` / ``lognormal`` / ``uniform`` length distribution
bounded to [min, max]; ``synthetic_prompt`` makes a prompt of a requested
token length; ``load_tokenizer`` loads an optional exact tokenizer from a
local file.

Invariants:
- No clock and no I/O, except reading a tokenizer file at profile load; no
  download ever (tiktoken only from its cache).
- Everything random is drawn from a ``random.Random`` the caller seeds.
- Synthetic prompts are made of ``WORDS``: four characters each, a space and a
  common three-letter English word, each a single token in the common BPE
  vocabularies (measured for cl100k; a leading-space common word is one token
  in GPT-2 r50k and o200k too). So N words are about N tokens for a BPE model and
  exactly ceil((4N-1)/4) = N for the emulator (characters / 4). With a
  tokenizer the length is made exact for that tokenizer.
- A distribution's values lie in [min, max]: quantiles of the distribution
  truncated to [min, max] (``Dist.stratified``, ``Dist.spread``).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import stat
import statistics
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._errors import ProfileError

__all__ = ["Dist", "DIST_KINDS", "Tokenizer", "WORDS", "dist_from", "estimate_tokens",
           "load_tokenizer", "synthetic_prompt"]

DIST_KINDS: tuple[str, ...] = ("fixed", "normal", "lognormal", "uniform")

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

    ``uniform`` spreads evenly over the integers of [min, max] (``dist_from``
    turns ``mean`` ± ``stddev``·√3 into those bounds). ``lognormal``
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
            return self.min == self.max
        return self.kind == "fixed" or self.stddev == 0

    def _quantile(self, u: float) -> float:
        """The value at probability ``u`` (0 < u < 1) of the untruncated shape."""
        if self.constant:
            return self.mean
        if self.kind == "normal":
            return statistics.NormalDist(self.mean, self.stddev).inv_cdf(u)
        if self.kind == "lognormal":
            return math.exp(self._log_normal().inv_cdf(u))
        lo, hi = self._uniform_bounds()
        return lo + u * (hi - lo)

    def _log_normal(self) -> statistics.NormalDist:
        """The normal distribution of a lognormal's logarithm, from its own mean and sd:
        sigma^2 = ln(1 + cv^2), mu = ln(mean) - sigma^2 / 2 (cv = stddev / mean), with
        ln(1 + cv^2) taken as 2 ln cv + ln(1 + cv^-2) for cv > 1 (cv^2 overflows a float
        from cv ~ 1.3e154 on: an OverflowError at load)."""
        cv = self.stddev / self.mean
        sigma2 = math.log1p(cv * cv) if cv <= 1 else 2 * math.log(cv) + math.log1p(1 / (cv * cv))
        return statistics.NormalDist(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2))

    def _uniform_bounds(self) -> tuple[float, float]:
        # every integer in [min, max] gets the same share of the real line
        return float(self.min) - 0.5, float(self.max) + 0.5

    def _cdf(self, x: float) -> float:
        if self.kind == "normal":
            return statistics.NormalDist(self.mean, self.stddev).cdf(x)
        if self.kind == "lognormal":
            if x <= 0:
                return 0.0
            return self._log_normal().cdf(math.log(x))
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

#: the largest input length a profile or trace may request, tokens: 2,000,000 tokens are
#: about 8 MB of prompt text (4 characters a token), above any served model's context
#: window (1-2 M tokens at most); a larger request is a typo, and building it would
#: exhaust memory (docs/workloads.md, "Length limits")
MAX_INPUT_TOKENS = 2_000_000
#: the largest ``max_tokens`` (output cap) a profile or trace may request, tokens (as above)
MAX_OUTPUT_TOKENS = 2_000_000


#: how far (a share of ``mean``, or 0.5 token if more) min/max may move a normal's or
#: lognormal's mean by truncation before the profile is refused: the 2 % within which
#: docs/workloads.md promises the lengths sent match the profile's means
TRUNCATED_MEAN_TOLERANCE = 0.02


def dist_from(value: Any, where: Callable[[str], ProfileError], *, default_min: int = 1,
              limit: int | None = None) -> Dist:
    """A ``Dist`` from a profile value: an integer, or a table
    ``{dist, mean, stddev, min, max}``.

    Args:
        value: the parsed TOML value.
        where: builds the ProfileError (file, line, key) for a reason.
        default_min: the min when none is given.
        limit: the largest length allowed, tokens (``MAX_INPUT_TOKENS``...): a
            fixed value or a ``max`` above it is refused, and it is the ``max``
            when none is given; None: no limit.

    Raises:
        ProfileError: wrong types, an unknown key, min > max, stddev < 0, a mean
        outside [min, max], a lognormal without a positive mean, a value or
        max above ``limit``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise where(f"expected a positive integer or a distribution table, got {value}")
        if limit is not None and value > limit:
            raise where(f"expected at most {limit:,} tokens (hopbench's limit, docs/workloads.md), got {value:,}")
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
    hi = num("max", _UNBOUNDED if limit is None else limit, integer=True)
    if limit is not None and hi > limit:
        raise where(f"expected max <= {limit:,} tokens (hopbench's limit, docs/workloads.md), got {hi:,}")
    if kind == "uniform":
        if "min" in value and "max" in value:
            if "stddev" in value:
                raise where('dist = "uniform": give min and max, or mean and stddev, not both')
            mean = num("mean", (lo + hi) / 2)
            if lo <= hi and abs(mean - (lo + hi) / 2) > 0.5:
                raise where(f'dist = "uniform" over [min, max] = [{lo}, {hi}] has the mean '
                            f"{(lo + hi) / 2:g}, got mean = {mean:g}")
        elif "mean" in value and "stddev" in value:
            mean, stddev = num("mean", None), num("stddev", None)
            if stddev < 0:
                raise where(f"expected stddev >= 0, got {stddev:g}")
            half = round(stddev * math.sqrt(3))  # a uniform's sd is its half-width / sqrt(3)
            lo, hi = max(lo, round(mean) - half), min(hi, round(mean) + half)
        else:
            raise where('dist = "uniform" needs min and max, or mean and stddev')
        d = Dist("uniform", (lo + hi) / 2, (hi - lo) / math.sqrt(12), lo, hi) if lo <= hi else None
        problem = d.problem() if d is not None else f"expected min <= max, got min = {lo} > max = {hi}"
        if problem is None and d is not None and abs(d.mean - mean) > 0.5:
            problem = (f"mean ± stddev·√3 is cut by min/max to [{lo}, {hi}], whose mean is "
                       f"{d.mean:g}, not {mean:g}")
        if problem or d is None:
            raise where(problem or "")
        return d
    else:
        if "mean" not in value:
            raise where(f'dist = "{kind}" needs a mean')
        mean = num("mean", None)
    stddev = num("stddev", 0.0)
    if kind == "fixed" and stddev != 0:
        raise where(f'dist = "fixed" sends exactly mean tokens: stddev = {stddev:g} would be ignored '
                    '(use dist = "normal" for a spread, or drop stddev)')
    if kind in ("normal", "lognormal") and "stddev" not in value:
        raise where(f'dist = "{kind}" needs a stddev')
    d = Dist(kind, float(mean), float(stddev), lo, hi)
    problem = d.problem()
    if problem is None and kind == "lognormal" and mean <= 0:
        problem = f"expected a positive mean for a lognormal, got {mean:g}"
    if problem is None and kind == "fixed" and (mean != int(mean)):
        problem = f"expected an integer mean for dist = \"fixed\", got {mean:g}"
    if problem is None and not d.constant:  # as for uniform: min/max may not move the mean
        # (a heavy cut, mean 10 and stddev 1,000 above min = 1, sent a mean of 800 and
        # reported it as requested: ratio 1.000); the truncated mean on a fine quantile grid
        mass = d._cdf(hi + 0.5) - d._cdf(lo - 0.5)
        got = statistics.fmean(d.stratified(8192, random.Random(0))) if mass > 0 else None
        if got is None or abs(got - mean) > max(0.5, TRUNCATED_MEAN_TOLERANCE * mean):
            cut = ("would hold none of it" if got is None else
                   f"has the mean {got:.4g}, not {mean:g} (more than {TRUNCATED_MEAN_TOLERANCE:.0%} off)")
            problem = (f"the {kind} of mean {mean:g} and stddev {stddev:g} cut to [min, max] = [{lo:,}, {hi:,}] "
                       f"{cut}: widen min/max or lower the stddev")
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
        cached, or the file is missing, not a regular file (``/dev/zero``, a
        directory), unreadable or not a tokenizer.json (the message says which,
        with the path, and how to fix).
    """
    if spec.startswith("tiktoken:"):
        name = spec.split(":", 1)[1]
        if name not in _TIKTOKEN_URLS:
            raise ValueError(f"expected tiktoken:<one of {', '.join(_TIKTOKEN_URLS)}>, got {spec!r}")
        try:
            import tiktoken  # type: ignore[import-not-found,unused-ignore]  # optional
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
        from tokenizers import Tokenizer as HFTokenizer  # type: ignore[import-not-found,unused-ignore]  # optional
    except ImportError:
        raise ValueError(f"{spec}: the optional package tokenizers is not installed "
                         "(pip install tokenizers)") from None
    _check_tokenizer_file(spec, path)
    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception subclass
        raise ValueError(f"{spec}: {path} is not a tokenizer.json: {exc}") from None
    return Tokenizer(spec, lambda text: len(tok.encode(text, add_special_tokens=False).ids))


#: (test, name) of the file kinds that are not regular files, for the message
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def _check_tokenizer_file(spec: str, path: Path) -> None:
    """Say what is wrong with a tokenizer path before the tokenizers package reads it
    (reading ``/dev/zero`` would never end; a FIFO would wait for a writer).

    Raises:
        ValueError: no such file; not a regular file (which kind: a directory, a
        character device, ...); or it cannot be opened (the OS's reason), with the path.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ValueError(f"{spec}: no such tokenizer file {path}") from None
    except OSError as exc:
        raise ValueError(f"{spec}: cannot read the tokenizer file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise ValueError(f"{spec}: {path} is not a regular file ({kind}): expected a Hugging Face "
                         "tokenizer.json file")
    try:
        open(path, "rb").close()
    except OSError as exc:
        raise ValueError(f"{spec}: cannot read the tokenizer file {path}: {exc.strerror}") from None


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
