"""llama.cpp quantization types by name, and the size each gives a model (used by the planner).

Pure Python on purpose: the planner must size a model without importing llama.cpp or torch.
The per-tensor rules mirror llama.cpp's quantizer (src/llama-quant.cpp) for the legacy and k-quant
file types so the estimate lands within a few percent of the real file: 1-D tensors stay F32, the
output matrix gets Q6_K, the _M/_L mixes give attn_v and ffn_down more bits in some layers, and a
type whose block does not divide a row falls back to a legacy type (or F16). The IQ mixes follow the
same source assuming an importance matrix is given (edgeopt computes one for them from calibration text).
"""

from __future__ import annotations

from edgeopt.formats.gguf.quants import MIX
from edgeopt.sources.gguf_metadata import FTYPE_IDS as GGUF_FTYPE_IDS
from edgeopt.sources.model_spec import ModelSpec, TensorInfo

# ggml block types: bytes per block and weights per block.
BLOCK = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1),
    "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32),
    "Q2_K": (84, 256), "Q3_K": (110, 256), "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256),
    "IQ1_S": (50, 256), "IQ1_M": (56, 256), "IQ2_XXS": (66, 256), "IQ2_XS": (74, 256), "IQ2_S": (82, 256),
    "IQ3_XXS": (98, 256), "IQ3_S": (110, 256), "IQ4_NL": (18, 32), "IQ4_XS": (136, 256),
    "TQ1_0": (54, 256), "TQ2_0": (66, 256),
}

# File types (llama_ftype) users ask for -> the base tensor type llama.cpp uses for them.
FILE_TYPES = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0",
    "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q5_K_S": "Q5_K", "Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K",
    "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1",
    "Q3_K_L": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_S": "Q3_K", "Q2_K": "Q2_K", "Q2_K_S": "Q2_K",
    "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS", "IQ3_S": "IQ3_S", "IQ3_M": "IQ3_S", "IQ3_XS": "IQ3_S",
    "IQ3_XXS": "IQ3_XXS", "IQ2_M": "IQ2_S", "IQ2_S": "IQ2_S", "IQ2_XS": "IQ2_XS", "IQ2_XXS": "IQ2_XXS",
    "IQ1_M": "IQ1_M", "IQ1_S": "IQ1_S", "TQ1_0": "TQ1_0", "TQ2_0": "TQ2_0",
}

# MIX: per-tensor types chosen by measured sensitivity to fit a size (exporters/gguf/mix/build.py); without a
# size it is made at Q4_K_M's, so that is what the planner counts for it. The quants a GGUF bundle may name
# are the format's quant table (edgeopt/formats/gguf/quants.py): FILE_TYPES and MIX.
MIX_DEFAULT_SIZE_OF = "Q4_K_M"

# llama_ftype enum values (llama.h): one table, beside the GGUF reader that names a file's type by it.
FTYPE_IDS = GGUF_FTYPE_IDS

