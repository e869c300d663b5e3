"""Check a request before it is queued: every refusal names the value and the fix (OpenAI-style 400).

The accepted ranges live here, once, and are applied once, by ``Engine.add_request``: the server's schemas
only parse types and the chat core only converts, so a value is refused with the same message whoever calls
the engine (the HTTP routes, a benchmark, a test). The policy is *refuse, never clamp*: a value outside its
range, NaN or +-Infinity is a 400 naming the parameter and the range; a value inside it is honoured
exactly (the sampler is numerically safe at every in-range value, e.g. temperature=5e-324 is computed
as the greedy limit it is, not as inf/NaN).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.logprobs import MAX_TOP_LOGPROBS
from edgeopt.errors import ContextOverflowError, RequestError
from edgeopt.runtimes.base import RuntimeInfo

# OpenAI's limit, the one limit (the schema only parses types): a client written against OpenAI never sends
# more, and each stop string costs a scan of every new piece of text on the engine thread.
MAX_STOP_STRINGS = 4
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LOGIT_BIAS_LIMIT = 100.0
_MAX_TOKEN_ID_DIGITS = 18  # longer ASCII-digit keys are outside any vocabulary (and int() of 5000 digits raises)


@dataclass(frozen=True)
class FloatRange:
    low: float
    high: float
    low_open: bool = False  # (low, high] instead of [low, high]
    note: str = ""

    def contains(self, value: float) -> bool:  # False for NaN: every comparison with NaN is False
        above_low = value > self.low if self.low_open else value >= self.low
        return above_low and value <= self.high

    def rule(self) -> str:
        return f"must be a number in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]{self.note}"


SAMPLING_RANGES: dict[str, FloatRange] = {
    "temperature": FloatRange(0.0, 2.0, note=" (0 is greedy)"),
    "top_p": FloatRange(0.0, 1.0, low_open=True),
    "min_p": FloatRange(0.0, 1.0),
    # Below 0.01 a penalty multiplies seen tokens' logits by > 100: no longer a penalty, only overflow.
    "repetition_penalty": FloatRange(0.01, 100.0, note=" (1 disables; below 1 favours repetition)"),
    "presence_penalty": FloatRange(-2.0, 2.0),
    "frequency_penalty": FloatRange(-2.0, 2.0),
}


def checked_params(prompt_ids: list[int], params: SamplingParams, info: RuntimeInfo,
                   context_tokens: int) -> SamplingParams:
    """What ``Engine.add_request`` queues: ``params`` with logit_bias as int token ids and float biases, after
    every check below (the request's ranges, then what this runtime can compute)."""
    params = dataclasses.replace(params, logit_bias={int(k): float(v) for k, v in params.logit_bias.items()})
    validate_request(prompt_ids, params, info.vocab_size, context_tokens)
    check_runtime_supports(params, info)
    return params


def validate_request(prompt_ids: list[int], params: SamplingParams, vocab_size: int, context_tokens: int) -> None:
    if not prompt_ids:
        raise RequestError("the prompt is empty (0 tokens)", "send at least one token of prompt", param="prompt")
    bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
    if bad:
        raise RequestError(f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})",
                           "tokenize with this model's tokenizer", param="prompt")
    if params.max_tokens < 1:
        raise RequestError(f"max_tokens={params.max_tokens} must be >= 1", "ask for at least one token",
                           param="max_tokens")
    if len(prompt_ids) + params.max_tokens > context_tokens:
        raise ContextOverflowError(
            f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the context "
            f"({context_tokens} tokens)",
            "shorten the prompt or lower max_tokens", param="max_tokens")
    validate_sampling(params, vocab_size)


