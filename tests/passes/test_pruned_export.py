"""A pruned checkpoint is a standard one: both exporters convert it and their runtimes agree with torch.

Pruning heads makes head_dim differ from hidden_size / num_attention_heads, which is exactly what a
converter that derives head_dim would get wrong.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from edgeopt.passes import PassContext
from edgeopt.passes.prune import PrunePass
from edgeopt.exporters import get_exporter


@pytest.fixture(scope="module")
def pruned_dir(tiny_model_factory, tmp_path_factory) -> Path:
    original = tiny_model_factory("llama-gqa")
    out = tmp_path_factory.mktemp("pruned")
    ctx = PassContext(original_model_dir=original, target="host")
    PrunePass(heads=0.5, mlp=0.25, layers=1, eval_tokens=512).run(original, out, ctx)
    return out


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_pruned_checkpoint_exports_to_gguf_and_llama_cpp_agrees(pruned_dir: Path, tmp_path: Path) -> None:
    from llama_cpp import Llama

    cfg = AutoModelForCausalLM.from_pretrained(pruned_dir).config
    assert cfg.head_dim * cfg.num_attention_heads != cfg.hidden_size  # the case under test
    result = get_exporter("gguf").export(pruned_dir, tmp_path, "F16", {"threads": 1})
    ids = list(range(5, 45))
    llm = Llama(model_path=str(tmp_path / result.model_file), n_ctx=128, n_threads=1, logits_all=True, verbose=False)
    llm.eval(ids)
    gguf_logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
    with torch.no_grad():
        ref = AutoModelForCausalLM.from_pretrained(pruned_dir)(input_ids=torch.tensor([ids])).logits[0].double().numpy()
    p = np.exp(_log_softmax(ref))
    kl = (p * (_log_softmax(ref) - _log_softmax(gguf_logits))).sum(-1).mean()
    assert kl < 1e-3
    assert (ref.argmax(-1) == gguf_logits.argmax(-1)).mean() > 0.95


def test_pruned_checkpoint_exports_to_onnx(pruned_dir: Path, tmp_path: Path) -> None:
    result = get_exporter("onnx").export(pruned_dir, tmp_path, "fp32", {"threads": 1})
    # The ONNX exporter checks its fp32 graph against torch (and raises past its KL limit).
    assert result.details["fp32_kl_vs_torch"] < 1e-4
    assert result.details["head_dim"] == 16 and result.details["num_layers"] == 1
