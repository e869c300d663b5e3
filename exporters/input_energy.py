"""What calibration text does to a checkpoint's linear layers: the text cut into chunks, and each linear
layer's input activations squared, summed per input column over every token of every chunk (torch, forward
hooks, float32 on the CPU).

Format-neutral: the GGUF exporter names the sums after llama.cpp's tensors (its importance matrix,
exporters/gguf/imatrix_collect.py), the ONNX exporter weighs its 4-bit blocks with them
(exporters/onnx/int4/search.py). Text is cut as llama-imatrix cuts it: independent chunks of ``chunk_size``
tokens, the first token of each replaced by BOS when the tokenizer adds one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.progress import progress

CHUNK_SIZE = 512  # llama-imatrix's default context: one chunk is one independent sequence
MIN_CHUNK_TOKENS = 16  # llama-imatrix ignores smaller batches


def tokenize_text(model_dir: Path, text: str) -> tuple[list[int], int | None]:
    """(token ids of ``text`` without specials, the BOS id the tokenizer puts in front or None)."""
    from edgeopt.runtimes.bundle_tokenizer import open_tokenizer

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


def chunk_size_for(model_dir: Path) -> int:
    """The chunk a model's calibration text is cut into: CHUNK_SIZE, or the model's whole context when shorter."""
    from edgeopt.sources.model_spec import load_model_spec

    return min(CHUNK_SIZE, load_model_spec(str(model_dir)).max_position_embeddings)


def text_file_chunks(model_dir: Path, text_path: Path, max_chunks: int, use: str) -> list[list[int]]:
    """``--calibration-data``'s text read, tokenized and cut into chunks; refused, naming ``use`` (what the chunks
    are for), when it gives no chunk."""
    from edgeopt.errors import ConfigError
    from edgeopt.sources.textfile import read_text_file

    text = read_text_file(text_path, "calibration data", "--calibration-data", ConfigError)
    ids, bos = tokenize_text(model_dir, text)
    token_chunks = chunks(ids, bos, chunk_size_for(model_dir), max_chunks=max_chunks)
    if not token_chunks:
        raise ConfigError(f"calibration data {text_path} gives {len(ids)} tokens, too few {use}",
                          "give a text of at least a few thousand words like what the model will see")
    return token_chunks


@dataclass(frozen=True)
class InputEnergy:
    """Per linear module (HF name, ``model.layers.3.mlp.down_proj``): the sum over tokens of its input squared,
    per input column, and the number of tokens summed; with ``grams``, also the sum of x x^T (K x K, float32; one
    array shared by the modules that read the same input, as q/k/v and gate/up do)."""

    sums: dict[str, np.ndarray]
    counts: dict[str, int]
    grams: dict[str, np.ndarray] | None = None

    def gram(self, module: str) -> np.ndarray | None:
        """Mean x x^T of ``module``'s inputs, or None when not collected."""
        if self.grams is None or module not in self.grams or not self.counts[module]:
            return None
        return self.grams[module] / np.float32(self.counts[module])

    def mean(self, module: str) -> np.ndarray | None:
        """Mean squared input per column of ``module``, or None when the module was not measured."""
        if module not in self.sums or not self.counts[module]:
            return None
        return self.sums[module] / self.counts[module]


def collect_input_energy(model_dir: Path, token_chunks: list[list[int]],
                         report: Callable[[str], None] = lambda _m: None, grams: bool = False) -> InputEnergy:
    """Run the chunks through the checkpoint in ``model_dir`` and sum the input energy of every linear module (and,
    with ``grams``, its inputs' x x^T: what GPTQ rounding needs, exporters/onnx/int4/gptq.py)."""
    import torch
    from transformers import AutoModelForCausalLM

    if not token_chunks:
        raise ExportError("the calibration text gives no chunk of tokens", f"give at least {MIN_CHUNK_TOKENS} tokens")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    linears = {name: module for name, module in model.named_modules()
               if isinstance(module, torch.nn.Linear)}
    sums = {name: torch.zeros(module.in_features, dtype=torch.float64) for name, module in linears.items()}
    counts = {name: 0 for name in linears}
    gram_sums = _GramSums() if grams else None

    def hook_for(name: str) -> Callable:
        def accumulate(_module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1])
            sums[name] += (x.double() ** 2).sum(dim=0)
            counts[name] += x.shape[0]
            if gram_sums is not None:
                gram_sums.add(name, inputs[0])
        return accumulate

    handles = [module.register_forward_pre_hook(hook_for(name)) for name, module in linears.items()]
    try:
        with torch.no_grad(), torch_threads_left_free():
            for i, chunk in enumerate(progress(token_chunks, "importance matrix: calibration chunks")):
                model(input_ids=torch.tensor([chunk]), use_cache=False)
                report(f"calibration: chunk {i + 1}/{len(token_chunks)}")
    finally:
        for handle in handles:
            handle.remove()
    return InputEnergy({n: s.numpy() for n, s in sums.items()}, counts,
                       gram_sums.arrays() if gram_sums is not None else None)


class _GramSums:
    """Sum of x x^T per module; a module reading the very tensor the previous one read (q, k and v read one
    normalized input, gate and up another) shares its sum instead of computing it again."""

    def __init__(self) -> None:
        self.sums: dict[str, object] = {}  # name -> torch float64 tensor (shared between readers of one input)
        self.previous: tuple[object, str] | None = None  # (the input tensor last summed, its module)

    def add(self, name: str, inputs: object) -> None:
        import torch

        if self.previous is not None and self.previous[0] is inputs:  # kept alive here, so never a reused address
            self.sums.setdefault(name, self.sums[self.previous[1]])
            return
        x = inputs.detach().reshape(-1, inputs.shape[-1]).float()
        if name not in self.sums:
            self.sums[name] = torch.zeros((x.shape[1], x.shape[1]), dtype=torch.float64)
        self.sums[name] += x.T @ x
        self.previous = (inputs, name)

    def arrays(self) -> dict[str, np.ndarray]:
        converted: dict[int, np.ndarray] = {}
        return {name: converted.setdefault(id(t), t.float().numpy()) for name, t in self.sums.items()}


@contextmanager
def torch_threads_left_free() -> Iterator[None]:
    """torch's CPU threads meet at barriers as llama.cpp's do: beside a busy neighbour on 2 cores the matrix
    pass over SmolLM2-135M took 4-5x longer with 2 threads than with 1. So it runs on the cores other
    processes leave free, measured once before it starts (runtimes/llama_cpp/threads.py's rule), and
    torch's thread count is restored after."""
    import torch

    from edgeopt.profiles.host import OtherCpuLoad
    from edgeopt.runtimes.llama_cpp.threads import PROBE_S, threads_for

    before = torch.get_num_threads()
    load = OtherCpuLoad()
    time.sleep(PROBE_S)
    others = load.read()
    if others is not None:
        torch.set_num_threads(threads_for(before, others))
    try:
        yield
    finally:
        torch.set_num_threads(before)