# llama.cpp refuses these without an importance matrix.
NEEDS_IMATRIX = frozenset({"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "Q2_K_S"})

# When a row is not a multiple of the block, llama.cpp swaps a 256-block type for a 32-block one.
_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "TQ1_0": "Q4_0", "TQ2_0": "Q4_0", "Q4_K": "Q5_0",
             "Q5_K": "Q5_1", "Q6_K": "Q8_0", "IQ1_S": "IQ4_NL", "IQ1_M": "IQ4_NL", "IQ2_XXS": "IQ4_NL",
             "IQ2_XS": "IQ4_NL", "IQ2_S": "IQ4_NL", "IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL", "IQ4_XS": "IQ4_NL"}
_IQ_LOW = ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")
# The 1-2 bit mixes: one rule set of their own in llama.cpp (checked before every other type's rules).
_IQ2_GROUP = ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")


def _uses_more_bits(layer: int, n_layers: int) -> bool:
    """The first and last eighth of the layers, and every third in between, get more bits (_M mixes)."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def _is_output(tensor: TensorInfo, spec: ModelSpec) -> bool:
    return tensor.name == "lm_head.weight" or (spec.tie_word_embeddings and tensor.name == "model.embed_tokens.weight")


def _iq2_group_type(tensor: TensorInfo, base: str, ftype: str, spec: ModelSpec) -> str:
    """attn_v, the first eighth of ffn_down and attn_output get more bits in the 1-2 bit mixes."""
    wider = "IQ3_S" if ftype in ("IQ2_S", "IQ2_M") else "Q2_K"
    if tensor.name.endswith("v_proj.weight"):
        return "Q4_K" if spec.num_heads // max(spec.num_kv_heads, 1) >= 4 else wider
    if tensor.name.endswith("down_proj.weight"):
        return wider if tensor.layer is not None and tensor.layer < spec.num_layers // 8 else base
    if tensor.name.endswith("o_proj.weight"):
        return {"IQ1_S": "IQ2_XXS", "IQ1_M": "IQ2_XXS", "IQ2_S": "IQ3_S", "IQ2_M": "IQ3_S"}.get(ftype, base)
    return base


def _attn_v_type(base: str, ftype: str, layer: int, spec: ModelSpec) -> str:
    gqa = spec.num_heads // max(spec.num_kv_heads, 1)
    if ftype == "IQ3_XXS":
        return "Q4_K" if gqa >= 4 else "IQ3_XXS"
    if ftype in ("IQ3_XS", "IQ3_S") and gqa >= 4:
        return "Q4_K"
    if ftype == "IQ3_M":
        return "Q4_K"
    if ftype in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
        return "Q5_K"
    if ftype == "Q2_K":
        return "Q4_K" if gqa >= 4 else "Q3_K"
    if ftype == "Q2_K_S" and gqa >= 4:
        return "Q4_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if layer < 2 else "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype in ("Q4_K_M", "Q5_K_M") and _uses_more_bits(layer, spec.num_layers):
        return "Q6_K"
    if ftype == "Q4_K_S" and layer < 4:
        return "Q5_K"
    return base


def _ffn_down_type(base: str, ftype: str, layer: int, n_layers: int) -> str:
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q2_K_S" and layer < n_layers // 8:
        return "Q4_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if layer < n_layers // 16 else "Q4_K"
    if ftype == "IQ3_M" and layer < n_layers // 8:
        return "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype in ("Q4_K_M", "Q5_K_M") and _uses_more_bits(layer, n_layers):
        return "Q6_K"
    if ftype == "Q4_K_S" and layer < n_layers // 8:
        return "Q5_K"
    if ftype in ("Q4_0", "Q5_0") and layer < n_layers // 8:  # llama.cpp's rule when a matrix is given,
        return "Q4_1" if ftype == "Q4_0" else "Q5_1"  # and edgeopt gives one by default (self-calibration)
    return base


def _mixed_type(tensor: TensorInfo, ftype: str, spec: ModelSpec) -> str:
    """The type llama.cpp's mix picks before shape fallbacks."""
    base = FILE_TYPES[ftype]
    if _is_output(tensor, spec):
        if tensor.shape[-1] % BLOCK[base][1] != 0:
            return "Q8_0"
        if ftype in _IQ_LOW:
            return "Q5_K"
        return base if base == "Q8_0" else "Q6_K"
    if tensor.layer is None:  # untied token embeddings
        return {"TQ1_0": "Q4_K", "TQ2_0": "Q4_K", "IQ2_XXS": "Q2_K", "IQ2_XS": "Q2_K", "IQ1_S": "Q2_K",
                "IQ1_M": "Q2_K", "IQ2_S": "IQ3_S", "IQ2_M": "IQ3_S", "IQ3_XXS": "IQ3_S"}.get(ftype, base)
    if ftype in _IQ2_GROUP:
        return _iq2_group_type(tensor, base, ftype, spec)
    if tensor.name.endswith(("q_proj.weight", "k_proj.weight")):
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ftype, base)
    if tensor.name.endswith(("gate_proj.weight", "up_proj.weight")):
        middle = spec.num_layers // 8 <= tensor.layer < 7 * spec.num_layers // 8
        return "IQ3_XXS" if ftype == "IQ3_XS" and middle else base
    if tensor.name.endswith("v_proj.weight"):
        return _attn_v_type(base, ftype, tensor.layer, spec)
    if tensor.name.endswith("down_proj.weight"):
        return _ffn_down_type(base, ftype, tensor.layer, spec.num_layers)
    if tensor.name.endswith("qkv_proj.weight"):  # fused attn_qkv (Phi-3): its own rule in llama-quant.cpp
        return {"Q3_K_M": "Q4_K", "Q3_K_L": "Q4_K", "IQ3_M": "Q4_K", "Q4_K_M": "Q5_K", "Q5_K_M": "Q6_K"}.get(ftype, base)
    if tensor.name.endswith("o_proj.weight"):
        return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}.get(ftype, base)
    return base


def tensor_type(tensor: TensorInfo, ftype: str, spec: ModelSpec) -> str:
    base = FILE_TYPES[ftype]
    if len(tensor.shape) == 1:
        return "F32"
    if base in ("F32", "F16", "BF16"):
        return base
    chosen = _mixed_type(tensor, ftype, spec)
    row = tensor.shape[-1]
    if row % BLOCK[chosen][1] != 0:
        chosen = _FALLBACK.get(chosen, chosen)
        if row % BLOCK[chosen][1] != 0:
            chosen = "F16"
    return chosen


def tensor_bytes(tensor: TensorInfo, ttype: str) -> int:
    return type_bytes(ttype, tensor.numel)


def type_bytes(ttype: str, weights: int) -> int:
    """Bytes of ``weights`` values stored as ggml type ``ttype`` (whole blocks)."""
    block_bytes, block_size = BLOCK[ttype]
    return weights // block_size * block_bytes


# GGUF header cost. Per token: its string (8-byte length + ~7 bytes of text) and its type (4 bytes),
# plus a merge rule of similar size for BPE; per tensor: name, dims, type, offset and alignment.
_HEADER_BYTES = 8 * 1024
_BYTES_PER_TOKEN = 36
_BYTES_PER_TENSOR = 96


def estimate_gguf_bytes(spec: ModelSpec, ftype: str) -> int:
    """Predicted size of the GGUF file: tensor data plus metadata (the vocabulary dominates that)."""
    if ftype == MIX:
        ftype = MIX_DEFAULT_SIZE_OF
    return sum(tensor_bytes(t, tensor_type(t, ftype, spec)) for t in spec.tensors()) + metadata_bytes(spec)


def metadata_bytes(spec: ModelSpec) -> int:
    return _HEADER_BYTES + spec.vocab_size * _BYTES_PER_TOKEN + len(spec.tensors()) * _BYTES_PER_TENSOR
