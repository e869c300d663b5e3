"""Engine logprobs (token ids) -> the two OpenAI JSON shapes.

Chat (``choices[].logprobs``)::

    {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105],
                  "top_logprobs": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}, ...]}],
     "refusal": null}

Completions (legacy)::

    {"tokens": ["Hi"], "token_logprobs": [-0.1], "top_logprobs": [{"Hi": -0.1, ...}], "text_offset": [0]}

The chat entries are the neutral ones of edgeopt.server.chat.logprobs (Responses and Ollama return them too).
"""

from __future__ import annotations

from typing import Any

from edgeopt.engine.api import TokenLogprob
from edgeopt.server.chat.logprobs import TokenTexts, token_entries


def chat_logprobs(entries: list[TokenLogprob], texts: TokenTexts) -> dict[str, Any]:
    return {"content": token_entries(entries, texts), "refusal": None}


def completion_logprobs(token_ids: list[int], entries: list[TokenLogprob | None], texts: TokenTexts,
                        text_offset: int) -> dict[str, Any]:
    """``entries[i]`` belongs to ``token_ids[i]``; ``text_offset``: where the first token's text starts in
    the choice's whole text (echo included). A None entry (the prompt's first token under echo: nothing
    predicts it) has a null logprob and null top_logprobs, as OpenAI reports it."""
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for token_id, entry in zip(token_ids, entries, strict=True):
        text = texts.text(token_id)
        tokens.append(text)
        token_logprobs.append(None if entry is None else entry.logprob)
        tops.append(None if entry is None else {texts.text(t): lp for t, lp in entry.top})
        offsets.append(text_offset)
        text_offset += len(texts.raw_text(token_id))
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}


class ChoiceLogprobs:
    """Formats one choice's logprobs output by output (streaming) or all at once, in the route's shape.

    Completions' ``text_offset`` runs on across calls: each call's tokens start where the previous ended
    (after the echoed prompt, when there is one)."""

    def __init__(self, chat: bool, texts: TokenTexts) -> None:
        self.chat = chat
        self.texts = texts
        self._offset = 0

    def format(self, token_ids: list[int], entries: list[TokenLogprob | None]) -> dict[str, Any]:
        if self.chat:
            return chat_logprobs([e for e in entries if e is not None], self.texts)
        body = completion_logprobs(token_ids, entries, self.texts, self._offset)
        self._offset += sum(len(self.texts.raw_text(t)) for t in token_ids)
        return body
