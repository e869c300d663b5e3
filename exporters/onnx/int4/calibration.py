"""The activation statistics INT4's weighted search (exporters/onnx/int4/search.py) weighs its blocks by: each
linear layer's mean squared input per column, from ``--calibration-data``, or, without it, from text the model
writes itself (sampled from the fp32 ONNX graph the exporter already made, through the ONNX Runtime decoder's
batched step, as the GGUF exporter samples from its F16 file). ``--no-self-calibration`` measures nothing: each
block is then weighted by its own weights' squares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.exporters.generated_text import DEFAULT_CHUNKS as GENERATED_CHUNKS
from edgeopt.exporters.generated_text import self_calibrates
from edgeopt.exporters.input_energy import InputEnergy, chunk_size_for, collect_input_energy, text_file_chunks

TEXT_CHUNKS = 32  # chunks of --calibration-data used: the GGUF importance matrix's default (16k tokens)


@dataclass(frozen=True)
class Int4Calibration:
    energy: InputEnergy
    facts: dict[str, Any]  # for the manifest: where the text came from, how many tokens, its hash
    chunks: list[list[int]]  # the token chunks measured (--size also scores its groups on them)


def int4_calibration(model_dir: Path, fp32: Path, options: dict[str, Any],
                     report: Callable[[str], None] = lambda _m: None, grams: bool = False) -> Int4Calibration | None:
    """The statistics of the calibration text (or of generated text), or None with ``--no-self-calibration``;
    ``grams``: each linear layer's x x^T too (GPTQ rounding)."""
    if options.get("calibration_data") is not None:
        return _from_text(model_dir, Path(options["calibration_data"]),
                          int(options.get("calibration_chunks") or TEXT_CHUNKS), report, grams)
    if not self_calibrates(options):
        return None
    return _generated(model_dir, fp32, int(options.get("calibration_chunks") or GENERATED_CHUNKS), report, grams)


def _from_text(model_dir: Path, text_path: Path, max_chunks: int, report: Callable[[str], None],
               grams: bool) -> Int4Calibration:
    from edgeopt.store.bundle import sha256_file

    token_chunks = text_file_chunks(model_dir, text_path, max_chunks, "to weigh INT4 blocks")
    energy = collect_input_energy(model_dir, token_chunks, report, grams)
    return Int4Calibration(energy, {"source": text_path.name, "text_sha256": sha256_file(text_path),
                                    "tokens": sum(len(c) for c in token_chunks), "chunks": len(token_chunks)},
                          token_chunks)


def _generated(model_dir: Path, fp32: Path, count: int, report: Callable[[str], None],
               grams: bool) -> Int4Calibration:
    from edgeopt.exporters.generated_text import MAX_PARALLEL, sample_text
    from edgeopt.runtimes.onnxruntime import open_decoder

    parallel, chunk_size = min(count, MAX_PARALLEL), chunk_size_for(model_dir)
    runtime = open_decoder(fp32, model_dir, max_slots=parallel, context_length=chunk_size)
    try:
        text = sample_text(runtime, count, chunk_size, parallel, report=report)
    finally:
        runtime.close()
    energy = collect_input_energy(model_dir, text.chunks, report, grams)
    return Int4Calibration(energy, {**text.facts(), "tokens": text.tokens, "chunks": len(text.chunks)}, text.chunks)
