"""The gguf entry: GGUF files served by llama.cpp, with its measured memory model."""

from __future__ import annotations

from edgeopt.formats.entry import CALIBRATION_OPTIONS, Backend, ExportOption, ExportSpec, ServingSpec
from edgeopt.formats.gguf.quants import MIX, QUANT_TABLE
from edgeopt.formats.memory_model import MemoryModel
from edgeopt.sizing.layout import KV_LAYOUTS

MIB = 1024**2

ENTRY = Backend(
    format="gguf", runtime="llama_cpp", quants=QUANT_TABLE,
    # Measured (RSS of `edgeopt serve` under load, llama.cpp's own buffer sizes, at the 128-token batch below) on
    # random models of Qwen2.5-0.5B's and Llama-3.2-1B's shapes with their real 151k / 128k vocabularies: the
    # Python server and libraries ~64 MiB; llama.cpp's vocabulary ~300 bytes a token (43 MiB at 151k); its compute
    # buffer 72 bytes (18 f32 activations) per unit of the feed-forward width per batch token (72 MiB at
    # Llama-3.2-1B's 8,192; this figure was once written as "a 512-token ubatch x 4.5 activations", the same 9,216
    # bytes per unit, while the runtime ran 128); one logits row per sequence id (a running slot and its prefix
    # cache id) in its output buffer and one in the graph (which outweighs the feed-forward activations when the
    # vocabulary is large and the model narrow). A flat 100 MiB left the 0.5B model at --memory 1GiB 27 MiB over
    # its budget; tests/server/test_memory_real_vocab.py checks the total. The process itself has grown since
    # (more API faces, their schemas and libraries): serving SmolLM2-135M at 4 x 1,024 and 4 x 512 tokens peaked
    # 5.5 to 10.5 MiB above a plan that counted 64 MiB for it; 78 MiB keeps the plan above the peak without
    # overstating small models (tests/server/test_resident_memory.py: measured <= planned <= 1.10 x measured).
    memory=MemoryModel(
        kv_element_bytes=2,  # llama.cpp's default f16 KV cache
        runtime_overhead_bytes=94 * MIB, overhead_per_vocab_entry=300, overhead_per_ffn_unit_per_batch_token=72,
        logits_rows_per_sequence=4, process_bytes=78 * MIB,
    ),
    serving=ServingSpec(
        runtime_module="edgeopt.runtimes.llama_cpp",
        # llama.cpp's compute buffer grows with the batch: on a ~200M model 512 tokens cost 27 MiB, 256 cost
        # 14 MiB, 128 about 7 MiB, which is what keeps `edgeopt serve` within bundle + KV + 120 MB there.
        # Decode steps of up to 128 sequences are unaffected; a long prompt is prefilled 128 tokens a step.
        batch_tokens=128,
        kv_cache_types=("f16", "q8_0", "q4_0"),  # llama.cpp's type_k/type_v (quantized: with flash attention)
        kv_layouts=KV_LAYOUTS,  # llama.cpp's kv_unified true / false
    ),
    export=ExportSpec(
        exporter_module="edgeopt.exporters.gguf.exporter", scorer="edgeopt.exporters.gguf.scorer:load_scorer",
        reference="edgeopt.exporters.gguf.reference:load_reference",
        tokenizer="edgeopt.exporters.gguf.scorer:eval_tokenizer",
        options={**CALIBRATION_OPTIONS, "calibration_source": ExportOption(),
                 "mix_size_bytes": ExportOption("--size", (MIX,)), "threads": ExportOption()},
        calibration_examples=("Q4_K_M", "IQ4_XS", MIX),
    ),
)
