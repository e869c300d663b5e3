"""What a request's stream yields: one increment of its output, and one token's log-probability.

Below both the stream (:mod:`edgeopt.engine.stream`) and the engine's public surface
(:mod:`edgeopt.engine.api`, which names these types too), so neither has to import the other's module
to name them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability and the ``top`` most likely tokens at its position (best first)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class RequestOutput:
    """One increment of a request's stream; the last one has ``finished=True``."""

    request_id: str
    text: str  # new text since the previous output (UTF-8 safe: never half a character)
    token_ids: list[int]  # new token ids since the previous output
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error" (the runtime failed)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None  # with finish_reason="error": what the runtime raised
    cached_tokens: int = 0  # prompt tokens the prefix cache served when the request was first admitted
    logprobs: list[TokenLogprob] | None = None  # one per token_ids entry, when the request asked
    prompt_logprobs: list[TokenLogprob | None] | None = None  # first output only: one per prompt token
    stop_string: str | None = None  # with finish_reason="stop": the stop string that ended it (None: an end token)

    @classmethod
    def merge(cls, outputs: list[RequestOutput]) -> RequestOutput:
        """A whole request's outputs as one (non-streaming responses): texts, ids and logprobs joined."""
        last = outputs[-1]
        logprobs = None if last.logprobs is None else [lp for out in outputs for lp in out.logprobs or ()]
        return cls(last.request_id, "".join(out.text for out in outputs),
                   [t for out in outputs for t in out.token_ids], finished=last.finished,
                   finish_reason=last.finish_reason, prompt_tokens=last.prompt_tokens,
                   completion_tokens=last.completion_tokens, error=last.error, cached_tokens=last.cached_tokens,
                   logprobs=logprobs, prompt_logprobs=outputs[0].prompt_logprobs, stop_string=last.stop_string)
