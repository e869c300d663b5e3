"""Which attention kernel llama.cpp runs (``serve --flash-attention auto|on|off``), as far as memory and the
KV layout are concerned; the runtime measures which is faster (runtimes/llama_cpp/attention.py).

Flash attention (llama.cpp's choice on every CPU) keeps no score matrix and skips the cells a step's mask
hides. Plain attention writes a step's scores for every cell it attends over into a buffer of batch tokens
x cells x heads floats, and on some CPUs decodes much faster: on a 2-core x86 (AVX-512), SmolLM2-135M at
500 tokens of context decodes 1.4x faster, 2.3x at 4,000, and 16 streams 1.5x (prefill 0.8-0.9x); on Arm
Neoverse V cores flash attention wins the decode instead. So ``auto`` takes plain attention only where the
runtime measured it faster on this device, and only in the streams layout: there a step attends over its
own stream, so the buffer is bounded by the context; in the unified pool a step spans every cell in use,
cached prefixes included, and plain attention scores each of them (a lone stream beside 20,000 idle cached
cells: 90 ms a step against flash attention's 30).
"""

from __future__ import annotations

from edgeopt.errors import ConfigError
from edgeopt.sizing.kv_types import KV_TYPES
from edgeopt.sizing.layout import STREAMS, stream_cells

AUTO = "auto"  # plain attention where this device measured it faster and the streams layout bounds it
ON = "on"  # flash attention (llama.cpp's kernel that a quantized KV cache needs)
OFF = "off"  # plain attention
FLASH_ATTENTION_CHOICES = (AUTO, ON, OFF)
# What the runtime is told (runtimes/llama_cpp/attention.py): llama.cpp's own auto, on, off, or measure
# both and take the faster.
RUNTIME_LLAMA_AUTO, RUNTIME_MEASURED = "llama-auto", "measured"
SCORE_BYTES = 4  # llama.cpp's attention scores are f32


def plain_attention_buffer_bytes(batch_tokens: int, context: int, heads: int) -> int:
    """The compute buffer plain attention adds: a score per batch token, cell of a stream and head
    (llama.cpp's KQ; measured on SmolLM2-135M, 9 heads, 128-token batch: 17.2 MiB at 4,096 cells, 36.2 at
    8,192, against the formula's 18.0 and 36.0)."""
    return batch_tokens * stream_cells(context) * heads * SCORE_BYTES


def check_flash_attention_request(asked: str, runtime_layouts: tuple[str, ...], runtime: str) -> None:
    """Refuse, before anything is sized, a choice that is none, or one for a runtime without the option."""
    if asked not in FLASH_ATTENTION_CHOICES:
        raise ConfigError(f"--flash-attention {asked!r} is not a choice",
                          f"use one of {', '.join(FLASH_ATTENTION_CHOICES)}")
    if asked != AUTO and not runtime_layouts:
        raise ConfigError(f"--flash-attention {asked} applies to llama.cpp (GGUF) bundles; this one runs on {runtime}",
                          "leave --flash-attention out for this bundle")


def plain_attention_possible(asked: str, kv_type: str | None, layout: str | None) -> bool:
    """Whether the runtime may run plain attention in this shape (so the sizing reserves its buffer)."""
    return asked != ON and layout == STREAMS and kv_type is not None and not KV_TYPES[kv_type].quantized


def check_plain_attention(asked: str, kv_type: str | None, layout: str | None) -> None:
    """Refuse ``--flash-attention off`` in a shape where plain attention cannot run."""
    if asked != OFF:
        return
    if kv_type is not None and KV_TYPES[kv_type].quantized:
        raise ConfigError(f"--flash-attention off with --kv-type {kv_type}: llama.cpp reads a quantized KV cache "
                          "only inside flash attention", "use --kv-type f16, or leave --flash-attention out")
    if layout != STREAMS:
        raise ConfigError(f"--flash-attention off needs the streams KV layout (this shape is {layout}): in the "
                          "unified pool a step scores every cell in use, other conversations' included",
                          "add --kv-layout streams (a --context stream per sequence: more --memory or fewer "
                          "--max-concurrency), or leave --flash-attention out")


def runtime_flash_attention(asked: str, buffer_reserved: bool) -> str:
    """What the runtime is told: ``on``/``off`` as asked; ``auto`` measures where the plain-attention buffer
    was reserved, else leaves llama.cpp's own choice."""
    if asked != AUTO:
        return asked
    return RUNTIME_MEASURED if buffer_reserved else RUNTIME_LLAMA_AUTO
