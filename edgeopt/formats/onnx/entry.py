"""The onnx entry: optimum exports quantized by onnxruntime, with ONNX Runtime's measured memory model."""

from __future__ import annotations

from edgeopt.formats.entry import CALIBRATION_OPTIONS, Backend, ExportOption, ExportSpec, ServingSpec
from edgeopt.formats.memory_model import MemoryModel
from edgeopt.formats.onnx import memory
from edgeopt.formats.quant_table import Quant, QuantTable

QUANT_TABLE = QuantTable(
    quants=(
        Quant("fp32", 32),
        Quant("int8", 8, remedy="use --int8-method weight-only (blocks of 32) instead of dynamic"),
        Quant("int8-static", 8, remedy="use --quant int8 (weight-only), or another --calibration-method"),
        Quant("int4", 4, remedy="use --quant int8, or --int4-mix sensitive-int8 (the default) with "
                                "--int4-block-size 16"),
    ),
    candidates=("fp32", "int8", "int4"),
    encoder_candidates=("fp32", "int8"),  # encoders are small: INT4 MatMulNBits buys them little
    size_estimate="edgeopt.exporters.onnx.quant_types:estimate_onnx_bytes",
    sized="int4",  # --size: which MatMuls keep 8 bits, measured (exporters/onnx/int4/sized.py)
    help_examples=("int8", "int4"),
)
_QUANTIZED = tuple(name for name in QUANT_TABLE.names if name != "fp32")
_INT4 = ("int4",)

ENTRY = Backend(
    format="onnx", runtime="onnxruntime", quants=QUANT_TABLE,
    # Measured on SmolLM2-135M and all-MiniLM-L6-v2 served at full load (memory.py says how); a flat 200 MiB once
    # stood for all of it, 51% above a tiny model's peak and 35% under SmolLM2 fp32's.
    memory=MemoryModel(
        kv_element_bytes=4,  # the exported graph keeps its past_key_values in fp32
        runtime_overhead_bytes=memory.PROCESS_BYTES, process_bytes=memory.PROCESS_BYTES,
        overhead_per_vocab_entry=memory.LOGITS_BYTES_PER_VOCAB_ENTRY,
        kv_resident_copies=memory.KV_COPIES, prompt_kv_copies=memory.PROMPT_KV_COPIES,
        weights_extra="edgeopt.formats.onnx.memory:weights_extra_bytes",
        embedding_run="edgeopt.formats.onnx.memory:embedding_run_bytes",
    ),
    serving=ServingSpec(runtime_module="edgeopt.runtimes.onnxruntime", embeddings=True),
    export=ExportSpec(
        exporter_module="edgeopt.exporters.onnx.exporter", scorer="edgeopt.exporters.onnx.scorer:load_scorer",
        options={**CALIBRATION_OPTIONS,
                 "calibration_method": ExportOption("--calibration-method", ("int8-static",)),
                 "int8_method": ExportOption("--int8-method", ("int8",)),
                 "int4_block_size": ExportOption("--int4-block-size", _INT4),
                 "int4_mix": ExportOption("--int4-mix", _INT4), "int4_algorithm": ExportOption("--int4-algorithm", _INT4),
                 "int4_accuracy_level": ExportOption(quants=_INT4), "keep_fp": ExportOption("--keep-fp", _QUANTIZED),
                 "mix_size_bytes": ExportOption("--size", _INT4), "int4_smoothing": ExportOption(quants=_INT4)},
        calibration_examples=("int4", "int8-static"),
    ),
)
