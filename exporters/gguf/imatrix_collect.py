"""Compute an importance matrix with torch: run calibration text through the checkpoint as it stands
(after pruning and distillation) and sum each linear layer's input activations squared per column.

What ``llama-imatrix`` measures inside llama.cpp's graph, measured on the HF model with forward hooks:
text cut into independent chunks of ``chunk_size`` tokens (the first token of each replaced by BOS when
the tokenizer adds one, as llama-imatrix does), every token of every chunk counted. Names are llama.cpp's
(``blk.3.ffn_down.weight``), from the same map the GGUF writer uses; input columns are never reordered
by the writer (only q/k *rows* are), so a column here is the same column in the file. The output
matrix is included (``token_embd.weight`` when the embeddings are tied), which llama-imatrix leaves out
by default.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.model_spec import load_model_spec
from exporters.gguf.imatrix_file import ImportanceMatrix
from exporters.gguf.tensor_names import gguf_name

CHUNK_SIZE = 512  # llama-imatrix's default context: one chunk is one independent sequence
MIN_CHUNK_TOKENS = 16  # llama-imatrix ignores smaller batches


def tokenize_text(model_dir: Path, text: str) -> tuple[list[int], int | None]:
    """(token ids of ``text`` without specials, the BOS id the tokenizer puts in front or None)."""
    from runtimes.bundle_tokenizer import open_tokenizer

    tok_file = Path(model_dir) / "tokenizer.json"
    if not tok_file.is_file():
        raise ExportError(f"{model_dir} has no tokenizer.json", "save the checkpoint with a fast tokenizer")
    tokenizer = open_tokenizer(tok_file)
    specials = tokenizer.encode("", add_special_tokens=True).ids
    lines = text.splitlines(keepends=True)  # tokenized in pieces so a long text is not one giant call
    ids: list[int] = []
    for start in range(0, len(lines), 256):
        ids += tokenizer.encode("".join(lines[start:start + 256]), add_special_tokens=False).ids
    return ids, (specials[0] if specials else None)


def chunks(ids: list[int], bos: int | None, chunk_size: int = CHUNK_SIZE, max_chunks: int | None = None) -> list[list[int]]:
    """Consecutive chunks; a tail shorter than a chunk is used when it is the only text there is."""
    out = [ids[i:i + chunk_size] for i in range(0, len(ids), chunk_size)]
    out = [c for c in out if len(c) == chunk_size] or [c for c in out if len(c) >= MIN_CHUNK_TOKENS][:1]
    out = out[:max_chunks] if max_chunks else out
    return [[bos, *c[1:]] if bos is not None else c for c in out]


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
    import torch
    from transformers import AutoModelForCausalLM

    if not token_chunks:
        raise ExportError("the calibration text gives no chunk of tokens", f"give at least {MIN_CHUNK_TOKENS} tokens")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    linears = {name: module for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    names = linear_weight_names(model_dir, list(linears))
    sums = {names[m]: torch.zeros(linears[m].in_features, dtype=torch.float64) for m in names}
    counts = {names[m]: 0 for m in names}

    def hook_for(weight_name: str) -> Callable:
        def accumulate(_module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1])
            sums[weight_name] += (x.double() ** 2).sum(dim=0)
            counts[weight_name] += x.shape[0]
        return accumulate

    handles = [linears[m].register_forward_pre_hook(hook_for(names[m])) for m in names]
    try:
        with torch.no_grad():
            for i, chunk in enumerate(token_chunks):
                model(input_ids=torch.tensor([chunk]), use_cache=False)
                report(f"importance matrix: chunk {i + 1}/{len(token_chunks)}")
    finally:
        for handle in handles:
            handle.remove()
    chunk_size = max(len(c) for c in token_chunks)
    return ImportanceMatrix(sums={n: s.numpy().astype(np.float64) for n, s in sums.items()}, counts=counts,
                            chunk_count=len(token_chunks), chunk_size=chunk_size, datasets=list(datasets))
