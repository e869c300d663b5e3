"""The backend registry: one entry per bundle format says everything the rest of edgeopt needs about it.

Planner, pipeline, evaluation, profiles and the server look a format up here instead of keeping their
own table, so a new format is one :class:`Backend` entry plus its own modules (exporter, runtime,
scorer, size estimate). Dependency-free on purpose: entries name modules as strings, and
:func:`load_attr` imports one only when a caller needs it, so reading the registry never pulls in
llama.cpp, onnxruntime, torch or the exporters (the serving path reads it too).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from edgeopt.errors import ConfigError
from edgeopt.sizing import onnx_memory
from edgeopt.sizing.layout import KV_LAYOUTS

MIB = 1024**2


@dataclass(frozen=True)
class Backend:
    """One bundle format and the runtime that serves it. ``"module:attr"`` strings are loaded lazily."""

    format: str  # the bundle's `format` (`--format`)
    runtime: str  # the bundle's `runtime`: the name `edgeopt.runtimes.load_runtime` takes
    exporter_module: str  # imported before export; its Exporter subclass registers `format`
    runtime_module: str  # exposes load(bundle_dir, manifest, **options)
    scorer: str  # "module:function": load_scorer(bundle_dir, manifest, context=..., threads=...)
    quants: str  # "module:attr": every quant name the format knows, in its canonical spelling
    size_estimate: str  # "module:function": (ModelSpec, quant) -> weight bytes, pure Python
    quant_candidates: tuple[str, ...]  # what the planner sizes when no quant is asked for
    kv_element_bytes: float  # bytes of one cached K or V element at the runtime's default KV type
    runtime_overhead_bytes: int  # the runtime's fixed cost beside weights and KV: code, buffers, slack
    # Quants whose KV is kept in another dtype than the default (torch keeps KV in the checkpoint's dtype).
    kv_element_bytes_by_quant: Mapping[str, float] = field(default_factory=dict)
    # KV cache types the runtime can be asked for (--kv-type; edgeopt.sizing.kv_types), the first its default
    # (kv_element_bytes); () when it keeps one fixed dtype.
    kv_cache_types: tuple[str, ...] = ()
    # KV layouts the runtime can be asked for (--kv-layout; edgeopt.sizing.layout); () when it has only its own.
    kv_layouts: tuple[str, ...] = ()
    # "module:function": (DeviceProfile) -> candidates, when they depend on the device; "" when fixed.
    profile_candidates: str = ""
    encoder_quant_candidates: tuple[str, ...] = ()  # () when the format serves causal LMs only
    planned_by_default: bool = True  # `edgeopt plan` compares it when no --format is given
    # The quant that picks each tensor's type to fit a file size (plan/optimize --size); "" when none.
    sized_quant: str = ""
    # "module:function": (loaded Runtime, EngineConfig) -> ServingEngine | None, for a runtime that can bring its
    # own scheduler (torch on CUDA: transformers' paged continuous batching), which then owns the model; None
    # from it, or "" here: edgeopt's Engine drives the runtime.
    own_engine: str = ""
    # Tokens one runtime step carries when the runtime has a fixed batch buffer (llama.cpp's n_batch = n_ubatch):
    # the serving shape hands it to the runtime, and the compute-buffer estimate below is per token of it.
    # 0: the runtime takes a step of any size and states its own buffer once loaded (Runtime.max_batch_tokens).
    batch_tokens: int = 0
    embeddings: bool = False  # the format can hold an encoder served on /v1/embeddings
    # The runtime's memory that grows with the model, beside runtime_overhead_bytes (0: the fixed cost covers it).
    overhead_per_vocab_entry: int = 0  # the runtime's own tables of the vocabulary
    # Its compute buffer, per unit of the feed-forward width and per token of batch_tokens.
    overhead_per_ffn_unit_per_batch_token: int = 0
    logits_rows_per_sequence: int = 0  # f32 rows of vocabulary width it reserves per sequence
    # Of runtime_overhead_bytes, the Python server process itself (interpreter, numpy, FastAPI, the runtime's
    # library): what `edgeopt plan` shows as "process" beside the runtime's buffers (edgeopt.sizing.resident).
    process_bytes: int = 0
    # A runtime that holds its KV cache more than once at a step's peak (ONNX Runtime: edgeopt.sizing.onnx_memory):
    # resident bytes per KV cell in units of the cell's own bytes, and the longest sequence's KV held that many
    # times more while its prompt is prefilled.
    kv_resident_copies: float = 1.0
    prompt_kv_copies: float = 0.0
    # "module:function": (weights_bytes, vocab_size, hidden_size, tied_embeddings) -> bytes the runtime builds from
    # the file beyond the file's own; "" when it maps the file as it is (llama.cpp).
    weights_extra: str = ""
    # "module:function": (hidden_size, heads, intermediate_size, input_tokens) -> bytes one run of the largest batch
    # an embedding server makes allocates; "" when the fixed overhead covers it.
    embedding_run: str = ""

    def kv_element_bytes_for(self, quant: str) -> float:
        return self.kv_element_bytes_by_quant.get(quant, self.kv_element_bytes)

    def model_overhead_bytes(self, vocab_size: int, intermediate_size: int) -> int:
        """The runtime's memory beside weights, KV and the sequences' logits rows, for one model."""
        return (self.runtime_overhead_bytes + vocab_size * self.overhead_per_vocab_entry
                + intermediate_size * self.overhead_per_ffn_unit_per_batch_token * self.batch_tokens)

    def logits_bytes_per_sequence(self, vocab_size: int) -> int:
        return self.logits_rows_per_sequence * vocab_size * 4

    @property
    def serves_encoders(self) -> bool:
        return self.embeddings and bool(self.encoder_quant_candidates)


_BUILTIN = (
    Backend(
        format="gguf", runtime="llama_cpp", exporter_module="edgeopt.exporters.gguf.exporter",
        runtime_module="edgeopt.runtimes.llama_cpp", scorer="edgeopt.exporters.gguf.scorer:load_scorer",
        quants="edgeopt.exporters.gguf.quant_types:QUANTS", size_estimate="edgeopt.exporters.gguf.quant_types:estimate_gguf_bytes",
        quant_candidates=("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"), sized_quant="MIX",
        kv_element_bytes=2,  # llama.cpp's default f16 KV cache
        kv_cache_types=("f16", "q8_0", "q4_0"),  # llama.cpp's type_k/type_v (quantized: with flash attention)
        kv_layouts=KV_LAYOUTS,  # llama.cpp's kv_unified true / false
        # llama.cpp's compute buffer grows with the batch: on a ~200M model 512 tokens cost 27 MiB, 256 cost
        # 14 MiB, 128 about 7 MiB, which is what keeps `edgeopt serve` within bundle + KV + 120 MB there.
        # Decode steps of up to 128 sequences are unaffected; a long prompt is prefilled 128 tokens a step.
        batch_tokens=128,
        # Measured (RSS of `edgeopt serve` under load, llama.cpp's own buffer sizes, at the 128-token batch
        # above) on random models of Qwen2.5-0.5B's and Llama-3.2-1B's shapes with their real 151k / 128k
        # vocabularies: the Python server and libraries ~64 MiB; llama.cpp's vocabulary ~300 bytes a token
        # (43 MiB at 151k); its compute buffer 72 bytes (18 f32 activations) per unit of the feed-forward
        # width per batch token (72 MiB at Llama-3.2-1B's 8,192; this figure was once written as "a 512-token
        # ubatch x 4.5 activations", the same 9,216 bytes per unit, while the runtime ran 128); one logits
        # row per sequence id (a running slot and its prefix cache id) in its output buffer and one in the
        # graph (which outweighs the feed-forward activations when the vocabulary is large and the model
        # narrow). A flat 100 MiB left the 0.5B model at --memory 1GiB 27 MiB over its budget;
        # tests/server/test_memory_real_vocab.py checks the total. The process itself has grown since (more API
        # faces, their schemas and libraries): serving SmolLM2-135M at 4 x 1,024 and 4 x 512 tokens peaked 5.5 to
        # 10.5 MiB above a plan that counted 64 MiB for it; 78 MiB keeps the plan above the peak without
        # overstating small models (tests/server/test_resident_memory.py: measured <= planned <= 1.10 x measured).
        runtime_overhead_bytes=94 * MIB, overhead_per_vocab_entry=300, overhead_per_ffn_unit_per_batch_token=72,
        logits_rows_per_sequence=4, process_bytes=78 * MIB,
    ),
    Backend(
        format="onnx", runtime="onnxruntime", exporter_module="edgeopt.exporters.onnx.exporter",
        runtime_module="edgeopt.runtimes.onnxruntime", scorer="edgeopt.exporters.onnx.scorer:load_scorer",
        quants="edgeopt.exporters.onnx.quant_types:QUANTS", size_estimate="edgeopt.exporters.onnx.quant_types:estimate_onnx_bytes",
        quant_candidates=("fp32", "int8", "int4"),
        sized_quant="int4",  # --size: which MatMuls keep 8 bits, measured (exporters/onnx/int4_sized.py)
        # Encoders are small: INT4 MatMulNBits buys them little.
        encoder_quant_candidates=("fp32", "int8"),
        kv_element_bytes=4,  # the exported graph keeps its past_key_values in fp32
        embeddings=True,
        # Measured on SmolLM2-135M and all-MiniLM-L6-v2 served at full load (edgeopt/sizing/onnx_memory.py says
        # how); a flat 200 MiB once stood for all of it, 51% above a tiny model's peak and 35% under SmolLM2 fp32's.
        runtime_overhead_bytes=onnx_memory.PROCESS_BYTES, process_bytes=onnx_memory.PROCESS_BYTES,
        overhead_per_vocab_entry=onnx_memory.LOGITS_BYTES_PER_VOCAB_ENTRY,
        kv_resident_copies=onnx_memory.KV_COPIES, prompt_kv_copies=onnx_memory.PROMPT_KV_COPIES,
        weights_extra="edgeopt.sizing.onnx_memory:weights_extra_bytes",
        embedding_run="edgeopt.sizing.onnx_memory:embedding_run_bytes",
    ),
    Backend(
        format="torch", runtime="torch", exporter_module="edgeopt.exporters.torch_export",
        runtime_module="edgeopt.runtimes.torch", scorer="edgeopt.exporters.torch_scorer:load_scorer",
        quants="edgeopt.exporters.torch_sizes:TORCH_DTYPES", size_estimate="edgeopt.exporters.torch_sizes:estimate_torch_bytes",
        quant_candidates=(), profile_candidates="edgeopt.exporters.torch_sizes:torch_candidates",  # by device
        kv_element_bytes=2, kv_element_bytes_by_quant=MappingProxyType({"fp32": 4}),  # KV in the checkpoint's dtype
        # Planned only when asked for: it is the GPU targets' format. Measured on an H100 (torch 2.11, transformers
        # 5.17, paged engine): besides weights and KV the server's GPU held 1175 MiB (CUDA context, cuBLAS
        # workspaces, the batch's buffers); the 600 MiB this was put at let a Jetson-sized pool overflow by 242 MiB.
        runtime_overhead_bytes=1280 * MIB, planned_by_default=False,
        own_engine="edgeopt.paged_batching:engine_for",  # on CUDA; the CPU runtime runs under our Engine
    ),
)
_REGISTRY: dict[str, Backend] = {entry.format: entry for entry in _BUILTIN}


def formats() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def runtimes() -> tuple[str, ...]:
    return tuple(dict.fromkeys(entry.runtime for entry in _REGISTRY.values()))


def backend(fmt: str) -> Backend:
    """The entry of format ``fmt``; an unknown name is refused with the valid ones."""
    entry = _REGISTRY.get(fmt)
    if entry is None:
        raise ConfigError(f"unknown format {fmt!r}", f"valid formats: {', '.join(_REGISTRY)}")
    return entry


def backend_for_runtime(runtime: str) -> Backend:
    """The entry whose bundles ``runtime`` serves; an unknown runtime is refused with the valid ones."""
    entry = next((e for e in _REGISTRY.values() if e.runtime == runtime), None)
    if entry is None:
        raise ConfigError(f"unknown runtime {runtime!r}", f"valid runtimes: {', '.join(runtimes())}")
    return entry


def register(entry: Backend) -> None:
    """Add (or replace) a format: how a plugin, or a test, adds a fourth backend."""
    _REGISTRY[entry.format] = entry


def unregister(fmt: str) -> None:
    """Remove a format added with :func:`register` (built-in formats stay)."""
    if fmt in {entry.format for entry in _BUILTIN}:
        raise ConfigError(f"format {fmt!r} is built in and cannot be removed", "unregister only what you registered")
    _REGISTRY.pop(fmt, None)


def load_attr(target: str) -> Any:
    """Import ``"module:attr"`` (or a bare ``"module"``) named by an entry, only now that it is needed."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module