def bounded_floats(params: SamplingParams) -> dict[str, float]:
    """The parameters SAMPLING_RANGES bounds, by name, read as typed fields (a renamed field fails type
    checking here instead of a lookup by string at run time); tests/engine/test_validation.py checks the
    two name sets agree."""
    return {"temperature": params.temperature, "top_p": params.top_p, "min_p": params.min_p,
            "repetition_penalty": params.repetition_penalty, "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty}


def validate_sampling(params: SamplingParams, vocab_size: int) -> None:
    """Every sampling parameter inside its range (SAMPLING_RANGES and the integer rules below)."""
    for name, value in bounded_floats(params).items():
        allowed = SAMPLING_RANGES[name]
        if not allowed.contains(value):
            raise RequestError(f"{name}={value!r} is invalid", allowed.rule(), param=name)
    checks = [
        (params.top_k >= 0, "top_k", params.top_k, "must be >= 0 (0 disables)"),
        (params.seed is None or INT64_MIN <= params.seed <= INT64_MAX, "seed", params.seed,
         f"must be a 64-bit signed integer ({INT64_MIN}..{INT64_MAX}) or null"),
        (len(params.stop) <= MAX_STOP_STRINGS, "stop", len(params.stop), f"at most {MAX_STOP_STRINGS} strings"),
        (all(isinstance(s, str) and s for s in params.stop), "stop", params.stop, "stop strings must be non-empty"),
    ]
    for ok, name, value, rule in checks:
        if not ok:
            raise RequestError(f"{name}={value!r} is invalid", rule, param=name)
    for token, bias in params.logit_bias.items():
        _check_token_id(token, vocab_size, "logit_bias")
        if not -LOGIT_BIAS_LIMIT <= bias <= LOGIT_BIAS_LIMIT:
            raise RequestError(f"logit_bias[{token}]={bias} is invalid",
                               f"biases must be numbers in [-{LOGIT_BIAS_LIMIT:g}, {LOGIT_BIAS_LIMIT:g}]",
                               param="logit_bias")
    for token in params.stop_token_ids:
        _check_token_id(token, vocab_size, "stop_token_ids")
    check_logprob_count(params.logprobs, "logprobs")
    check_logprob_count(params.prompt_logprobs, "logprobs")
    if params.grammar is not None and params.grammar.vocab_size != vocab_size:
        raise RequestError(f"the grammar was compiled for a {params.grammar.vocab_size}-token vocabulary, not this "
                           f"model's {vocab_size}", "compile it with this model's GrammarCompiler",
                           param=params.grammar.spec.param)


def check_logprob_count(count: int | None, param: str) -> None:
    if count is not None and not 0 <= count <= MAX_TOP_LOGPROBS:
        raise RequestError(f"{param}={count} is invalid", f"must be an integer in 0..{MAX_TOP_LOGPROBS}", param=param)


def chat_logprob_count(logprobs: bool, top_logprobs: int | None) -> int | None:
    """Chat's two fields as the engine's one: None (no logprobs) or how many alternatives per token."""
    if top_logprobs is not None and not logprobs:
        raise RequestError(f"top_logprobs={top_logprobs} was sent without logprobs=true",
                           "set logprobs=true to receive logprobs, or drop top_logprobs", param="top_logprobs")
    check_logprob_count(top_logprobs, "top_logprobs")
    return (top_logprobs or 0) if logprobs else None


def parse_logit_bias(raw: dict[str, float], vocab_size: int) -> dict[int, float]:
    """OpenAI's logit_bias has string keys; each must be a token id in ASCII digits ("1234").

    ``str.isdigit`` alone would accept "١٢" (Arabic-Indic digits, which ``int`` reads as 12): refused, so a
    key means the same token id to every client and proxy."""
    parsed: dict[int, float] = {}
    for key, bias in raw.items():
        if not (key.isascii() and key.isdigit()):
            raise RequestError(f"logit_bias key {key!r} is not a token id",
                               'keys are token ids written in ASCII digits, e.g. {"1234": -100}', param="logit_bias")
        if len(key) > _MAX_TOKEN_ID_DIGITS:
            raise RequestError(f"logit_bias token id {key[:24]}... is outside the vocabulary (0..{vocab_size - 1})",
                               "use this model's token ids", param="logit_bias")
        parsed[int(key)] = bias
    return parsed


def _check_token_id(token: int, vocab_size: int, param: str) -> None:
    if not 0 <= token < vocab_size:
        raise RequestError(f"{param} token id {token} is outside the vocabulary (0..{vocab_size - 1})",
                           "use this model's token ids", param=param)


def check_runtime_supports(params: SamplingParams, info: RuntimeInfo) -> None:
    """Refuse what this runtime cannot compute, rather than answer without it."""
    if params.prompt_logprobs is not None and not info.position_logits:
        raise RequestError("echo with logprobs needs the logits of every prompt position, which this model's "
                           "runtime does not return", "drop echo or logprobs", param="echo")
