"""The trained demo model (fixture ``demo_model_dir``): right shapes, real quality, chat answers."""

from __future__ import annotations

import json

import pytest

from edgeopt.demo.metrics import model_perplexity
from edgeopt.demo.store import DONE_MARKER
from edgeopt.demo.train import demo_model_key


@pytest.fixture(scope="module")
def loaded(demo_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(demo_model_dir)
    model.eval()
    return model, AutoTokenizer.from_pretrained(demo_model_dir)


def test_cached_build_matches_the_current_recipe_key(demo_model_dir):
    meta = json.loads((demo_model_dir / DONE_MARKER).read_text())
    assert meta["key"] == demo_model_key()
    assert demo_model_dir.name == f"demo-model-{meta['key']}"


def test_every_weight_row_is_a_multiple_of_256_for_k_quants(demo_model_dir):
    from safetensors import safe_open

    with safe_open(str(demo_model_dir / "model.safetensors"), framework="pt") as weights:
        shapes = {name: weights.get_slice(name).get_shape() for name in weights.keys()}
    matrices = {name: shape for name, shape in shapes.items() if len(shape) == 2}
    assert "lm_head.weight" in matrices, "the demo model is untied: it has its own output head"
    assert all(shape[1] % 256 == 0 for shape in matrices.values()), matrices


def test_held_out_perplexity_is_far_below_the_unigram_baseline(demo_model_dir, loaded):
    import torch

    model, tokenizer = loaded
    metrics = json.loads((demo_model_dir / DONE_MARKER).read_text())["metrics"]
    eval_ids = torch.tensor(tokenizer((demo_model_dir / "eval.txt").read_text())["input_ids"][:8192])
    perplexity = model_perplexity(model, eval_ids, seq_len=256)
    assert perplexity < 0.4 * metrics["unigram_perplexity"], (perplexity, metrics)
    assert metrics["eval_perplexity"] < 0.4 * metrics["unigram_perplexity"]


def test_chat_request_gets_a_text_answer_that_ends(loaded):
    model, tokenizer = loaded
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What does json.dumps do?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    output = model.generate(**prompt, max_new_tokens=48, do_sample=False)
    new_tokens = output[0, prompt["input_ids"].shape[1]:].tolist()
    answer = tokenizer.decode(new_tokens, skip_special_tokens=True).strip()
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in new_tokens, f"never stopped: {answer!r}"
    words = [w for w in answer.split() if w.isalpha()]
    assert len(words) >= 3, answer
