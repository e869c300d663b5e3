"""The limits and sampling the engine takes: how many tokens the reply may have, and SamplingParams.

Context checks happen here, before the request is queued, so the client hears both numbers:
"prompt is 5120 tokens, longer than the context of 4096 tokens".
"""

from __future__ import annotations

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.grammar import Grammar
from edgeopt.engine.validation import parse_logit_bias
from edgeopt.errors import ContextOverflowError
from edgeopt.server.chat.request import FieldNames, Sampling


def engine_params(sampling: Sampling, requested: int | None, prompt_len: int, served_context: int, vocab_size: int,
                  names: FieldNames, default: int | None = None, grammar: Grammar | None = None,
                  logprobs: int | None = None, prompt_logprobs: int | None = None) -> SamplingParams:
    """The output's size (the request's limit, else ``default``, within what the context leaves) and the
    engine's parameters for it."""
    max_tokens = output_budget(requested, prompt_len, served_context, default, prompt_param=names.prompt,
                               output_param=names.output_limit)
    return sampling_params(sampling, max_tokens, vocab_size, grammar, logprobs, prompt_logprobs)


def output_budget(requested: int | None, prompt_len: int, context: int, default: int | None,
                  prompt_param: str, output_param: str = "max_tokens") -> int:
    """max_tokens to use: the request's, or a default that fits what the context leaves after the prompt.
    ``prompt_param`` / ``output_param``: the request's names of the prompt and of its output limit."""
    if prompt_len >= context:
        raise ContextOverflowError(f"prompt is {prompt_len} tokens, longer than the context of {context} tokens "
                                   "(it must leave room for at least one generated token)",
                                   "shorten the prompt or restart the server with a larger --context",
                                   param=prompt_param)
    room = context - prompt_len
    if requested is None:
        return room if default is None else min(default, room)
    if requested > room:
        raise ContextOverflowError(f"prompt ({prompt_len} tokens) + {output_param} ({requested}) = "
                                   f"{prompt_len + requested} tokens exceeds the context of {context} tokens",
                                   f"ask for at most {output_param}={room}, or shorten the prompt",
                                   param=output_param)
    return requested


def sampling_params(sampling: Sampling, max_tokens: int, vocab_size: int, grammar: Grammar | None = None,
                    logprobs: int | None = None, prompt_logprobs: int | None = None) -> SamplingParams:
    """The engine's parameters, parsed but not range-checked: ``Engine.add_request`` validates them once
    (edgeopt.engine.validation), before anything is queued, with the same messages for every caller.
    ``grammar``: the compiled output format (or tool-call) constraint; ``logprobs`` / ``prompt_logprobs``:
    how many alternatives per generated / prompt token (None: none asked)."""
    return SamplingParams(
        max_tokens=max_tokens, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
        min_p=sampling.min_p, seed=sampling.seed, repetition_penalty=sampling.repetition_penalty,
        presence_penalty=sampling.presence_penalty, frequency_penalty=sampling.frequency_penalty,
        logit_bias=parse_logit_bias(dict(sampling.logit_bias or {}), vocab_size), stop=list(sampling.stop),
        stop_token_ids=list(sampling.stop_token_ids), ignore_eos=sampling.ignore_eos, grammar=grammar,
        logprobs=logprobs, prompt_logprobs=prompt_logprobs,
    )
