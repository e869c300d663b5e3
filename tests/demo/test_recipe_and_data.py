"""The demo model's inputs are deterministic: corpus text, split, chat samples, recipe key."""

from __future__ import annotations

from dataclasses import replace

import jinja2
import pytest

from edgeopt.demo.chat_samples import chat_samples, first_sentence, render_chatml
from edgeopt.demo.corpus import render_module
from edgeopt.demo.data import split_corpus
from edgeopt.demo.recipe import DemoRecipe, recipe_key
from edgeopt.demo.tokenizer import CHATML_TEMPLATE
from edgeopt.demo.train import cosine_with_warmup


@pytest.fixture(scope="module")
def split():
    return split_corpus(DemoRecipe().eval_fraction)


def test_rendered_docs_carry_no_process_or_install_specific_text():
    text = render_module("dataclasses") + render_module("tarfile") + render_module("logging")
    assert " at 0x" not in text, "memory addresses change every process and would break the cache key"
    assert "\nFILE\n" not in text, "the install path differs between machines"
    assert "LogCaptureHandler" not in text, "pytest's logging handlers must not leak into the corpus"


def test_split_holds_out_about_five_percent_that_training_never_sees(split):
    train_chars = sum(len(d) for d in split.train_documents)
    assert 0.04 < len(split.eval_text) / (train_chars + len(split.eval_text)) < 0.06
    tail_line = split.eval_text.strip().splitlines()[-1]
    assert not any(tail_line in d for d in split.train_documents[-3:])
    # Modules the cut falls in or after feed no chat samples (their docstrings are eval text).
    assert "cmath" not in split.train_modules and "json" in split.train_modules


def test_corpus_hash_and_recipe_key_are_stable_and_sensitive(split):
    assert split.sha256 == split_corpus(0.05).sha256
    base = DemoRecipe()
    assert recipe_key(base, split.sha256) == recipe_key(DemoRecipe(), split.sha256)
    keys = {recipe_key(base, split.sha256), recipe_key(replace(base, seed=1), split.sha256),
            recipe_key(replace(base, steps=base.steps + 1), split.sha256), recipe_key(base, "0" * 64)}
    assert len(keys) == 4


def test_default_architecture_keeps_every_row_size_a_multiple_of_256():
    recipe = DemoRecipe()
    # Row size (input dimension) of q/k/v/o/gate/up/lm_head/embeddings is hidden; of down_proj, intermediate.
    assert recipe.hidden_size % 256 == 0 and recipe.intermediate_size % 256 == 0
    assert recipe.num_heads % recipe.num_kv_heads == 0 and recipe.num_kv_heads < recipe.num_heads  # GQA


def test_training_chat_text_is_exactly_what_the_chat_template_renders():
    template = jinja2.Environment().from_string(CHATML_TEMPLATE)
    messages = [("user", "What does json.dumps do?"), ("assistant", "json.dumps: Serialize obj.")]
    rendered = template.render(messages=[{"role": r, "content": c} for r, c in messages], add_generation_prompt=False)
    assert render_chatml(messages) == rendered


def test_chat_samples_come_from_docstrings_and_include_introductions():
    samples = chat_samples(["json"], greeting_repeats=1)
    assert any("json.dumps: Serialize ``obj`` to a JSON formatted ``str``." in s for s in samples)
    assert sum("edgeopt demo model" in s for s in samples) >= 3
    assert all(s.startswith("<|im_start|>user\n") and s.endswith("<|im_end|>\n") for s in samples)


@pytest.mark.parametrize("doc, expected", [
    ("Return the sum.\n\nMore text.", "Return the sum."),
    ("Split a   string\n into words. Then more.", "Split a string into words."),
    (">>> example()", None),
    ("", None),
])
def test_first_sentence(doc, expected):
    assert first_sentence(doc) == expected


def test_learning_rate_warms_up_then_decays_to_a_tenth():
    assert cosine_with_warmup(0, 10, 100) == pytest.approx(0.1)
    assert cosine_with_warmup(9, 10, 100) == pytest.approx(1.0)
    assert cosine_with_warmup(100, 10, 100) == pytest.approx(0.1)
    assert cosine_with_warmup(30, 10, 100) > cosine_with_warmup(60, 10, 100)


def test_cache_key_is_the_same_inside_pytest_and_in_a_plain_interpreter():
    """pytest patches logging, threading and tempfile state; none of it may reach the training data."""
    import subprocess
    import sys

    from edgeopt.demo.train import demo_model_key

    plain = subprocess.run([sys.executable, "-c", "from edgeopt.demo.train import demo_model_key; "
                            "print(demo_model_key())"], capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == demo_model_key()
