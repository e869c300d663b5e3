"""Time flash against plain attention for one GGUF on this device; run by runtimes/llama_cpp/attention.py in a
child process of its own, so that nothing of the scratch contexts stays in the server:

    python -m edgeopt.runtimes.llama_cpp.attention_probe MODEL.gguf THREADS BATCH_TOKENS [SERVER_PID]

prints one JSON line: ``{"flash": {...}, "plain": {...}}``, each an AttentionTiming's fields. It runs beside a
server that already serves (runtimes/llama_cpp/deferred_timing.py), so at the lowest CPU priority: a request
takes the cores first. With SERVER_PID it ends when that process does (Linux), so no orphan times on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

import llama_cpp
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp.attention import (
    LLAMA_FLASH_TYPES,
    PROBE_CELLS,
    PROBE_PROMPT,
    PROBE_STEPS,
    AttentionTiming,
)
from edgeopt.runtimes.llama_cpp.batch import NumpyBatch
from edgeopt.runtimes.llama_cpp.model import load_model

from edgeopt.errors import BackendError
from edgeopt.sizing.attention import OFF, ON


def time_attention(model: llama_cpp.llama_model_p, flash: bool, threads: int, batch_tokens: int) -> AttentionTiming:
    """A prefill and single-token steps on a scratch context with flash or plain attention."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = PROBE_CELLS
    params.n_batch = params.n_ubatch = batch_tokens
    params.n_seq_max = 1
    params.n_outputs_max = 1
    params.kv_unified = False
    params.n_threads = params.n_threads_batch = threads
    params.no_perf = True
    params.flash_attn_type = LLAMA_FLASH_TYPES[ON if flash else OFF]
    ctx = llama_cpp.llama_init_from_model(model, params)
    if not ctx:
        raise BackendError(f"llama.cpp could not make a {PROBE_CELLS}-cell context to time its attention")
    try:
        batch = NumpyBatch(batch_tokens)
        token = plain_token(model)

        def decode(start: int, count: int) -> None:
            batch.fill([StepInput(0, [token] * count, start, want_logits=True)])
            if llama_cpp.llama_decode(ctx, batch.struct) != 0:
                raise BackendError("llama.cpp failed a decode while timing its attention")

        started = time.perf_counter()
        for start in range(0, PROBE_PROMPT, batch_tokens):
            decode(start, min(batch_tokens, PROBE_PROMPT - start))
        prefill = time.perf_counter() - started
        steps = []
        for position in range(PROBE_PROMPT, PROBE_PROMPT + PROBE_STEPS + 1):  # the first builds its graph
            started = time.perf_counter()
            decode(position, 1)
            steps.append(time.perf_counter() - started)
        return AttentionTiming(prefill, min(steps[1:]))
    finally:
        llama_cpp.llama_free(ctx)


def plain_token(model: llama_cpp.llama_model_p) -> int:
    """A token in the middle of the vocabulary: neither a control token nor an end of generation."""
    vocab = llama_cpp.llama_model_get_vocab(model)
    n = int(llama_cpp.llama_vocab_n_tokens(vocab))
    return next(t for t in range(n // 2, n)
                if not llama_cpp.llama_vocab_is_control(vocab, t) and not llama_cpp.llama_vocab_is_eog(vocab, t))


def yield_to(server_pid: int | None) -> None:
    """Lowest priority; SIGTERM when the server process ends (prctl PR_SET_PDEATHSIG, Linux only)."""
    try:
        os.nice(19)
    except (OSError, AttributeError):  # not permitted or not POSIX: time at the same priority
        pass
    if server_pid is None:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != server_pid:  # it ended before the signal was armed
        sys.exit(1)


def main(argv: list[str]) -> None:
    path, threads, batch_tokens = Path(argv[0]), int(argv[1]), int(argv[2])
    yield_to(int(argv[3]) if len(argv) > 3 else None)
    model = load_model(path, n_gpu_layers=0)
    try:
        timings = {name: dataclasses.asdict(time_attention(model, flash, threads, batch_tokens))
                   for name, flash in (("flash", True), ("plain", False))}
    finally:
        llama_cpp.llama_model_free(model)
    print(json.dumps(timings))


if __name__ == "__main__":
    main(sys.argv[1:])
