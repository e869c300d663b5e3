"""The KV cache type of a llama.cpp context (``--kv-type``): ggml type ids and the flash attention a
quantized cache needs.

llama.cpp dequantizes a q8_0/q4_0 V cache only inside its flash-attention kernel: without flash
attention it refuses the context ("quantized V cache requires flash_attn"). So a quantized type turns
flash attention on explicitly (ENABLED rather than llama.cpp's AUTO, which would pick the same here,
so that a backend without the kernel fails at load instead of silently running another path). f16
leaves the context's attention setting alone. Sizes per type live in :mod:`edgeopt.sizing.kv_types`.
"""

from __future__ import annotations

import llama_cpp

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.sizing.kv_types import KV_TYPES, REFERENCE_KV_TYPE

GGML_KV_TYPES = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16,
                 "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}


def check_llama_kv_type(kv_type: str) -> None:
    """A type llama.cpp serves, or the evaluation reference's f32."""
    valid = backends.backend_for_runtime("llama_cpp").serving.kv_cache_types
    if kv_type not in valid and kv_type != REFERENCE_KV_TYPE:
        raise ConfigError(f"KV cache type {kv_type!r} is not one llama.cpp serves", f"valid: {', '.join(valid)}")


def configure_kv_cache(params: llama_cpp.llama_context_params, kv_type: str) -> None:
    """Set K and V cache types (one type for both, as llama-server's -ctk/-ctv are usually set)."""
    params.type_k = params.type_v = GGML_KV_TYPES[kv_type]
    if KV_TYPES[kv_type].quantized:
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
