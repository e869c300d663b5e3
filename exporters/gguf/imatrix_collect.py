"""Compute an importance matrix with torch: run calibration text through the checkpoint as it stands
(after pruning and distillation) and sum each linear layer's input activations squared per column
(exporters/input_energy.py).

What ``llama-imatrix`` measures inside llama.cpp's graph, measured on the HF model with forward hooks. Names
are llama.cpp's (``blk.3.ffn_down.weight``), from the same map the GGUF writer uses; input columns are never
reordered by the writer (only q/k *rows* are), so a column here is the same column in the file. The output
matrix is included (``token_embd.weight`` when the embeddings are tied), which llama-imatrix leaves out
by default.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix
from edgeopt.exporters.gguf.tensor_names import gguf_name
from edgeopt.exporters.input_energy import collect_input_energy


def linear_weight_names(model_dir: Path, module_names: list[str]) -> dict[str, str]:
    """HF linear module name -> llama.cpp weight name, for every linear layer the GGUF holds."""
    spec = load_model_spec(str(model_dir))
    names: dict[str, str] = {}
    for module in module_names:
        weight = f"{module}.weight"
        if weight == "lm_head.weight" and spec.tie_word_embeddings:
            names[module] = "token_embd.weight"  # the tied embedding is llama.cpp's output matrix
            continue
        try:
            names[module] = gguf_name(weight, spec.arch)
        except ExportError:
            continue  # a linear layer the GGUF does not hold as such (none in supported families)
    return names


def collect_imatrix(model_dir: Path, token_chunks: list[list[int]], datasets: list[str],
                    report: Callable[[str], None] = lambda _m: None) -> ImportanceMatrix:
    """Run the chunks through the checkpoint in ``model_dir`` (float32, CPU) and return the matrix."""
    energy = collect_input_energy(model_dir, token_chunks, report)
    held = linear_weight_names(model_dir, list(energy.sums))
    return ImportanceMatrix(sums={held[m]: s.astype(np.float64) for m, s in energy.sums.items() if m in held},
                            counts={held[m]: c for m, c in energy.counts.items() if m in held},
                            chunk_count=len(token_chunks), chunk_size=max(len(c) for c in token_chunks),
                            datasets=list(datasets))
