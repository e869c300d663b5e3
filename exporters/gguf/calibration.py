"""Which GGUF types use calibration text, and the importance matrix an export computes from it.

llama.cpp's quantizer weighs rounding errors by an importance matrix for every k-quant, IQ type and
legacy 4/5-bit type; Q8_0, the ternary types and the float types ignore it. ``--calibration-data``
with a type that would ignore it is refused (never silently dropped). The matrix is computed from the
unquantized GGUF converted from the checkpoint the exporter is given (after pruning and distillation;
exporters/gguf/imatrix_collect.py), stored in the bundle as
``imatrix.gguf`` in llama.cpp's own format, and described in the manifest (hash, source text, tokens).
Without calibration text, the types that use a matrix get one from text the model writes itself
(exporters/gguf/self_calibration.py), recorded as ``source: "generated: N tokens from K seed prompts"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix
from edgeopt.formats.gguf.quants import uses_imatrix
from edgeopt.exporters.generated_text import self_calibrates

IMATRIX_FILE = "imatrix.gguf"
DEFAULT_CHUNKS = 32  # 16k tokens: llama.cpp's gains come from the first few thousand; CPU time grows linearly
def calibration_refusal(quant: str) -> str | None:
    """Why GGUF ``quant`` cannot use calibration text, or None when it can."""
    if uses_imatrix(quant):
        return None
    return (f"GGUF {quant.upper()} is written without an importance matrix (llama.cpp's quantizer uses one for "
            "k-quants, IQ types and Q4_0..Q5_1 only)")


@dataclass(frozen=True)
class Calibration:
    """An export's importance matrix, its manifest facts, and the token chunks it was computed from (which
    a mix, exporters/gguf/mix/build.py, also measures sensitivity on)."""

    matrix: ImportanceMatrix
    facts: dict[str, Any]
    chunks: list[list[int]]


def export_imatrix(model_dir: Path, gguf: Path, out_dir: Path, quant: str, options: dict[str, Any],
                   report: Callable[[str], None] = lambda _m: None) -> Calibration | None:
    """The importance matrix a ``quant`` export uses, or None: from ``--calibration-data`` when given, else
    (unless ``options['self_calibration']`` is False) from text the model writes itself, sampled from
    ``gguf`` (the unquantized intermediate file, which the matrix is measured on too)."""
    if options.get("calibration_data") is not None:
        return compute_imatrix(model_dir, gguf, out_dir, options, report)
    if uses_imatrix(quant) and self_calibrates(options):
        return generated_imatrix(model_dir, gguf, out_dir, options, report)
    return None


def _store(matrix: ImportanceMatrix, out_dir: Path, token_chunks: list[list[int]], facts: dict[str, Any]) -> dict[str, Any]:
    """Write ``out_dir/imatrix.gguf``; the manifest facts describing it."""
    from edgeopt.store.bundle import sha256_file
    from edgeopt.exporters.gguf.imatrix_file import write_imatrix

    write_imatrix(out_dir / IMATRIX_FILE, matrix)
    return {"file": IMATRIX_FILE, "sha256": sha256_file(out_dir / IMATRIX_FILE), **facts,
            "tokens": sum(len(c) for c in token_chunks), "chunks": matrix.chunk_count,
            "chunk_size": matrix.chunk_size, "tensors": len(matrix.sums)}


def compute_imatrix(model_dir: Path, gguf: Path, out_dir: Path, options: dict[str, Any],
                    report: Callable[[str], None] = lambda _m: None) -> Calibration:
    """The matrix of ``options['calibration_data']`` (tokenized with ``model_dir``'s tokenizer), measured on
    ``gguf`` (the unquantized intermediate); writes ``out_dir/imatrix.gguf``."""
    from edgeopt.store.bundle import sha256_file
    from edgeopt.exporters.gguf.imatrix_collect import collect_imatrix
    from edgeopt.exporters.input_energy import text_file_chunks

    text_path = Path(options["calibration_data"])
    token_chunks = text_file_chunks(model_dir, text_path, int(options.get("calibration_chunks") or DEFAULT_CHUNKS),
                                    "for an importance matrix")
    source = options.get("calibration_source") or text_path.name
    matrix = collect_imatrix(gguf, token_chunks, [source], report)
    facts = {"source": source, "text_sha256": options.get("calibration_sha256") or sha256_file(text_path)}
    return Calibration(matrix, _store(matrix, out_dir, token_chunks, facts), token_chunks)


def generated_imatrix(model_dir: Path, gguf: Path, out_dir: Path, options: dict[str, Any],
                      report: Callable[[str], None] = lambda _m: None) -> Calibration:
    """The matrix of text sampled from ``gguf`` (exporters/gguf/self_calibration.py)."""
    from edgeopt.exporters.gguf.imatrix_collect import MatrixCollector
    from edgeopt.exporters.gguf.self_calibration import DEFAULT_CHUNKS as GENERATED_CHUNKS
    from edgeopt.exporters.gguf.self_calibration import SEQUENCE_TOKENS, generate_calibration
    from edgeopt.exporters.input_energy import chunk_size_for

    # options["threads"] is the quantizer's. Decoding always follows the load (threads=None): llama.cpp's
    # threads spin at a barrier per operation, and 2 fixed threads beside a busy neighbour took 170 s for
    # what the cores left free did in 7 s (runtimes/llama_cpp/threads.py).
    # The matrix is measured while the text is written: decoding a token computes exactly the matmul inputs a pass
    # over the finished text would at its position, so the second pass llama-imatrix would make (95 s of a default
    # 1B optimize) is not made. Only the last block's feed-forward and the output matrix miss the seed prompts'
    # tokens but their last (llama.cpp computes those weights for the rows whose logits are asked): a few hundred
    # of 4,096 rows (the KLD in self_calibration.py was measured so).
    collector = MatrixCollector()
    text = generate_calibration(gguf, chunks=int(options.get("calibration_chunks") or GENERATED_CHUNKS),
                                chunk_size=min(SEQUENCE_TOKENS, chunk_size_for(model_dir)), threads=None,
                                report=report, matmul_tap=collector.tap(min_rows=1))
    matrix = collector.matrix(gguf, text.chunks, [text.source])
    return Calibration(matrix, _store(matrix, out_dir, text.chunks, text.facts()), text.chunks)
