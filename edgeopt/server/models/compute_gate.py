"""One model computes at a time: a process-wide lock around each engine step and each encoder batch.

Loaded models decode concurrently, interleaved step by step, each step on every thread the device gives
(llama.cpp's own thread count). Giving each of N models 1/N of the cores instead would slow a lone busy
model N times while the others idle, and letting each take every core oversubscribes them: llama.cpp's
threads spin at a barrier after every operation, so two models' steps at once on the same cores run far
slower than the two one after the other (runtimes/llama_cpp/threads.py measured 60x on 2 cores). A step
is milliseconds (a prefill chunk is at most the runtime's batch), so a model waits at most one of
another's steps.
"""

from __future__ import annotations

import threading
from typing import Any

GATED = ("step", "embed_ids", "score_pairs")  # Runtime.step, EmbeddingRuntime.embed_ids, RerankRuntime.score_pairs


class ComputeGate:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def wrap(self, runtime: Any) -> Any:
        """``runtime`` with its compute methods taking the lock; every other attribute is the runtime's own."""
        return _Gated(runtime, self.lock)


class _Gated:
    def __init__(self, runtime: Any, lock: threading.Lock) -> None:
        self._runtime = runtime
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._runtime, name)
        if name not in GATED:
            return value

        def gated(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return gated
