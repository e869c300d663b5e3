"""Calibration text the model writes itself, for a GGUF export: when no ``--calibration-data`` is given, an
importance matrix is computed from text sampled from the unquantized GGUF the exporter already wrote
(exporters/generated_text.py does the sampling).

Why llama.cpp and not torch: sampling 4k tokens with transformers' ``generate`` took over 25 minutes on 2
cores; the same sequences decoded together as one llama.cpp batch (one sequence id each, the serving
runtime's own batched step) take well under a minute for a 135M model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from edgeopt.exporters.generated_text import (DEFAULT_SEED, MIN_P, SEED_PROMPTS, TEMPERATURE, GeneratedText,
                                              check_budget, sample_text)

if TYPE_CHECKING:
    from edgeopt.runtimes.llama_cpp.matmul_inputs import MatmulInputTap

__all__ = ["DEFAULT_CHUNKS", "DEFAULT_SEED", "MAX_PARALLEL", "SEED_PROMPTS", "SEQUENCE_TOKENS", "generate_calibration"]

# 32 sequences of 128 tokens, decoded together. Writing is decoding, which reads every weight once a step for the
# sequences of that step: on the F16 Llama 3.2 1B shape (2 AMD EPYC cores) 32 sequences wrote 39.9 tokens a second
# where 8 wrote 23.5. Held-out KLD of SmolLM2-135M-Instruct's Q4_K_M (llama-perplexity, 10 chunks): 0.0291 with
# 32 x 128 tokens, 0.0304 with 16 x 256, 0.0302 with 8 x 512 (the shape before): more openings sampled, no loss
# from the shorter sequences.
DEFAULT_CHUNKS = 32
SEQUENCE_TOKENS = 128
MAX_PARALLEL = 32

def generate_calibration(gguf: Path, chunks: int = DEFAULT_CHUNKS, chunk_size: int = SEQUENCE_TOKENS,
                         seed: int = DEFAULT_SEED, threads: int | None = None, temperature: float = TEMPERATURE, min_p: float = MIN_P,
                         prompts: tuple[str, ...] = SEED_PROMPTS,
                         report: Callable[[str], None] = lambda _m: None,
                         matmul_tap: MatmulInputTap | None = None) -> GeneratedText:
    """Sample ``chunks`` sequences of ``chunk_size`` tokens from ``gguf``. ``threads`` None: the cores other
    processes leave free, re-measured while decoding (runtimes/llama_cpp/threads.py): with a busy neighbour on
    2 cores, 2 fixed threads took 170 s for what 1 thread did in 7 s. The tokens did not change with the
    thread count (SmolLM2-135M, 1 and 2 threads): llama.cpp's CPU kernels give each row to one thread.
    ``matmul_tap`` is shown every weight matmul's input as the text is decoded: the importance matrix of the text
    the model writes, measured while it writes it (exporters/gguf/calibration.py)."""
    from edgeopt.sizing.layout import STREAMS, stream_cells
    from edgeopt.runtimes.llama_cpp import load_gguf

    check_budget(chunks, chunk_size, temperature, prompts)
    parallel = min(chunks, MAX_PARALLEL)
    # load_gguf opens the model behind guard_amx_buffers (AMX weight buffers crash decoding on AMX CPUs).
    # One stream per sequence (chunk_size cells, rounded up as llama.cpp aligns streams): a decode token
    # scans only its own sequence's cells, not every sequence's.
    runtime = load_gguf(gguf, kv_capacity_tokens=parallel * stream_cells(chunk_size), max_slots=parallel,
                        max_batch_tokens=max(512, parallel), threads=threads, context_length=chunk_size,
                        cache_slots=0, kv_layout=STREAMS, matmul_tap=matmul_tap)
    try:
        return sample_text(runtime, chunks, chunk_size, parallel, seed, temperature, min_p, prompts, report)
    finally:
        runtime.close()
