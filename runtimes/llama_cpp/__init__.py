"""llama.cpp backend (GGUF bundles) through llama-cpp-python's low-level API.

``load(bundle_dir, manifest, **options)`` is what :func:`edgeopt.runtimes.load_runtime` calls. Options:

* ``kv_capacity_tokens``: KV cells (llama.cpp ``n_ctx``) and ``max_slots``: concurrent sequences
  (``n_seq_max``), both required: the caller sizes them (``edgeopt serve`` with
  :func:`edgeopt.sizing.shape.decide_serving_shape`); a runtime never computes its own;
* ``max_batch_tokens``: tokens per ``llama_decode`` (``n_batch`` = ``n_ubatch``), default the gguf backend
  entry's ``batch_tokens`` (the batch its runtime-overhead estimate is per token of);
* ``threads``: CPU threads; default: the cores other processes leave free, re-measured while decoding
  (runtimes/llama_cpp/threads.py), at most the profile's core count and this host's;
* ``n_gpu_layers``: default -1 (all) when the profile's platform has a CUDA GPU and this build supports offload,
  else 0; left unset on a platform with an accelerator llama.cpp cannot drive (an NPU), a ConfigError says so,
  and ``n_gpu_layers=0`` runs on its CPU;
* ``context_length``: longest sequence, default the model's training context;
* ``kv_type``: the KV cache's element type, f16 (default), q8_0 or q4_0 (runtimes/llama_cpp/kv_type.py);
  the caller sized ``kv_capacity_tokens`` in it;
* ``cache_slots``: llama.cpp sequence ids kept for the engine's prefix cache (each cached prefix tags
  the cells it shares with the others, so this bounds entries, not memory); 0 turns the cache off.
  Default: ``max(max_slots, MIN_CACHE_SLOTS)``, within llama.cpp's 256 sequence ids.
* ``kv_layout``: ``unified`` (default: one pool of ``kv_capacity_tokens`` cells all sequences draw from,
  cached prefixes sharing cells) or ``streams`` (llama-server's layout: a stream of cells per sequence
  id, so a decode step scans only its own sequence's cells; cached prefixes are copies). With streams
  ``kv_capacity_tokens`` is the most cells memory holds: every slot gets a stream of ``context_length``
  cells (llama.cpp rounds a stream up to STREAM_ALIGN), cache entries get as many more streams as
  remain, up to ``cache_slots``; when not even the slots fit, their streams shrink (and the context
  with them) and the cache is off (:func:`stream_layout`).
* ``flash_attention``: ``llama-auto`` (default: llama.cpp's choice), ``on``, ``off``, or ``measured``: the
  faster of flash and plain attention on this device, timed once per model file (runtimes/llama_cpp/attention.py;
  the caller reserved plain attention's buffer: edgeopt.sizing.attention); until it is timed, llama.cpp's choice,
  and the timing runs when the caller says the model serves (``runtime.after_ready()``).
* ``offload``: an :class:`~edgeopt.runtimes.llama_cpp.rpc.RpcOffload`, the model split across llama.cpp
  RPC workers as edgeopt.sizing.split planned it (``edgeopt serve --workers``); overrides ``n_gpu_layers``.
* ``early_model``: an :class:`~edgeopt.server.startup.early_load.EarlyLoad`, the file's model already loading
  beside the server's imports; taken when it is this file with these GPU layers and no RPC split.
* ``kept_models``: a :class:`~edgeopt.runtimes.llama_cpp.kept_models.KeptModels` (a server of several models): the
  file's model is taken from it when an earlier runtime left it there, and left there by ``close()``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp

from edgeopt.backends import backend_for_runtime
from edgeopt.errors import ConfigError
from edgeopt.store.file_stamp import file_stamp
from edgeopt.sizing.layout import (KV_LAYOUTS, MAX_SEQUENCE_IDS, STREAM_ALIGN, STREAMS, UNIFIED,  # noqa: F401
                                   default_cache_slots, stream_layout)
from edgeopt.sizing.attention import RUNTIME_LLAMA_AUTO
from edgeopt.sizing.kv_types import KV_TYPES, check_head_dims
from edgeopt.profiles import DeviceProfile, load_profile
from edgeopt.profiles.host import usable_cpu_count
from edgeopt.profiles.platform import AcceleratorKind
from edgeopt.runtimes.llama_cpp.attention import resolve_flash_attention
from edgeopt.runtimes.llama_cpp.context import LlamaCppRuntime
from edgeopt.runtimes.llama_cpp.deferred_timing import DeferredTiming
from edgeopt.runtimes.llama_cpp.kept_models import KeptModels, anon_bytes
from edgeopt.runtimes.llama_cpp.kv_type import check_llama_kv_type
from edgeopt.runtimes.llama_cpp.model import default_gpu_layers, load_model, model_facts
from edgeopt.runtimes.llama_cpp.tokenizer import LlamaCppTokenizer

if TYPE_CHECKING:
    from edgeopt.runtimes.llama_cpp.matmul_inputs import MatmulInputTap
    from edgeopt.store.bundle import Manifest
    from edgeopt.runtimes.llama_cpp.rpc import RpcOffload

__all__ = ["LlamaCppRuntime", "LlamaCppTokenizer", "load", "load_gguf"]
# The registry's number (edgeopt/backends.py says why 128), so the runtime's batch is the one sizing assumed.
DEFAULT_MAX_BATCH_TOKENS = backend_for_runtime("llama_cpp").serving.batch_tokens
DRIVES = frozenset({AcceleratorKind.CUDA_GPU})  # the accelerators this runtime offloads to (a CUDA build's)
LLAMA_MAX_SEQ = MAX_SEQUENCE_IDS  # the stream arithmetic (StreamLayout, stream_layout) is edgeopt.sizing.layout's


def load(bundle_dir: Path, manifest: Manifest, **options: Any) -> LlamaCppRuntime:
    """Open the bundle's GGUF (``manifest.model_file``) with a context sized to memory."""
    return load_gguf(Path(bundle_dir) / manifest.model_file, **options)


