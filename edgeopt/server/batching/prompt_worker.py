"""Template rendering and tokenization run here, on worker threads, never on the event loop.

Tokenizing a large prompt takes from milliseconds to (before the byte bound and our own special-token
splitting) seconds; on the event loop that stalls /health and every stream. Both tokenizers release the
GIL while they work (llama.cpp through ctypes, ``tokenizers`` in Rust), so the loop keeps answering.
The work is bounded: a few threads (on a small device more would only take cores from the engine), and
at most ``max_pending`` prompts in flight; past that a request gets 429 at once instead of queueing
unbounded work behind a flood. A short prompt with no constraint to compile (``inline``: the caller's
judgement, by :data:`INLINE_PROMPT_CHARS`) is prepared on the loop instead: ~0.05 ms of work there costs
less than the two thread hand-offs around it (0.16 ms less to the first token, measured from inside the
server on a 2-core CPU).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from edgeopt.errors import OverloadedError

T = TypeVar("T")

PROMPT_THREADS = 2  # two, so one huge prompt does not hold every small one behind it
MAX_PENDING_PROMPTS = 64
INLINE_PROMPT_CHARS = 2048  # a prompt at most this long (characters or ids) may be prepared on the loop


class PromptWorker:
    def __init__(self, threads: int = PROMPT_THREADS, max_pending: int = MAX_PENDING_PROMPTS) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="edgeopt-prompt")
        self.max_pending = max_pending
        self.pending = 0  # touched only on the event loop's thread: no lock

    async def run(self, work: Callable[[], T], inline: bool = False) -> T:
        """``work()``'s result, computed on a worker thread, or right here when ``inline``."""
        if inline:
            return work()
        if self.pending >= self.max_pending:
            raise OverloadedError(f"{self.pending} prompts are already being prepared (the limit is "
                                  f"{self.max_pending})", "retry shortly")
        self.pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)
        finally:
            self.pending -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
