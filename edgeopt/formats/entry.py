"""One format's registry entry (:class:`Backend`): its identity plus four typed parts, each what one side of
edgeopt reads of the format.

    quants   QuantTable   names, weight bits, planner candidates, the sized quant, --quant help, floor remedies
    memory   MemoryModel  KV element bytes, the runtime's overheads and copies, what it builds from the file
    serving  ServingSpec  the runtime's module, batch, KV types and layouts, embeddings, its own engine
    export   ExportSpec   the exporter and scorer modules, the export options it reads

Code is named by ``"module:attr"`` strings (imported only when needed, :func:`edgeopt.backends.load_attr`), so a
descriptor module stays dependency-free and the serving path reads entries without importing llama.cpp,
onnxruntime, torch or the exporters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edgeopt.formats.memory_model import MemoryModel
from edgeopt.formats.quant_table import QuantTable


@dataclass(frozen=True)
class ServingSpec:
    runtime_module: str  # exposes load(bundle_dir, manifest, **options)
    # Tokens one runtime step carries when the runtime has a fixed batch buffer (llama.cpp's n_batch = n_ubatch):
    # the serving shape hands it to the runtime, and the memory model's compute buffer is per token of it.
    # 0: the runtime takes a step of any size and states its own buffer once loaded (Runtime.max_batch_tokens).
    batch_tokens: int = 0
    # KV cache types the runtime can be asked for (--kv-type; edgeopt.sizing.kv_types), the first its default
    # (MemoryModel.kv_element_bytes); () when it keeps one fixed dtype.
    kv_cache_types: tuple[str, ...] = ()
    # KV layouts the runtime can be asked for (--kv-layout; edgeopt.sizing.layout); () when it has only its own.
    kv_layouts: tuple[str, ...] = ()
    embeddings: bool = False  # the format can hold an encoder served on /v1/embeddings
    # "module:function": (loaded Runtime, EngineConfig) -> ServingEngine | None, for a runtime that can bring its
    # own scheduler (torch on CUDA: transformers' paged continuous batching), which then owns the model; None
    # from it, or "" here: edgeopt's Engine drives the runtime.
    own_engine: str = ""


@dataclass(frozen=True)
class ExportOption:
    """One export option an exporter reads (a key of OptimizeOptions.export_options)."""

    flag: str = ""  # the optimize flag that sets it; "" for keys set by code (tests, benches, the pipeline)
    quants: tuple[str, ...] | None = None  # the quants that read it; None: every quant


# The calibration text's options, read the same way by every exporter that calibrates.
CALIBRATION_OPTIONS: Mapping[str, ExportOption] = {
    "calibration_data": ExportOption("--calibration-data"), "calibration_sha256": ExportOption(),
    "calibration_chunks": ExportOption(), "self_calibration": ExportOption("--no-self-calibration"),
}


@dataclass(frozen=True)
class ExportSpec:
    exporter_module: str  # imported before export; its Exporter subclass registers the format
    scorer: str  # "module:function": load_scorer(bundle_dir, manifest, context=..., threads=...)
    # "module:function": load_reference(original_model_dir, workbench, context=..., threads=...), the original scored
    # in this format's own runtime from a file the export leaves in the run's workbench (GGUF: the unquantized file,
    # memory-mapped); None: the evaluation loads the original with transformers in float32.
    reference: str | None = None
    # "module:function": eval_tokenizer(bundle_dir, manifest) -> a context manager yielding what tokenizes the
    # evaluation text (``encode(text)``, ``bos``: the id the model expects first, or None); GGUF: llama.cpp's own
    # from the bundle's file. None: transformers' AutoTokenizer from the bundle's tokenizer files (which imports
    # torch: half a gigabyte of a small model's evaluation).
    tokenizer: str | None = None
    # Every option the exporter reads; the pipeline refuses any other before work (edgeopt.optimize.export_options),
    # so none is silently ignored.
    options: Mapping[str, ExportOption] = field(default_factory=dict)
    calibration_examples: tuple[str, ...] = ()  # quants that read --calibration-data, for a refusal's hint


@dataclass(frozen=True)
class Backend:
    """One bundle format and the runtime that serves it."""

    format: str  # the bundle's `format` (`--format`)
    runtime: str  # the bundle's `runtime`: the name `edgeopt.runtimes.load_runtime` takes
    quants: QuantTable
    memory: MemoryModel
    serving: ServingSpec
    export: ExportSpec
    planned_by_default: bool = True  # `edgeopt plan` compares it when no --format is given

    def kv_element_bytes_for(self, quant: str) -> float:
        return self.memory.kv_element_bytes_for(quant)

    def model_overhead_bytes(self, vocab_size: int, intermediate_size: int) -> int:
        """The runtime's memory beside weights, KV and the sequences' logits rows, for one model."""
        return self.memory.overhead_bytes(vocab_size, intermediate_size, self.serving.batch_tokens)

    def logits_bytes_per_sequence(self, vocab_size: int) -> int:
        return self.memory.logits_bytes_per_sequence(vocab_size)

    @property
    def serves_encoders(self) -> bool:
        return self.serving.embeddings and bool(self.quants.encoder_candidates)
