"""Find the text of control tokens (``<|im_start|>``, ``<|eot_id|>``, ``<s>``) inside a string, in one pass.

Tokenizers that "parse special tokens" turn such text into the control token; the server must know where
it occurs to keep it out of message contents, and the llama.cpp tokenizer splits on it itself (llama.cpp's
own splitting is quadratic in the number of occurrences). At each position the longest control text wins,
so ``<|im_start|>`` beats a shorter token that is its prefix; the scan is linear in the text.

Not one regex alternation of every text: Gemma 3 has 6,400 control texts (``<unused0>``...), which Python's
``re`` took 0.8 s to compile on every model load, and then tried one by one at every ``<``. Here a
character class finds where a control text may start, and a set lookup per distinct text length (a few
dozen) decides; the matches are the same as the alternation's (leftmost, then longest).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ControlMatch:
    start: int
    end: int
    text: str


class ControlTextFinder:
    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = tuple(sorted({t for t in texts if t}, key=lambda t: (-len(t), t)))
        self._texts = frozenset(self.texts)
        self._lengths = tuple(sorted({len(t) for t in self.texts}, reverse=True))  # longest first
        first_chars = "".join(sorted({t[0] for t in self.texts}))
        self._starts = re.compile(f"[{re.escape(first_chars)}]") if self.texts else None

    def __bool__(self) -> bool:
        return self._starts is not None

    def _match_from(self, text: str, pos: int) -> ControlMatch | None:
        """The leftmost control text at or after ``pos``, the longest one where several start there."""
        if self._starts is None:
            return None
        size = len(text)
        while (start := self._starts.search(text, pos)) is not None:
            at = start.start()
            for length in self._lengths:
                if at + length <= size and (candidate := text[at:at + length]) in self._texts:
                    return ControlMatch(at, at + length, candidate)
            pos = at + 1
        return None

    def finditer(self, text: str) -> Iterator[ControlMatch]:
        pos = 0
        while (match := self._match_from(text, pos)) is not None:
            yield match
            pos = match.end  # texts are never empty: the scan always moves on

    def search(self, text: str) -> bool:
        return self._match_from(text, 0) is not None

    def sub(self, replace: Callable[[str], str], text: str) -> str:
        """``text`` with every control text ``t`` replaced by ``replace(t)``."""
        parts: list[str] = []
        pos = 0
        for match in self.finditer(text):
            parts += [text[pos:match.start], replace(match.text)]
            pos = match.end
        return "".join(parts) + text[pos:] if parts else text
