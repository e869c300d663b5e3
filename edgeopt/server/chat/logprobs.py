"""Engine logprobs (token ids) -> the per-token entries OpenAI's chat, the Responses API and Ollama all return::

    [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105],
      "top_logprobs": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}, ...]}]

A token's ``token`` text is its bytes decoded as UTF-8 with replacement (a byte-level token can hold half a
character: ``bytes`` is then the exact value); a control token with no text shows its control text.
"""

from __future__ import annotations

from typing import Any

from edgeopt.engine.api import TokenLogprob
from edgeopt.runtimes.base import Tokenizer


class TokenTexts:
    """Token id -> (text, bytes), for one model's tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._controls = {token_id: text for text, token_id in tokenizer.control_token_ids().items()}

    def text(self, token_id: int) -> str:
        raw = self._tokenizer.token_bytes(token_id)
        if not raw and token_id in self._controls:
            return self._controls[token_id]
        return raw.decode("utf-8", errors="replace")

    def raw(self, token_id: int) -> list[int]:
        return list(self._tokenizer.token_bytes(token_id))

    def raw_text(self, token_id: int) -> str:
        """What the token adds to the response text ("" for a control token)."""
        return self._tokenizer.token_bytes(token_id).decode("utf-8", errors="replace")


def token_entries(entries: list[TokenLogprob], texts: TokenTexts) -> list[dict[str, Any]]:
    def item(token_id: int, logprob: float) -> dict[str, Any]:
        return {"token": texts.text(token_id), "logprob": logprob, "bytes": texts.raw(token_id)}

    return [{**item(e.token_id, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries]
