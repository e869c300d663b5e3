"""Check a request before it is queued: every refusal names the value and the fix (OpenAI-style 400)."""

from __future__ import annotations

from edgeopt.engine.api import SamplingParams
from edgeopt.errors import ContextOverflowError, RequestError

MAX_STOP_STRINGS = 16


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
    _validate_sampling(params, vocab_size)


def _validate_sampling(params: SamplingParams, vocab_size: int) -> None:
    checks = [
        (params.temperature >= 0, "temperature", params.temperature, "must be >= 0 (0 is greedy)"),
        (0 < params.top_p <= 1, "top_p", params.top_p, "must be in (0, 1]"),
        (params.top_k >= 0, "top_k", params.top_k, "must be >= 0 (0 disables)"),
        (0 <= params.min_p <= 1, "min_p", params.min_p, "must be in [0, 1]"),
        (params.repetition_penalty > 0, "repetition_penalty", params.repetition_penalty, "must be > 0"),
        (-2 <= params.presence_penalty <= 2, "presence_penalty", params.presence_penalty, "must be in [-2, 2]"),
        (-2 <= params.frequency_penalty <= 2, "frequency_penalty", params.frequency_penalty, "must be in [-2, 2]"),
        (len(params.stop) <= MAX_STOP_STRINGS, "stop", len(params.stop), f"at most {MAX_STOP_STRINGS} strings"),
        (all(isinstance(s, str) and s for s in params.stop), "stop", params.stop, "stop strings must be non-empty"),
    ]
    for ok, name, value, rule in checks:
        if not ok:
            raise RequestError(f"{name}={value!r} is invalid", rule, param=name)
    for token, bias in params.logit_bias.items():
        if not 0 <= int(token) < vocab_size:
            raise RequestError(f"logit_bias token id {token} is outside the vocabulary (0..{vocab_size - 1})",
                               "use this model's token ids", param="logit_bias")
        if not -100 <= bias <= 100:
            raise RequestError(f"logit_bias[{token}]={bias} is invalid", "biases must be in [-100, 100]",
                               param="logit_bias")
    for token in params.stop_token_ids:
        if not 0 <= token < vocab_size:
            raise RequestError(f"stop_token_ids entry {token} is outside the vocabulary (0..{vocab_size - 1})",
                               "use this model's token ids", param="stop_token_ids")
