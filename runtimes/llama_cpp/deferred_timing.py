"""The attention timing a model's first load leaves for later (runtimes/llama_cpp/attention.py): run once the
model serves, never on the way to /health.

The timing loads the model again in a child process and runs two 384-token prefills and a few steps with each
kernel: seconds for a 135M model, and on a busy 2-core host 40 s for Gemma 3 270M's first start, which /health
waited for. Now the model starts on llama.cpp's choice (flash attention, llama-server's), the server calls
``after_ready`` once it answers /health, and the child times at the lowest CPU priority in the background. Its
result is kept per file and device (attention.measured_timings), and the next load of the file (a restart, or
a swap back in a server of several models) takes the faster kernel. The running context is not switched live:
that would mean a new llama.cpp context, the KV cache and prefix cache lost under requests in flight.

A timing that fails or is killed only logs: the model keeps serving on llama.cpp's choice, nothing is kept, and
a later load times again.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from edgeopt.runtimes.llama_cpp import attention

log = logging.getLogger(__name__)


class DeferredTiming:
    """One model file's attention timing, started at most once, in a daemon thread."""

    def __init__(self, path: Path, threads: int, batch_tokens: int, model_key: tuple) -> None:
        self.path, self.threads, self.batch_tokens, self.model_key = path, threads, batch_tokens, model_key
        self.thread: threading.Thread | None = None
        self.flash_next: bool | None = None  # what the next load takes, once timed

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self.run, name="edgeopt-attention-timing", daemon=True)
            self.thread.start()

    def run(self) -> None:
        try:
            flash, plain = attention.measured_timings(self.path, self.threads, self.batch_tokens, self.model_key)
        except Exception as exc:  # noqa: BLE001 -- serving goes on with llama.cpp's choice; a later load retries
            log.warning("attention timing of %s failed; serving on with llama.cpp's choice: %s", self.path.name, exc)
            return
        plain_wins = attention.prefers_plain(flash, plain)
        self.flash_next = not plain_wins
        log.info("attention timed for %s: the next load takes %s attention (a %d + %d-token request %.0f ms with "
                 "flash attention, %.0f ms plain)", self.path.name, "plain" if plain_wins else "flash",
                 attention.PROBE_PROMPT, attention.PROBE_ANSWER, 1000 * flash.request_seconds,
                 1000 * plain.request_seconds)
