"""Per-request output state: detokenizer, stop-string matcher, stop conditions, RequestOutput building."""

from __future__ import annotations

from edgeopt.engine.api import RequestOutput, TokenLogprob
from edgeopt.engine.detokenizer import IncrementalDetokenizer
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.stop_strings import StopStringMatcher
from edgeopt.engine.stream import RequestStream
from edgeopt.runtimes.base import Tokenizer


def describe_failure(exc: BaseException) -> str:
    """The ``error`` text of a request that an exception ended (both engines, and /health, show it)."""
    return f"{type(exc).__name__}: {exc}"


def engine_stopped_message(failure: str | None) -> str:
    """Why an engine whose thread is gone takes no request (its ``failure``, when it recorded one)."""
    return f"the engine thread is not running ({failure or 'it stopped'})"


class RequestTracker:
    def __init__(self, seq: Sequence, stream: RequestStream, tokenizer: Tokenizer,
                 eos_token_ids: frozenset[int]) -> None:
        self.seq = seq
        self.stream = stream
        params = seq.params
        self._stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else eos_token_ids)
        self._detok = IncrementalDetokenizer(tokenizer)
        self._stops = StopStringMatcher(params.stop)
        self._prompt_logprobs_sent = False

    def on_token(self, token: int, context_tokens: int, logprob: TokenLogprob | None = None) -> RequestOutput:
        """The sequence just produced ``token`` (already appended); the delta, final if it ended. A grammar
        (constrained decoding) is advanced first: once it takes no further token the output is done ("stop")."""
        seq = self.seq
        grammar_complete = False
        if seq.constraint is not None:
            seq.constraint.advance(token)  # raises if the token broke the grammar: the engine fails the request
            grammar_complete = seq.constraint.is_finished
        if token in self._stop_ids:
            return self._output(self._flush(), [token], "stop")  # an end token is not text (nor a logprob)
        logprobs = [logprob] if logprob is not None else None
        text = self._stops.feed(self._detok.add(token))
        if self._stops.stopped:
            out = self._output(text, [token], "stop", logprobs)
            out.stop_string = self._stops.matched
            return out
        if grammar_complete:
            return self._output(text + self._flush(), [token], "stop", logprobs)
        if len(seq.output_ids) >= seq.params.max_tokens or seq.num_tokens >= context_tokens:
            return self._output(text + self._flush(), [token], "length", logprobs)
        return self._output(text, [token], None, logprobs)

    def final_output(self, reason: str, error: str | None = None) -> RequestOutput:
        """End without a new token (abort, runtime error): held-back partial text is dropped."""
        out = self._output("", [], reason)
        out.error = error
        return out

    def _flush(self) -> str:
        return self._stops.feed(self._detok.flush()) + self._stops.flush()

    def _output(self, text: str, token_ids: list[int], finish_reason: str | None,
                logprobs: list[TokenLogprob] | None = None) -> RequestOutput:
        prompt_logprobs = None
        if not self._prompt_logprobs_sent and not self.seq.wants_position_logits:
            prompt_logprobs, self._prompt_logprobs_sent = self.seq.prompt_logprobs, True  # the first output
        return RequestOutput(
            request_id=self.seq.request_id, text=text, token_ids=token_ids,
            finished=finish_reason is not None, finish_reason=finish_reason,
            prompt_tokens=len(self.seq.prompt_ids), completion_tokens=len(self.seq.output_ids),
            cached_tokens=self.seq.cached_prompt_tokens or 0,
            logprobs=logprobs if logprobs is not None or self.seq.params.logprobs is None else [],
            prompt_logprobs=prompt_logprobs,
        )
