"""ONNX quantization modes and the size each gives a model (used by the planner, pure Python)."""

from __future__ import annotations

from edgeopt.model_spec import ModelSpec

QUANTS = ("fp32", "int8", "int8-static", "int4")  # what ONNXExporter writes

# Bytes per weight of the transformer-block matrices for each mode. INT4 MatMulNBits stores 4 bits
# plus one fp32 scale per block of 32 (and packed zero points when asymmetric): 0.5 + 4/32 + 0.5/32.
_MATRIX_BYTES = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0 + 4 / 1024, "int8-static": 1.0 + 4 / 1024,
                 "int4": 0.5 + 4 / 32 + 0.5 / 32}


def estimate_onnx_bytes(spec: ModelSpec, quant: str) -> int:
    """Predicted size of the ONNX model data.

    The embedding (a Gather) stays fp32 except in fp16 mode; the lm_head is quantized with the other
    MatMuls. optimum exports a tied lm_head as its own initializer, so it is counted even when tied.
    """
    matrix = _MATRIX_BYTES[quant]
    embed_bytes = 2.0 if quant == "fp16" else 4.0
    total = 0.0
    for t in spec.tensors():
        if t.name == "model.embed_tokens.weight":
            total += t.numel * embed_bytes
        elif len(t.shape) == 2:
            total += t.numel * matrix
        else:
            total += t.numel * 4.0
    if spec.tie_word_embeddings:
        total += spec.vocab_size * spec.hidden_size * matrix
    return int(total)
