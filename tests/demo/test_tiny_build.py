"""build_demo_model end to end on a shrunken recipe: same seed, same bytes; a usable checkpoint."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from edgeopt.demo.recipe import DemoRecipe
from edgeopt.demo.store import DONE_MARKER
from edgeopt.demo.train import build_demo_model

TINY = replace(DemoRecipe(), vocab_size=320, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
               intermediate_size=64, max_position_embeddings=128, seq_len=128, batch_size=4, steps=3,
               warmup_steps=1, corpus_chars=150_000)


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    return [build_demo_model(tmp_path_factory.mktemp(f"tiny-demo-{i}"), recipe=TINY) for i in range(2)]


def test_same_recipe_gives_identical_weights_and_tokenizer(two_builds):
    first, second = two_builds
    for name in ("model.safetensors", "tokenizer.json", "eval.txt", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_build_is_a_loadable_checkpoint_with_recorded_metrics(two_builds):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = two_builds[0]
    meta = json.loads((out / DONE_MARKER).read_text())
    assert meta["recipe"]["steps"] == 3 and len(meta["key"]) == 16
    assert meta["metrics"]["eval_perplexity"] > 1.0 and meta["metrics"]["unigram_perplexity"] > 1.0
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.num_key_value_heads == 1 and not model.config.tie_word_embeddings
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>"
    generation = json.loads((out / "generation_config.json").read_text())
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in generation["eos_token_id"]
