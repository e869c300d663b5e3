"""llama.cpp's log while it quantizes: captured whole, summarized in a line, shown in full on request.

llama.cpp logs through one process-wide callback. Quantizing a model whose rows do not fit a
k-quant's 256-wide blocks (SmolLM2's 576 columns, ...) logs a two-line warning per tensor: hundreds
of lines for what is one fact ("180 tensors fell back from q4_K to q5_0"). While :func:`captured_llama_log`
is active, every message (all levels) goes into a :class:`LlamaLog` instead of the terminal; it is
also passed to the ``edgeopt.llama_cpp`` logger at DEBUG, which ``edgeopt optimize --verbose`` shows.
"""

from __future__ import annotations

import ctypes
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger("edgeopt.llama_cpp")
_GGML_PROBLEM_LEVELS = (3, 4)  # warn, error
_GGML_LOG_LEVEL_CONT = 5  # continues the previous message

# llama.cpp's (llama-quant.cpp) message for a tensor whose row length does not divide the block of
# the type its mix asked for.
_FALLBACK = re.compile(r"(?P<tensor>\S+)\s+-\s+ncols\s+(?P<ncols>\d+)\s+not divisible by\s+(?P<block>\d+)\s+"
                       r"\(required for type\s+(?P<wanted>\w+)\)\s*->\s*falling back to\s+(?P<used>\w+)")


@dataclass(frozen=True)
class Fallback:
    """Tensors that got ``used`` instead of ``wanted`` because their rows (``ncols`` wide) do not
    divide into ``wanted``'s blocks of ``block``."""

    wanted: str
    used: str
    ncols: int
    block: int

    @property
    def reason(self) -> str:
        return f"rows of {self.ncols} not divisible by {self.block}"


@dataclass
class LlamaLog:
    """The messages llama.cpp logged during a capture, in order, with their ggml log levels."""

    messages: list[tuple[int, str]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.messages)

    def problems(self, limit: int = 5) -> str:
        """The last ``limit`` warning and error messages (continuations joined), for an error message:
        what llama.cpp said when it failed, which the capture kept off the terminal."""
        joined: list[tuple[int, str]] = []
        for level, text in self.messages:
            if level == _GGML_LOG_LEVEL_CONT and joined:
                joined[-1] = (joined[-1][0], joined[-1][1] + text)
            else:
                joined.append((level, text))
        lines = [" ".join(text.split()) for level, text in joined if level in _GGML_PROBLEM_LEVELS and text.strip()]
        return "; ".join(lines[-limit:])

    def fallbacks(self) -> Counter[Fallback]:
        """How many tensors fell back to another type, per (wanted, used, row length, block)."""
        # ggml spells types q4_K; GGUF files and quant names (and the manifest) Q4_K
        return Counter(Fallback(m["wanted"].upper(), m["used"].upper(), int(m["ncols"]), int(m["block"]))
                       for m in _FALLBACK.finditer(self.text))


def fallback_facts(counts: Counter[Fallback]) -> list[dict[str, str | int]]:
    """The manifest's record of the fallbacks, most frequent first."""
    return [{"wanted": f.wanted, "used": f.used, "reason": f.reason, "tensors": n}
            for f, n in counts.most_common()]


@contextmanager
def captured_llama_log(on_message: Callable[[str], None] = lambda _m: None) -> Iterator[LlamaLog]:
    """Capture llama.cpp's log for the duration of the block (each message also handed to ``on_message``: a
    progress counter); afterwards it goes back to Python logging (warnings and errors), as
    :func:`edgeopt.runtimes.llama_cpp.model.init_backend` routes it."""
    import llama_cpp

    from edgeopt.runtimes.llama_cpp.model import init_backend, route_log_to_python

    init_backend()
    captured = LlamaLog()

    @llama_cpp.llama_log_callback
    def capture(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        message = text.decode("utf-8", errors="replace") if text else ""
        captured.messages.append((level, message))
        on_message(message)
        if message.strip():
            log.debug("%s", message.rstrip("\n"))

    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    try:
        yield captured
    finally:
        route_log_to_python()
