"""Flash or plain attention for a llama.cpp context: what ``serve --flash-attention`` asked, or with ``auto``
(where the sizing reserved plain attention's buffer: edgeopt.sizing.attention) the faster of the two on
this device, measured once per model file, CPU and thread count and remembered under the cache directory.

llama.cpp's own ``auto`` takes flash attention wherever the backend has the kernel, every CPU included; it
compares nothing. Which is faster depends on the core: on a 2-core x86 plain attention decodes SmolLM2-135M
1.4x faster at 500 tokens of context (llama-server -fa off against its default, the same file), on Arm
Neoverse V cores flash attention decodes faster and prefills slower. The measurement is a request in
miniature, run by a child process on a scratch context (runtimes/llama_cpp/attention_probe.py: one stream of
PROBE_CELLS cells): a PROBE_PROMPT-token prefill, then single-token steps at that depth, priced as a request of
PROBE_PROMPT prompt and PROBE_ANSWER answer tokens. Plain attention is taken when that request costs at most
PREFER_PLAIN of flash attention's: flash stays where the two are close (it is what llama.cpp and every
other runtime on the device run, and a timing's noise should not flip it). Only on the CPU: a model that
offloads layers (a GPU, RPC workers) keeps llama.cpp's choice, and so does a quantized KV cache, which
llama.cpp reads only inside flash attention.

The timing never delays a start: a model whose timing is not kept yet loads with llama.cpp's choice (flash
attention, what llama-server runs), and its timing runs once the model serves (runtimes/llama_cpp/
deferred_timing.py: a child process at the lowest CPU priority); the next load of the file takes its choice.
Timed before /health it had cost Gemma 3 270M's first start 40 s on a busy 2-core host.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
from edgeopt.profiles.host import cpu_model_name

from edgeopt.store.cache import cache_root
from edgeopt.errors import BackendError, ConfigError
from edgeopt.sizing.attention import OFF, ON, RUNTIME_LLAMA_AUTO, RUNTIME_MEASURED

log = logging.getLogger(__name__)

RUNTIME_CHOICES = (RUNTIME_LLAMA_AUTO, ON, OFF, RUNTIME_MEASURED)
LLAMA_FLASH_TYPES = {RUNTIME_LLAMA_AUTO: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
                     ON: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED, OFF: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}
PROBE_PROMPT = 384  # prefill tokens, and the depth the timed steps attend over (a chat's system prompt and turn)
PROBE_ANSWER = 128  # answer tokens the request is priced with: decode is most of a request on a CPU
PROBE_CELLS = 512  # the scratch context's one stream
PROBE_STEPS = 5  # timed decode steps; the fastest counts (a shared host adds delays, never removes them)
PREFER_PLAIN = 0.95
PROBE_TIMEOUT_S = 600  # a 7B model's two 384-token prefills on a Pi take minutes


@dataclass(frozen=True)
class AttentionTiming:
    prefill_seconds: float  # PROBE_PROMPT tokens
    step_seconds: float  # one token at PROBE_PROMPT depth

    @property
    def request_seconds(self) -> float:
        return self.prefill_seconds + PROBE_ANSWER * self.step_seconds


@dataclass(frozen=True)
class AttentionChoice:
    flash: bool | None  # True / False: flash / plain attention; None: llama.cpp's own choice
    timing_due: tuple | None = None  # (path, threads, batch_tokens, model_key): time it once the model serves


def resolve_flash_attention(asked: str, path: Path, *, on_cpu: bool, kv_quantized: bool, threads: int,
                            batch_tokens: int, model_key: tuple) -> AttentionChoice:
    """``measured`` takes the faster kernel by this model's timing on this device where plain attention can run,
    else leaves llama.cpp's; with no timing kept yet, llama.cpp's too, and the timing is due (timing_due)."""
    if asked not in RUNTIME_CHOICES:
        raise ConfigError(f"flash_attention={asked!r} is not a choice", f"use one of {', '.join(RUNTIME_CHOICES)}")
    if asked == OFF and kv_quantized:
        raise ConfigError("flash_attention=off with a quantized KV cache: llama.cpp reads one only inside flash "
                          "attention", "use kv_type f16, or flash attention")
    if asked in (ON, OFF):
        return AttentionChoice(asked == ON)
    if asked == RUNTIME_LLAMA_AUTO or not on_cpu or kv_quantized:
        return AttentionChoice(None)
    saved = saved_timings(threads, batch_tokens, model_key)
    if saved is None:
        log.info("attention: llama.cpp's choice until flash and plain attention are timed on this device (once "
                 "the model serves, in the background; later loads take the faster)")
        return AttentionChoice(None, (path, threads, batch_tokens, model_key))
    flash, plain = saved
    chosen = prefers_plain(flash, plain)
    log.info("attention: %s (measured on this device: a %d + %d-token request %.0f ms with flash attention, "
             "%.0f ms plain; a step at %d tokens %.1f / %.1f ms)", "plain" if chosen else "flash",
             PROBE_PROMPT, PROBE_ANSWER, 1000 * flash.request_seconds, 1000 * plain.request_seconds, PROBE_PROMPT,
             1000 * flash.step_seconds, 1000 * plain.step_seconds)
    return AttentionChoice(not chosen)


def prefers_plain(flash: AttentionTiming, plain: AttentionTiming) -> bool:
    return plain.request_seconds <= PREFER_PLAIN * flash.request_seconds


def saved_timings(threads: int, batch_tokens: int, model_key: tuple) -> tuple[AttentionTiming, AttentionTiming] | None:
    """(flash, plain) as this model was timed on this device; None when it never was (or the file is unreadable)."""
    try:
        return _timings(json.loads(_timing_file(model_key, threads, batch_tokens).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measured_timings(path: Path, threads: int, batch_tokens: int,
                     model_key: tuple) -> tuple[AttentionTiming, AttentionTiming]:
    """(flash, plain) for this model on this device: remembered, else measured and remembered."""
    saved = saved_timings(threads, batch_tokens, model_key)
    if saved is not None:
        return saved
    measured = probe(path, threads, batch_tokens)
    flash, plain = _timings(measured)
    saved_at = _timing_file(model_key, threads, batch_tokens)
    saved_at.parent.mkdir(parents=True, exist_ok=True)
    partial = saved_at.with_suffix(f".{os.getpid()}.partial")  # servers starting together each write their own
    partial.write_text(json.dumps(measured))
    partial.replace(saved_at)
    return flash, plain


def probe(path: Path, threads: int, batch_tokens: int) -> dict:
    """Time both kernels in a child process (runtimes/llama_cpp/attention_probe.py). Not in the server's: the
    scratch contexts' memory stayed in its resident set (the trained demo model: +7.7 MiB over its plan), and
    llama.cpp's OpenMP workers spin for as long as the thread that decoded lives (the loading thread's left
    the engine's steps at 34 ms instead of 13)."""
    command = [sys.executable, "-m", "edgeopt.runtimes.llama_cpp.attention_probe", str(path), str(threads),
               str(batch_tokens), str(os.getpid())]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        done = None
    if done is None or done.returncode != 0:
        why = f"it ran past {PROBE_TIMEOUT_S} s" if done is None else done.stderr.strip()[-500:]
        raise BackendError(f"timing flash against plain attention on {path} failed: {why}",
                           "pass --flash-attention on (llama.cpp's kernel) or off to skip the measurement")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _timings(measured: dict) -> tuple[AttentionTiming, AttentionTiming]:
    return AttentionTiming(**measured["flash"]), AttentionTiming(**measured["plain"])


def _timing_file(model_key: tuple, threads: int, batch_tokens: int) -> Path:
    """One file per model file, CPU, llama.cpp build, thread count and batch."""
    identity = json.dumps([list(model_key), platform.machine(), cpu_model_name(), llama_cpp.__version__,
                           llama_cpp.llama_print_system_info().decode(errors="replace"), threads, batch_tokens],
                          default=str)
    return cache_root() / "attention" / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"