def load_gguf(path: Path, *, kv_capacity_tokens: int | None = None, max_slots: int | None = None,
              max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, threads: int | None = None,
              n_gpu_layers: int | None = None, context_length: int | None = None,
              profile: DeviceProfile | None = None, kv_type: str = "f16",
              cache_slots: int | None = None, kv_layout: str = UNIFIED,
              offload: RpcOffload | None = None, draft_rows: int = 0,
              flash_attention: str = RUNTIME_LLAMA_AUTO, early_model: Any = None,
              matmul_tap: MatmulInputTap | None = None, kept_models: KeptModels | None = None) -> LlamaCppRuntime:
    if kv_capacity_tokens is None or max_slots is None:
        raise ConfigError(f"the llama.cpp runtime needs kv_capacity_tokens and max_slots (got {kv_capacity_tokens}, "
                          f"{max_slots})", "size them with edgeopt.sizing.shape.decide_serving_shape, as edgeopt "
                          "serve does")
    if kv_capacity_tokens < 1 or not 1 <= max_slots <= LLAMA_MAX_SEQ:
        raise ConfigError(f"kv_capacity_tokens={kv_capacity_tokens}, max_slots={max_slots} are invalid",
                          f"need kv_capacity_tokens >= 1 and 1 <= max_slots <= {LLAMA_MAX_SEQ}")
    if (max_batch_tokens < 1 or (threads is not None and threads < 1) or (cache_slots is not None and cache_slots < 0)
            or draft_rows < 0):
        raise ConfigError(f"max_batch_tokens={max_batch_tokens}, threads={threads}, cache_slots={cache_slots}, "
                          f"draft_rows={draft_rows} are invalid",
                          "max_batch_tokens and threads must be >= 1, cache_slots and draft_rows >= 0")
    check_llama_kv_type(kv_type)
    if kv_layout not in KV_LAYOUTS:
        raise ConfigError(f"--kv-layout {kv_layout!r} is not a llama.cpp KV layout",
                          f"use one of {', '.join(KV_LAYOUTS)}")
    profile = profile or load_profile("host")
    if n_gpu_layers is None and offload is None:
        profile.platform.refuse_unsupported("llama_cpp", profile.name, DRIVES, cpu_option="n_gpu_layers=0")
    if n_gpu_layers is None:
        n_gpu_layers = default_gpu_layers(profile)
    taken = early_model.take(Path(path), n_gpu_layers) if early_model is not None and offload is None else None
    keeps = kept_models if offload is None and taken is None else None  # an RPC split's model is the workers' too
    model_key = (Path(path).resolve(), file_stamp(Path(path)), n_gpu_layers) if keeps is not None else None
    kept = keeps.take(model_key) if keeps is not None else None
    before = anon_bytes()
    model = kept[0] if kept is not None else taken or load_model(Path(path), n_gpu_layers, offload)
    after = anon_bytes()
    # What keeping it would hold: what its load added to anonymous memory (vocabulary tables, repacked weights)
    held = kept[1] if kept is not None else (after - before if before is not None and after is not None else None)
    facts = model_facts(model, Path(path))
    context = min(context_length or facts.context_train, facts.context_train)
    cache_slots = default_cache_slots(max_slots) if cache_slots is None else min(cache_slots,
                                                                                  LLAMA_MAX_SEQ - max_slots)
    try:
        check_head_dims(kv_type, facts.head_dim_k, facts.head_dim_v, Path(path).name)
        if kv_layout == STREAMS:
            layout = stream_layout(kv_capacity_tokens, max_slots, cache_slots, context)
            kv_capacity_tokens, cache_slots = layout.total_cells, layout.cache_slots
        n_threads = threads or max_default_threads(profile)
        file_key = file_stamp(Path(path))
        on_cpu = n_gpu_layers == 0 and offload is None
        attention = resolve_flash_attention(flash_attention, Path(path), on_cpu=on_cpu,
                                            kv_quantized=KV_TYPES[kv_type].quantized, threads=n_threads,
                                            batch_tokens=max_batch_tokens, model_key=file_key)
        runtime = LlamaCppRuntime(model, facts, kv_capacity_tokens, max_slots, max_batch_tokens, n_threads, context,
                                  adaptive_threads=threads is None, kv_type=kv_type, cache_slots=cache_slots,
                                  kv_layout=kv_layout, file_key=file_key, draft_rows=draft_rows,
                                  flash_attention=attention.flash, kv_on_host=on_cpu, matmul_tap=matmul_tap)
        if attention.timing_due is not None:
            runtime.attention_timing = DeferredTiming(*attention.timing_due)  # runs at after_ready
        if keeps is not None and held is not None:
            runtime.keep_model = partial(keeps.keep, model_key, held_bytes=max(held, 0), path=Path(path))
        return runtime
    except Exception:
        llama_cpp.llama_model_free(model)
        raise


def max_default_threads(profile: DeviceProfile) -> int:
    """The profile's big cores (all its cores where they are alike), never more than this machine lets us run
    on (more threads than cores only spin)."""
    host = usable_cpu_count()
    return max(1, min(profile.platform.cpu.compute_threads or host, host))
