"""Flash or plain attention for a llama.cpp context: what ``serve --flash-attention`` asked, or with ``auto``
(where the sizing reserved plain attention's buffer: edgeopt.sizing.attention) the faster of the two on
this device, measured once per model file, CPU and thread count and remembered under the cache directory.

llama.cpp's own ``auto`` takes flash attention wherever the backend has the kernel, every CPU included; it
compares nothing. Which is faster depends on the core: on a 2-core x86 plain attention decodes SmolLM2-135M
1.4x faster at 500 tokens of context (llama-server -fa off against its default, the same file), on Arm
Neoverse V cores flash attention decodes faster and prefills slower. The measurement is a request in
miniature on a scratch context of its own (one stream of PROBE_CELLS cells, freed before the served context
is made): a PROBE_PROMPT-token prefill, then single-token steps at that depth, priced as a request of
PROBE_PROMPT prompt and PROBE_ANSWER answer tokens. Plain attention is taken when that request costs at most
PREFER_PLAIN of flash attention's: flash stays where the two are close (it is what llama.cpp and every
other runtime on the device run, and a timing's noise should not flip it). Only on the CPU: a model that
offloads layers (a GPU, RPC workers) keeps llama.cpp's choice, and so does a quantized KV cache, which
llama.cpp reads only inside flash attention.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import llama_cpp

from edgeopt.cache import cache_root
from edgeopt.errors import BackendError, ConfigError
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp.batch import NumpyBatch
from edgeopt.sizing.attention import OFF, ON, RUNTIME_LLAMA_AUTO, RUNTIME_MEASURED

log = logging.getLogger(__name__)
T = TypeVar("T")

RUNTIME_CHOICES = (RUNTIME_LLAMA_AUTO, ON, OFF, RUNTIME_MEASURED)
LLAMA_FLASH_TYPES = {RUNTIME_LLAMA_AUTO: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
                     ON: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED, OFF: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}
PROBE_PROMPT = 384  # prefill tokens, and the depth the timed steps attend over (a chat's system prompt and turn)
PROBE_ANSWER = 128  # answer tokens the request is priced with: decode is most of a request on a CPU
PROBE_CELLS = 512  # the scratch context's one stream
PROBE_STEPS = 5  # timed decode steps; the fastest counts (a shared host adds delays, never removes them)
PREFER_PLAIN = 0.95


@dataclass(frozen=True)
class AttentionTiming:
    prefill_seconds: float  # PROBE_PROMPT tokens
    step_seconds: float  # one token at PROBE_PROMPT depth

    @property
    def request_seconds(self) -> float:
        return self.prefill_seconds + PROBE_ANSWER * self.step_seconds


def resolve_flash_attention(asked: str, model: llama_cpp.llama_model_p, *, on_cpu: bool, kv_quantized: bool,
                            threads: int, batch_tokens: int, model_key: tuple) -> bool | None:
    """True / False: flash / plain attention; None: llama.cpp's own choice. ``measured`` times both (or reads
    this model's earlier timing on this device) where plain attention can run, else leaves llama.cpp's."""
    if asked not in RUNTIME_CHOICES:
        raise ConfigError(f"flash_attention={asked!r} is not a choice", f"use one of {', '.join(RUNTIME_CHOICES)}")
    if asked in (ON, OFF):
        return asked == ON
    if asked == RUNTIME_LLAMA_AUTO or not on_cpu or kv_quantized:
        return None
    flash, plain = measured_timings(model, threads, batch_tokens, model_key)
    chosen = plain.request_seconds <= PREFER_PLAIN * flash.request_seconds
    log.info("attention: %s (measured on this device: a %d + %d-token request %.0f ms with flash attention, "
             "%.0f ms plain; a step at %d tokens %.1f / %.1f ms)", "plain" if chosen else "flash",
             PROBE_PROMPT, PROBE_ANSWER, 1000 * flash.request_seconds, 1000 * plain.request_seconds, PROBE_PROMPT,
             1000 * flash.step_seconds, 1000 * plain.step_seconds)
    return not chosen


def measured_timings(model: llama_cpp.llama_model_p, threads: int, batch_tokens: int,
                     model_key: tuple) -> tuple[AttentionTiming, AttentionTiming]:
    """(flash, plain) for this model on this device: remembered, else measured and remembered."""
    path = _timing_file(model_key, threads, batch_tokens)
    try:
        saved = json.loads(path.read_text())
        return AttentionTiming(**saved["flash"]), AttentionTiming(**saved["plain"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    flash, plain = (on_a_thread_of_its_own(time_attention, model, flash, threads, batch_tokens)
                    for flash in (True, False))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"flash": asdict(flash), "plain": asdict(plain)}))
    partial.replace(path)
    return flash, plain


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
        raise BackendError(f"llama.cpp could not make a {PROBE_CELLS}-cell context to time its attention",
                           "pass --flash-attention on or off to skip the measurement")
    try:
        batch = NumpyBatch(batch_tokens)
        token = _plain_token(model)

        def decode(start: int, count: int) -> None:
            batch.fill([StepInput(0, [token] * count, start, want_logits=True)])
            if llama_cpp.llama_decode(ctx, batch.struct) != 0:
                raise BackendError("llama.cpp failed a decode while timing its attention",
                                   "pass --flash-attention on or off to skip the measurement")

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


def on_a_thread_of_its_own(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on a thread that ends with it. llama.cpp's OpenMP workers belong to the thread that
    called llama_decode and spin while it lives: decodes on the server's loading thread, which lives on, left
    the engine thread's steps at 34 ms instead of 13 (SmolLM2-135M, 2 cores)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(function(*args))
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="edgeopt-attention-timing")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _timing_file(model_key: tuple, threads: int, batch_tokens: int) -> Path:
    """One file per model file, CPU, llama.cpp build, thread count and batch."""
    identity = json.dumps([list(model_key), platform.machine(), _cpu_name(), llama_cpp.__version__,
                           llama_cpp.llama_print_system_info().decode(errors="replace"), threads, batch_tokens],
                          default=str)
    return cache_root() / "attention" / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model", "CPU part")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _plain_token(model: llama_cpp.llama_model_p) -> int:
    """A token in the middle of the vocabulary: neither BOS nor EOS nor a control token."""
    vocab = llama_cpp.llama_model_get_vocab(model)
    n = int(llama_cpp.llama_vocab_n_tokens(vocab))
    return next(t for t in range(n // 2, n)
                if not llama_cpp.llama_vocab_is_control(vocab, t) and not llama_cpp.llama_vocab_is_eog(vocab, t))
