"""Find the text of control tokens (``<|im_start|>``, ``<|eot_id|>``, ``<s>``) inside a string, in one pass.

Tokenizers that "parse special tokens" turn such text into the control token; the server must know where
it occurs to keep it out of message contents, and the llama.cpp tokenizer splits on it itself (llama.cpp's
own splitting is quadratic in the number of occurrences). One regex alternation, longest text first, so
``<|im_start|>`` wins over a shorter token that is its prefix; the scan is linear in the text.
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
        self._pattern = re.compile("|".join(map(re.escape, self.texts))) if self.texts else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def finditer(self, text: str) -> Iterator[ControlMatch]:
        if self._pattern is None:
            return
        for match in self._pattern.finditer(text):
            yield ControlMatch(match.start(), match.end(), match.group())

    def search(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def sub(self, replace: Callable[[str], str], text: str) -> str:
        """``text`` with every control text ``t`` replaced by ``replace(t)``."""
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: replace(m.group()), text)
