"""One choice's text and logprobs, output by output: the echoed prompt first (completions' ``echo``),
then the generated text, each with its logprobs in the route's shape (edgeopt.server.openai.logprobs)."""

from __future__ import annotations

from typing import Any

from edgeopt.engine.api import RequestOutput, TokenLogprob
from edgeopt.server.openai.chat_output import ChatOutput
from edgeopt.server.openai.format import ResponseShape
from edgeopt.server.openai.logprobs import ChoiceLogprobs, TokenTexts
from edgeopt.server.state import ServedModel


class ChoiceFormat:
    def __init__(self, shape: ResponseShape, served: ServedModel, prompt_ids: list[int], echo: bool,
                 logprobs: bool, prompt_text: str | None = None, output: ChatOutput | None = None,
                 prompt_only: bool = False) -> None:
        """``prompt_only``: the request scores its prompt and asks for no output (completions' max_tokens=0
        with echo): the engine still samples one token, which is left out of the text, logprobs and usage."""
        self.shape = shape
        self.prompt_only = prompt_only
        self.output = output  # a chat with tools or thinking: the text is read for calls and reasoning
        self.prompt_ids = prompt_ids
        self._echo = echo
        self._texts = TokenTexts(served.tokenizer)
        # The prompt as the client sent it; a prompt of token ids is echoed as those tokens' text.
        self._prompt_text = prompt_text
        self._logprobs = ChoiceLogprobs(shape.chat, self._texts) if logprobs else None

    def content(self, out: RequestOutput, first: bool) -> tuple[str, dict[str, Any] | None]:
        """``out``'s text and logprobs (None when the request did not ask); ``first``: the first output
        of the choice, which carries the echoed prompt."""
        text = "" if self.prompt_only else out.text
        ids: list[int] = []
        entries: list[TokenLogprob | None] = []
        if first and self._echo:
            text = self._echo_text() + text
            if out.prompt_logprobs is not None:
                ids, entries = list(self.prompt_ids), list(out.prompt_logprobs)
        if self._logprobs is None:
            return text, None
        generated = [] if self.prompt_only else out.logprobs or []
        ids += [entry.token_id for entry in generated]
        entries += generated
        return text, self._logprobs.format(ids, entries)

    def completion_tokens(self, out: RequestOutput) -> int:
        return 0 if self.prompt_only else out.completion_tokens

    def _echo_text(self) -> str:
        if self._prompt_text is not None:
            return self._prompt_text
        return "".join(self._texts.raw_text(t) for t in self.prompt_ids)
