"""What one request will get: a pure, seeded plan (no clock, no I/O).

Role: from a model's ``Behaviour``, the request's essentials and a request-local
``random.Random``, decide the fault, the timeline (think time + TTFT, the
inter-token gaps) and the tokens. ``_app`` then only carries the plan out.

Invariants:
- One token is one content delta event: each carries exactly one vocabulary
  entry, an ASCII word or one to three Chinese characters (multi-byte UTF-8,
  so that network reads split characters). Reasoning and tool-argument deltas
  are tokens too; usage ``output_tokens`` equals the content deltas sent by a
  completed stream.
- The plan depends only on (behaviour, request essentials, rng): the same seed
  and request order give the same plans.
- ``max_tokens`` caps the total; a capped plan finishes with reason "length".
- ``ignore_eos`` (vLLM / SGLang sampling parameter) makes the total exactly
  ``max_tokens``; ``min_tokens`` (vLLM) raises it to at least that many. The
  random draws are the same either way: only the count changes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._config import Behaviour

__all__ = ["Plan", "plan_request", "input_tokens_of", "prompt_parts", "VOCABULARY", "request_rng"]

Protocol = Literal["chat", "responses", "messages"]
Finish = Literal["stop", "length", "tool_calls"]

#: Text tokens: ASCII words with a leading space and Chinese words (3 bytes per character).
VOCABULARY: tuple[str, ...] = (
    " the", " stream", " gateway", " token", " model", " latency", " of", " and", " is",
    " a", " load", " test", ",", ".", " hop", " bench", " 42", " SSE",
    "串流", "輸出", "模型", "網關", "延遲", "測試", "你好", "。", "，", "字",
    "事件", "保活", "計費", "用量", "是", "的",
)
_REASONING: tuple[str, ...] = (
    " Let", " me", " think", " about", " it", " first", ".", "思考", "推理", "步驟", "，",
)
_TOOL_ARGS_TEXT = '{"query": "串流 latency", "limit": 10, "lang": "zh-TW"}'


@dataclass(frozen=True, slots=True)
class Plan:
    """The behaviour decided for one request.

    Attributes:
        fault: the injected fault name, or None.
        error_code: the mid-stream error code (midstream_error), else None.
        status: the HTTP status (200, or 429/500/503 for HTTP faults).
        slow_headers_ns: delay before the response headers, in ns.
        first_ns: delay from request received to the first content delta, in ns
            (slow headers + think time + sampled TTFT).
        gaps_ns: delay between content delta i and i+1, in ns; len = tokens - 1.
        reasoning: reasoning delta texts, sent first.
        text: text delta texts, sent next.
        tool_args: tool-call argument pieces, sent last (empty: no tool call).
        tool_name: the called tool's name ("" when no tool call).
        finish: "stop", "length" (max_tokens cut it) or "tool_calls".
        fault_at: index of the content delta before which a mid-stream fault strikes
            (== number of deltas sent before it).
        stall_ns: stall length in ns (stall fault), else 0.
    """

    fault: str | None
    error_code: str | None
    status: int
    slow_headers_ns: int
    first_ns: int
    gaps_ns: tuple[int, ...]
    reasoning: tuple[str, ...]
    text: tuple[str, ...]
    tool_args: tuple[str, ...]
    tool_name: str
    finish: Finish
    fault_at: int
    stall_ns: int

    @property
    def n_tokens(self) -> int:
        """Content deltas in the plan (reasoning + text + tool arguments)."""
        return len(self.reasoning) + len(self.text) + len(self.tool_args)


def request_rng(seed: int, index: int) -> random.Random:
    """The random source of request number ``index`` (0-based, arrival order)."""
    return random.Random(seed * 1_000_003 + index)


def _text_of(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for item in value:
            _text_of(item, out)
    elif isinstance(value, dict):
        for key in ("content", "text", "input", "system"):
            if key in value:
                _text_of(value[key], out)


def prompt_parts(body: dict[str, Any]) -> list[str]:
    """The prompt's strings in order: ``system`` (messages), ``instructions``
    (responses), ``messages`` (chat, messages), ``input`` (responses); every
    string under ``content``/``text``. Returns a list, possibly empty."""
    parts: list[str] = []
    for key in ("system", "instructions", "messages", "input"):
        if key in body:
            v = body[key]
            _text_of(v if not isinstance(v, dict) else [v], parts)
    return parts


def input_tokens_of(body: dict[str, Any], parts: list[str] | None = None,
                    count: Callable[[str], int] | None = None) -> int:
    """Input tokens of a request body, at least 1.

    Counts the strings of ``prompt_parts(body)`` (or ``parts`` when given):
    their characters / 4 rounded up, or, with ``count`` (the config's
    ``tokenizer``), the sum of ``count(part)`` over the parts (each message's
    text tokenized on its own, no chat template, as hopbench's client counts it).
    """
    if parts is None:
        parts = prompt_parts(body)
    if count is not None:
        return max(1, sum(count(p) for p in parts))
    chars = sum(len(p) for p in parts)
    return max(1, math.ceil(chars / 4))


def prefill_ns(b: Behaviour, tokens: int) -> int:
    """Prefill time of ``tokens`` prompt tokens at ``b.prefill_tokens_per_s``, in ns
    (0 when the rate is 0 or there is nothing to prefill)."""
    rate = b.prefill_tokens_per_s
    if rate <= 0 or tokens <= 0:
        return 0
    return int(round(tokens * 1e9 / rate))


def _ms_ns(ms: float) -> int:
    return int(round(ms * 1e6))


def _sample_ttft_ns(b: Behaviour, rng: random.Random) -> int:
    mean, jitter = b.ttft_ms, b.ttft_jitter_ms
    if b.ttft_distribution == "exponential":
        v = rng.expovariate(1.0 / mean) if mean > 0 else 0.0
    elif jitter <= 0:
        v = mean
    elif b.ttft_distribution == "uniform":
        v = rng.uniform(mean - jitter, mean + jitter)
    elif b.ttft_distribution == "normal":
        v = rng.gauss(mean, jitter)
    else:  # lognormal with the given mean and standard deviation
        if mean <= 0:
            v = 0.0
        else:
            sigma2 = math.log(1 + (jitter / mean) ** 2)
            v = rng.lognormvariate(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))
    return _ms_ns(max(0.0, v))


def _draw_fault(b: Behaviour, rng: random.Random, protocol: Protocol, stream: bool) -> str | None:
    """One uniform draw walked over the cumulative fault probabilities.

    Faults that cannot apply to this request (mid-stream faults on a non-streaming
    request, ``omit_done`` outside chat) draw as no fault, so the draw count and
    hence every later request's behaviour stay the same.
    """
    u = rng.random()
    acc = 0.0
    for name, p in b.faults.probabilities():
        acc += p
        if u < acc:
            if not stream and name in ("midstream_error", "disconnect", "stall", "omit_done"):
                return None
            if name == "omit_done" and protocol != "chat":
                return None
            return name
    return None


def plan_request(
    b: Behaviour,
    rng: random.Random,
    *,
    protocol: Protocol,
    stream: bool,
    max_tokens: int | None,
    tool_name: str | None,
    ignore_eos: bool = False,
    min_tokens: int = 0,
    prefill_tokens: int = 0,
) -> Plan:
    """Decide one request's behaviour.

    Args:
        b: the model's behaviour.
        rng: the request's random source (``request_rng``); drawn in a fixed order.
        protocol: which endpoint was called.
        stream: the request's ``stream`` flag.
        max_tokens: the request's output cap (``max_tokens``, ``max_completion_tokens``,
            ``max_output_tokens``), or None.
        tool_name: the first tool the request offers, or None.
        ignore_eos: the request's ``ignore_eos`` flag: produce exactly
            ``max_tokens`` tokens (when it is given) instead of the model's
            ``output_tokens``, as vLLM does.
        min_tokens: the request's ``min_tokens`` (vLLM): produce at least this
            many (still capped by ``max_tokens``).
        prefill_tokens: prompt tokens to process before the first token (the
            input less what the prefix cache held): with
            ``b.prefill_tokens_per_s`` > 0 they add ``prefill_tokens / rate`` s
            to the first token's delay (no random draw: other draws unchanged).

    Returns:
        The plan. Never raises.
    """
    fault = _draw_fault(b, rng, protocol, stream)
    code_pick = rng.choice(b.faults.midstream_codes)
    ttft_ns = _sample_ttft_ns(b, rng)
    n = b.output_tokens
    if b.output_tokens_jitter:
        n = max(0, n + rng.randint(-b.output_tokens_jitter, b.output_tokens_jitter))
    if ignore_eos and max_tokens is not None:
        n = max(0, max_tokens)
    elif min_tokens > n:
        n = min_tokens
    wants_tool = tool_name is not None and rng.random() < b.tool_call_probability
    n_reason = min(b.reasoning_tokens, n)
    n_tool = min(b.tool_call_tokens, n - n_reason) if wants_tool else 0
    n_text = n - n_reason - n_tool
    reasoning = [rng.choice(_REASONING) for _ in range(n_reason)]
    text = [rng.choice(VOCABULARY) for _ in range(n_text)]
    tool_args: list[str] = []
    if n_tool:
        step = math.ceil(len(_TOOL_ARGS_TEXT) / n_tool)
        tool_args = [_TOOL_ARGS_TEXT[i:i + step] for i in range(0, len(_TOOL_ARGS_TEXT), step)]
        tool_args += [" "] * (n_tool - len(tool_args))  # whitespace pads valid JSON
    finish: Finish = "tool_calls" if tool_args else "stop"
    total = len(reasoning) + len(text) + len(tool_args)
    if max_tokens is not None and total > max_tokens:
        keep = max(0, max_tokens)
        reasoning = reasoning[:keep]
        text = text[: max(0, keep - len(reasoning))]
        tool_args = tool_args[: max(0, keep - len(reasoning) - len(text))]
        finish = "length"
        total = keep
    elif ignore_eos and max_tokens is not None and not tool_args:
        finish = "length"  # vLLM: with ignore_eos only max_tokens ends the output, a "length" stop
    gap = b.gap_ns
    jitter_ns = _ms_ns(b.token_jitter_ms)
    if jitter_ns:
        gaps = tuple(max(0, gap + int(rng.uniform(-jitter_ns, jitter_ns)))
                     for _ in range(max(0, total - 1)))
    else:
        gaps = (gap,) * max(0, total - 1)
    status = {"http_429": 429, "http_500": 500, "http_503": 503}.get(fault or "", 200)
    slow_ns = _ms_ns(b.faults.slow_headers_ms) if fault == "slow_headers" else 0
    return Plan(
        fault=fault,
        error_code=code_pick if fault == "midstream_error" else None,
        status=status,
        slow_headers_ns=slow_ns,
        first_ns=slow_ns + _ms_ns(b.think_time_ms) + ttft_ns + prefill_ns(b, prefill_tokens),
        gaps_ns=gaps,
        reasoning=tuple(reasoning),
        text=tuple(text),
        tool_args=tuple(tool_args),
        tool_name=(tool_name or "") if tool_args else "",
        finish=finish,
        fault_at=min(b.faults.fault_after_tokens, total),
        stall_ns=int(round(b.faults.stall_s * 1e9)) if fault == "stall" else 0,
    )
