"""The llguidance vocabulary built from our runtimes' tokenizers agrees with llguidance's own builders:
``llguidance.llamacpp`` over the GGUF's vocab, and llguidance's tokenizer.json reader for ONNX bundles.
Same masks at every step of a JSON walk, control tokens special (never produced by text), named
control tokens usable in a grammar."""

from __future__ import annotations

import json
from pathlib import Path

import llguidance
import llguidance.numpy as llnp
import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.engine.grammar import JSON_LAYOUT, GrammarCompiler, GrammarSpec
from edgeopt.engine.grammar_vocab import grammar_tokenizer
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.llama_cpp import load_gguf

# llguidance.llamacpp still calls llama_token_get_attr, which llama-cpp-python marks deprecated.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "tags": {"type": "array", "items": {"enum": ["a b", "ü"]}}},
          "required": ["name", "tags"], "additionalProperties": False}


@pytest.fixture(scope="module", params=["llama_cpp", "onnxruntime"])
def runtime_and_reference(request, tiny_gguf_factory, onnx_fp32_bundle):
    if request.param == "llama_cpp":
        import llama_cpp
        from llguidance.llamacpp import lltokenizer_from_vocab

        runtime = load_gguf(tiny_gguf_factory("qwen2", "F16"), kv_capacity_tokens=256, max_slots=1, threads=1,
                            n_gpu_layers=0)
        vocab = llama_cpp.llama_model_get_vocab(runtime._model)  # the reference reads the raw vocab handle
        reference = lltokenizer_from_vocab(vocab, eos_token=sorted(runtime.info.eos_token_ids))
    else:
        runtime = load_runtime("onnxruntime", onnx_fp32_bundle, load_bundle(onnx_fp32_bundle), max_slots=1,
                               context_length=64, threads=1)
        text = (Path(onnx_fp32_bundle) / "tokenizer" / "tokenizer.json").read_text()
        reference = llguidance.LLTokenizer(text, n_vocab=runtime.info.vocab_size,
                                           eos_token=sorted(runtime.info.eos_token_ids))
    yield runtime, reference
    runtime.close()


def masks_along_a_walk(tokenizer: llguidance.LLTokenizer, vocab_size: int, steps: int = 40) -> list[np.ndarray]:
    """The mask at each step of a seeded random walk through SCHEMA's grammar."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA, defaults=JSON_LAYOUT)
    matcher = llguidance.LLMatcher(tokenizer, grammar)
    rng = np.random.default_rng(0)
    masks = []
    for _ in range(steps):
        bitmask = llnp.allocate_token_bitmask(1, vocab_size)
        llnp.fill_next_token_bitmask(matcher, bitmask)
        allowed = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little", count=vocab_size).astype(bool)
        masks.append(allowed)
        if matcher.is_stopped():
            break
        assert matcher.consume_token(int(rng.choice(np.flatnonzero(allowed))))
    return masks


def test_masks_equal_llguidance_own_vocabulary_reader(runtime_and_reference) -> None:
    runtime, reference = runtime_and_reference
    ours = grammar_tokenizer(runtime.tokenizer, runtime.info)
    vocab = runtime.info.vocab_size
    expected, got = masks_along_a_walk(reference, vocab), masks_along_a_walk(ours, vocab)
    assert len(got) == len(expected)
    for step, (a, b) in enumerate(zip(expected, got)):
        assert np.array_equal(a, b), f"step {step}: tokens {np.flatnonzero(a != b)[:10]} differ"


def test_control_tokens_are_special_and_nameable(runtime_and_reference) -> None:
    runtime, _ = runtime_and_reference
    compiler = GrammarCompiler(runtime.tokenizer, runtime.info)
    controls = runtime.tokenizer.control_token_ids()
    assert "<|im_end|>" in controls
    free_text = compiler.compile(GrammarSpec.regex("(.|\\n)*")).new_matcher()
    bitmask = llnp.allocate_token_bitmask(1, runtime.info.vocab_size)
    llnp.fill_next_token_bitmask(free_text, bitmask)
    allowed = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little", count=runtime.info.vocab_size)
    assert not any(allowed[i] for name, i in controls.items() if i not in runtime.info.eos_token_ids), \
        "plain text must never produce a control token"
    named = compiler.compile(GrammarSpec.lark('start: "ok" <|im_end|>')).new_matcher()
    ok = runtime.tokenizer.encode("ok", add_special=False, parse_special=False)
    assert named.consume_tokens(ok) and named.consume_token(controls["<|im_end|>"])
    assert named.is_accepting()
