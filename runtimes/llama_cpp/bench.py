"""llama.cpp's RAW batched decode speed: the ceiling our engine and server are measured against.

N sequences are prefilled (untimed), then each timed step is one ``llama_decode`` carrying one token
per sequence with logits requested for each, like llama.cpp's ``batched-bench``: no sampling, no
Python beyond filling the batch. ``edgeopt bench serve`` compares the server's aggregate decode tok/s
with this figure at the same N.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgeopt.runtimes.base import StepInput, Tokenizer
from edgeopt.runtimes.llama_cpp import load_gguf


@dataclass(frozen=True)
class RawDecodeResult:
    n_sequences: int
    decode_steps: int
    tokens: int
    seconds: float
    threads: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tokens_per_s": round(self.tokens_per_s, 2)}


def raw_batched_decode(gguf_path: Path, n_sequences: int, decode_steps: int = 64, prompt_tokens: int = 32,
                       threads: int = 2, warmup_steps: int = 4, kv_type: str = "f16",
                       n_gpu_layers: int = 0) -> RawDecodeResult:
    """Time ``decode_steps`` batched decode calls of ``n_sequences`` sequences on one context
    (``n_gpu_layers=-1``: every layer on the GPU, for the CUDA figures)."""
    per_sequence = prompt_tokens + warmup_steps + decode_steps
    runtime = load_gguf(Path(gguf_path), kv_capacity_tokens=n_sequences * per_sequence, max_slots=n_sequences,
                        max_batch_tokens=max(prompt_tokens, n_sequences), threads=threads,
                        n_gpu_layers=n_gpu_layers, kv_type=kv_type)
    try:
        token = _any_plain_token(runtime.tokenizer)
        for slot in range(n_sequences):  # prefill one sequence per call: the same work for every N
            runtime.step([StepInput(slot, [token] * prompt_tokens, 0, True)])
        position = prompt_tokens
        for _ in range(warmup_steps):
            runtime.decode_only(_decode_batch(n_sequences, token, position))
            position += 1
        start = time.perf_counter()
        for _ in range(decode_steps):
            runtime.decode_only(_decode_batch(n_sequences, token, position))
            position += 1
        seconds = time.perf_counter() - start
    finally:
        runtime.close()
    return RawDecodeResult(n_sequences, decode_steps, n_sequences * decode_steps, seconds, threads)


def _decode_batch(n_sequences: int, token: int, position: int) -> list[StepInput]:
    """One token per sequence, logits wanted for each (as a decode step of the engine)."""
    return [StepInput(slot, [token], position, True) for slot in range(n_sequences)]


def _any_plain_token(tokenizer: Tokenizer) -> int:
    ids = tokenizer.encode("the", add_special=False)
    return ids[0] if ids else 0


@dataclass(frozen=True)
class CompletionSpeed:
    threads: str  # "N" as asked, or "auto(N)": the default, with the count it ended on
    completions: int
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def completion_speed(gguf_path: Path, threads: int | None, completions: int = 5, tokens: int = 20,
                     prompt_tokens: int = 16) -> CompletionSpeed:
    """Time ``completions`` short completions of one sequence (prefill, then ``tokens`` decode steps, each
    through ``runtime.step`` as the engine calls it), like a chat reply on an otherwise idle server.

    ``threads=None`` is the runtime's default (runtimes/llama_cpp/threads.py); the clock includes the
    load-measuring window the default needs after the runtime is created.
    """
    runtime = load_gguf(Path(gguf_path), kv_capacity_tokens=prompt_tokens + tokens + 1, max_slots=1,
                        max_batch_tokens=prompt_tokens, threads=threads, n_gpu_layers=0)
    try:
        token = _any_plain_token(runtime.tokenizer)
        start = time.perf_counter()
        for _ in range(completions):
            runtime.step([StepInput(0, [token] * prompt_tokens, 0, True)])
            for position in range(prompt_tokens, prompt_tokens + tokens):
                runtime.step([StepInput(0, [token], position, True)])
            runtime.release(0)
        seconds = time.perf_counter() - start
        label = str(threads) if threads is not None else f"auto({runtime.threads})"
    finally:
        runtime.close()
    return CompletionSpeed(label, completions, completions * tokens, seconds)
