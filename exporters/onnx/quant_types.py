"""ONNX quantization modes and the size each gives a model (used by the planner, pure Python).

Measured on optimum exports quantized by onnxruntime (see tests/exporters/test_onnx_sizes.py):
* the token embedding (a Gather) stays fp32 in fp32, dynamic and static INT8 and in encoders; a decoder's INT8
  (weight-only) and INT4 store it as INT8 blocks of 32 (exporters/onnx/embedding_quant.py); a tied lm_head shares
  it in every mode (no copy);
* a decoder's INT8 (weight-only MatMulNBits, symmetric, blocks of 32) stores 8 bits plus one fp32 scale
  per block (INT4 keeps the INT4_INT8_ROLES projections so, exporters/onnx/quantize.py); an encoder's INT8 (dynamic) stores int8 plus, per output channel, an fp32 scale and an int8
  zero point; INT4 MatMulNBits (asymmetric, blocks of 32) stores 4 bits plus one fp32 scale and a 4-bit zero
  point per block (the zero points of a row packed two to a byte);
* norms and biases stay fp32;
* INT4 and INT8 decoders are fused first (exporters/onnx/fusion.py): RotaryEmbedding reads fp32 cos and sin
  tables of max_position_embeddings x head_dim / 2 each, shared by every layer;
* the graph itself (node and tensor names, shapes) costs a few tens of KB per layer, more when each
  MatMul became a quantize / integer-matmul / rescale chain. Negligible for real models, but it keeps
  the estimate honest for the small ones tests use.
"""

from __future__ import annotations

from edgeopt.sources.architectures import RERANK_KIND

from edgeopt.sources.model_spec import ModelSpec

INT4_BLOCK = 32
INT4_INT8_ROLES = ("v_proj", "o_proj", "down_proj", "lm_head")  # why: exporters/onnx/quantize.py
# One figure per quant of the format's table (edgeopt/formats/onnx/entry.py).
GRAPH_BYTES_PER_LAYER = {"fp32": 44_000, "int8": 30_000, "int8-static": 75_000, "int4": 30_000}
# Encoders (BERT layers: biases and LayerNorms, no KV outputs), measured on tiny BERT exports.
ENCODER_GRAPH_BYTES_PER_LAYER = {"fp32": 15_000, "int8": 30_000, "int8-static": 35_000, "int4": 30_000}


def _linear_bytes(out_features: int, in_features: int, quant: str, encoder: bool) -> float:
    numel = out_features * in_features
    if quant == "fp32":
        return numel * 4.0
    blocks = out_features * -(-in_features // INT4_BLOCK)  # MatMulNBits pads K up to whole blocks
    if quant == "int8" and not encoder:  # weight-only MatMulNBits
        return blocks * (INT4_BLOCK + 4.0)
    if quant in ("int8", "int8-static"):
        return numel + out_features * 5.0  # int8 weights + fp32 scale + int8 zero point per channel
    zero_point_bytes = out_features * -(-(blocks // out_features) // 2)
    return blocks * (INT4_BLOCK / 2 + 4.0) + zero_point_bytes


def estimate_onnx_bytes(spec: ModelSpec, quant: str) -> int:
    """Predicted size of the bundle's ONNX files (graph + weights) for ``quant``."""
    per_layer = ENCODER_GRAPH_BYTES_PER_LAYER if spec.is_encoder else GRAPH_BYTES_PER_LAYER
    total = float(per_layer[quant] * spec.num_layers)
    reranker = spec.kind == RERANK_KIND  # its tensors sit under "bert."; its classifier reads the pooler
    for t in spec.tensors():
        name = t.name.removeprefix(f"{spec.arch}.") if reranker else t.name
        if name.startswith("pooler.") and not reranker:  # the feature-extraction graph outputs last_hidden_state only
            continue
        # Embedding tables are Gathers, kept fp32 (encoders: word, position and token-type tables, and
        # MPNet's relative-position bias) except a decoder's token table under weight-only INT8 and INT4.
        if t.name == "model.embed_tokens.weight" and quant in ("int8", "int4") and not spec.is_encoder \
                and t.shape[1] % INT4_BLOCK == 0:
            total += _linear_bytes(t.shape[0], t.shape[1], "int8", encoder=False)
        elif (t.name == "model.embed_tokens.weight" or name.startswith("embeddings.") or len(t.shape) != 2
                or t.name.endswith("relative_attention_bias.weight")):
            total += t.numel * 4.0
        else:
            eight_bit = quant == "int4" and not spec.is_encoder and any(f"{r}." in t.name for r in INT4_INT8_ROLES)
            total += _linear_bytes(t.shape[0], t.shape[1], "int8" if eight_bit else quant, spec.is_encoder)
    if quant == "int4" or (quant == "int8" and not spec.is_encoder):
        total += 2 * spec.max_position_embeddings * (spec.head_dim // 2) * 4.0
    return int(total)
