"""llama.cpp's file types as GGUF bundles name them, each with the weight bit width it is made at (the
quality floor's anchor; edgeopt.exporters.gguf.quant_types sizes them tensor by tensor)."""

from __future__ import annotations

from edgeopt.formats.quant_table import Quant, QuantTable, quants_of_width

MIX = "MIX"  # per-tensor types chosen by measured sensitivity to fit a size (exporters/gguf/mix/build.py)

QUANT_TABLE = QuantTable(
    quants=(
        *quants_of_width(32, "F32"), *quants_of_width(16, "F16", "BF16"), *quants_of_width(8, "Q8_0"),
        *quants_of_width(6, "Q6_K"), *quants_of_width(5, "Q5_K_M", "Q5_K_S"),
        *quants_of_width(4, "Q4_K_M", "Q4_K_S", "Q4_0", "Q4_1"), *quants_of_width(5, "Q5_0", "Q5_1"),
        *quants_of_width(3, "Q3_K_L", "Q3_K_M", "Q3_K_S"), *quants_of_width(2, "Q2_K", "Q2_K_S"),
        *quants_of_width(4, "IQ4_NL", "IQ4_XS"), *quants_of_width(3, "IQ3_S", "IQ3_M", "IQ3_XS", "IQ3_XXS"),
        *quants_of_width(2, "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS"), *quants_of_width(1, "IQ1_M", "IQ1_S"),
        *quants_of_width(1, "TQ1_0"), *quants_of_width(2, "TQ2_0"),
        Quant(MIX, None),  # types of several widths: held to the top-1 floor only
    ),
    candidates=("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"),
    size_estimate="edgeopt.exporters.gguf.quant_types:estimate_gguf_bytes",
    sized=MIX,
    help_examples=("Q4_K_M", "Q8_0", MIX),
    lower_bits_remedy="use a quant with more bits (e.g. Q5_K_M, Q6_K, Q8_0)",
)

# llama.cpp's quantizer weighs rounding errors by an importance matrix for every k-quant, IQ type and legacy 4/5-bit
# type; these ignore one (exporters/gguf/calibration.py refuses --calibration-data with them).
WITHOUT_MATRIX = frozenset({"F32", "F16", "BF16", "Q8_0", "TQ1_0", "TQ2_0"})


def uses_imatrix(quant: str) -> bool:
    """Whether GGUF ``quant`` is written with an importance matrix (False for a name the table does not know)."""
    name = quant.upper()
    return name not in WITHOUT_MATRIX and any(q.name == name for q in QUANT_TABLE.quants)
