"""llama.cpp backend (GGUF bundles) through llama-cpp-python's low-level API.

``load(bundle_dir, manifest, **options)`` is what :func:`runtimes.load_runtime` calls. Options:

* ``kv_capacity_tokens``: KV cells (llama.cpp ``n_ctx``) and ``max_slots``: concurrent sequences
  (``n_seq_max``), both required: the caller sizes them (``edgeopt serve`` with
  :func:`edgeopt.memory_budget.size_kv`); a runtime never computes its own;
* ``max_batch_tokens``: tokens per ``llama_decode`` (``n_batch``), default 128;
* ``threads``: CPU threads; default: the cores other processes leave free, re-measured while decoding
  (runtimes/llama_cpp/threads.py), at most the profile's core count and this host's;
* ``n_gpu_layers``: default -1 (all) when the profile has CUDA and this build supports offload, else 0;
* ``context_length``: longest sequence, default the model's training context;
* ``kv_type``: the KV cache's element type, f16 (default), q8_0 or q4_0 (runtimes/llama_cpp/kv_type.py);
  the caller sized ``kv_capacity_tokens`` in it;
* ``cache_slots``: llama.cpp sequence ids kept for the engine's prefix cache (each cached prefix tags
  the cells it shares with the others, so this bounds entries, not memory); 0 turns the cache off.
  Default: ``max(max_slots, MIN_CACHE_SLOTS)``, within llama.cpp's 256 sequence ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp

from edgeopt.errors import ConfigError
from edgeopt.kv_types import check_head_dims
from profiles import DeviceProfile, load_profile
from profiles.host import usable_cpu_count
from runtimes.llama_cpp.context import LlamaCppRuntime
from runtimes.llama_cpp.kv_type import check_llama_kv_type
from runtimes.llama_cpp.model import load_model, model_facts
from runtimes.llama_cpp.tokenizer import LlamaCppTokenizer

if TYPE_CHECKING:
    from edgeopt.bundle import Manifest

__all__ = ["LlamaCppRuntime", "LlamaCppTokenizer", "load", "load_gguf"]
# llama.cpp's compute buffer grows with the batch: on a ~200M model 512 tokens cost 27 MiB, 256 cost
# 14 MiB, 128 about 7 MiB, which is what keeps `edgeopt serve` within bundle + KV + 120 MB there.
# Decode steps of up to 128 sequences are unaffected; a long prompt is prefilled 128 tokens a step.
DEFAULT_MAX_BATCH_TOKENS = 128
LLAMA_MAX_SEQ = 256  # llama-cparams.h: the most sequence ids one context accepts
# Cached prefixes (leaves of the engine's prefix tree) kept at once, by default as many as running
# sequences. Each id costs one logits row of llama.cpp's output buffer (it reserves n_seq_max rows:
# 600 KB on a 151k vocabulary), never KV: the cached cells live inside n_ctx.
MIN_CACHE_SLOTS = 8


def load(bundle_dir: Path, manifest: Manifest, **options: Any) -> LlamaCppRuntime:
    """Open the bundle's GGUF (``manifest.model_file``) with a context sized to memory."""
    return load_gguf(Path(bundle_dir) / manifest.model_file, **options)


def load_gguf(path: Path, *, kv_capacity_tokens: int | None = None, max_slots: int | None = None,
              max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, threads: int | None = None,
              n_gpu_layers: int | None = None, context_length: int | None = None,
              profile: DeviceProfile | None = None, kv_type: str = "f16",
              cache_slots: int | None = None) -> LlamaCppRuntime:
    if kv_capacity_tokens is None or max_slots is None:
        raise ConfigError(f"the llama.cpp runtime needs kv_capacity_tokens and max_slots (got {kv_capacity_tokens}, "
                          f"{max_slots})", "size them with edgeopt.memory_budget.size_kv, as edgeopt serve does")
    if kv_capacity_tokens < 1 or not 1 <= max_slots <= LLAMA_MAX_SEQ:
        raise ConfigError(f"kv_capacity_tokens={kv_capacity_tokens}, max_slots={max_slots} are invalid",
                          f"need kv_capacity_tokens >= 1 and 1 <= max_slots <= {LLAMA_MAX_SEQ}")
    if max_batch_tokens < 1 or (threads is not None and threads < 1) or (cache_slots is not None and cache_slots < 0):
        raise ConfigError(f"max_batch_tokens={max_batch_tokens}, threads={threads}, cache_slots={cache_slots} "
                          "are invalid", "max_batch_tokens and threads must be >= 1, cache_slots >= 0")
    check_llama_kv_type(kv_type)
    profile = profile or load_profile("host")
    if n_gpu_layers is None:
        n_gpu_layers = -1 if profile.has_cuda and llama_cpp.llama_supports_gpu_offload() else 0
    model = load_model(Path(path), n_gpu_layers)
    facts = model_facts(model, Path(path))
    context = min(context_length or facts.context_train, facts.context_train)
    if cache_slots is None:
        cache_slots = max(max_slots, MIN_CACHE_SLOTS)
    cache_slots = min(cache_slots, LLAMA_MAX_SEQ - max_slots)
    try:
        check_head_dims(kv_type, facts.head_dim_k, facts.head_dim_v, Path(path).name)
        return LlamaCppRuntime(model, facts, kv_capacity_tokens, max_slots, max_batch_tokens,
                               threads or max_default_threads(profile), context, adaptive_threads=threads is None,
                               kv_type=kv_type, cache_slots=cache_slots)
    except Exception:
        llama_cpp.llama_model_free(model)
        raise


def max_default_threads(profile: DeviceProfile) -> int:
    """The profile's cores, never more than this machine lets us run on (more threads than cores only spin)."""
    host = usable_cpu_count()
    return max(1, min(profile.cores or host, host))

