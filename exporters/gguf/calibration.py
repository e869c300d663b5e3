"""Which GGUF types use calibration text, and the importance matrix an export computes from it.

llama.cpp's quantizer weighs rounding errors by an importance matrix for every k-quant, IQ type and
legacy 4/5-bit type; Q8_0, the ternary types and the float types ignore it. ``--calibration-data``
with a type that would ignore it is refused (never silently dropped). The matrix is computed from the
checkpoint the exporter is given (after pruning and distillation), stored in the bundle as
``imatrix.gguf`` in llama.cpp's own format, and described in the manifest (hash, source text, tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError
from exporters.gguf.quant_types import FILE_TYPES

IMATRIX_FILE = "imatrix.gguf"
DEFAULT_CHUNKS = 32  # 16k tokens: llama.cpp's gains come from the first few thousand; CPU time grows linearly
_IGNORES_IMATRIX = frozenset({"F32", "F16", "BF16", "Q8_0", "TQ1_0", "TQ2_0"})


def uses_imatrix(quant: str) -> bool:
    return FILE_TYPES.get(quant.upper(), "F32") not in _IGNORES_IMATRIX


def calibration_refusal(quant: str) -> str | None:
    """Why GGUF ``quant`` cannot use calibration text, or None when it can."""
    if uses_imatrix(quant):
        return None
    return (f"GGUF {quant.upper()} is written without an importance matrix (llama.cpp's quantizer uses one for "
            "k-quants, IQ types and Q4_0..Q5_1 only)")


def compute_imatrix(model_dir: Path, out_dir: Path, options: dict[str, Any],
                    report: Callable[[str], None] = lambda _m: None) -> tuple[Any, dict[str, Any]]:
    """(matrix, manifest facts) from ``options['calibration_data']``; writes ``out_dir/imatrix.gguf``."""
    from edgeopt.bundle import sha256_file
    from edgeopt.textfile import read_text_file
    from edgeopt.model_spec import load_model_spec
    from exporters.gguf.imatrix_collect import CHUNK_SIZE, chunks, collect_imatrix, tokenize_text
    from exporters.gguf.imatrix_file import write_imatrix

    text_path = Path(options["calibration_data"])
    text = read_text_file(text_path, "calibration data", "--calibration-data", ConfigError)
    ids, bos = tokenize_text(model_dir, text)
    chunk_size = min(CHUNK_SIZE, load_model_spec(str(model_dir)).max_position_embeddings)
    token_chunks = chunks(ids, bos, chunk_size, max_chunks=int(options.get("calibration_chunks") or DEFAULT_CHUNKS))
    if not token_chunks:
        raise ConfigError(f"calibration data {text_path} gives {len(ids)} tokens, too few for an importance matrix",
                          "give a text of at least a few thousand words like what the model will see")
    source = options.get("calibration_source") or text_path.name
    matrix = collect_imatrix(model_dir, token_chunks, [source], report)
    write_imatrix(out_dir / IMATRIX_FILE, matrix)
    facts = {"file": IMATRIX_FILE, "sha256": sha256_file(out_dir / IMATRIX_FILE), "source": source,
             "text_sha256": options.get("calibration_sha256") or sha256_file(text_path),
             "tokens": sum(len(c) for c in token_chunks), "chunks": matrix.chunk_count,
             "chunk_size": matrix.chunk_size, "tensors": len(matrix.sums)}
    return matrix, facts
