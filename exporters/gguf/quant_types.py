"""llama.cpp quantization types by name, and the size each gives a model (used by the planner).

Pure Python on purpose: the planner must size a model without importing llama.cpp or torch.
The per-tensor rules follow what llama.cpp's quantizer does to keep the estimate within a few
percent of the real file: 1-D tensors stay F32, the output matrix gets more bits, k-quants fall
back to legacy types when a row is not a multiple of 256.
"""

from __future__ import annotations

from edgeopt.model_spec import ModelSpec, TensorInfo

# ggml block types: bytes per block and weights per block.
BLOCK = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1),
    "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32),
    "Q2_K": (84, 256), "Q3_K": (110, 256), "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256),
}

# File types (llama_ftype) users ask for -> the base tensor type llama.cpp uses for them.
FILE_TYPES = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0",
    "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q5_K_S": "Q5_K", "Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K",
    "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1",
    "Q3_K_L": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_S": "Q3_K", "Q2_K": "Q2_K",
}

# When a row is not a multiple of 256, llama.cpp swaps a k-quant for the nearest legacy type.
_K_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def _uses_more_bits(layer: int, n_layers: int) -> bool:
    """The first and last eighth of the layers, and every third in between, get more bits (_M mixes)."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def tensor_type(tensor: TensorInfo, ftype: str, spec: ModelSpec) -> str:
    base = FILE_TYPES[ftype]
    if len(tensor.shape) == 1:
        return "F32"
    if base in ("F32", "F16", "BF16"):
        return base
    is_output = tensor.name == "lm_head.weight" or (
        spec.tie_word_embeddings and tensor.name == "model.embed_tokens.weight"
    )
    chosen = base
    if is_output and base != "Q8_0":
        chosen = "Q6_K"
    elif ftype in ("Q4_K_M", "Q5_K_M") and tensor.layer is not None:
        if tensor.name.endswith(("v_proj.weight", "down_proj.weight")) and _uses_more_bits(tensor.layer, spec.num_layers):
            chosen = "Q6_K"
    row = tensor.shape[-1]
    if chosen in _K_FALLBACK and row % 256 != 0:
        chosen = _K_FALLBACK[chosen]
    if BLOCK[chosen][1] > 1 and row % BLOCK[chosen][1] != 0:
        chosen = "F16"
    return chosen


def tensor_bytes(tensor: TensorInfo, ttype: str) -> int:
    block_bytes, block_size = BLOCK[ttype]
    return tensor.numel // block_size * block_bytes


def estimate_gguf_bytes(spec: ModelSpec, ftype: str) -> int:
    """Predicted size of the GGUF file: tensor data plus metadata (the vocabulary dominates that)."""
    data = sum(tensor_bytes(t, tensor_type(t, ftype, spec)) for t in spec.tensors())
    metadata = 64 * 1024 + spec.vocab_size * 24  # token strings, scores and types
    return data + metadata
