"""The real trained model the quality tests use (edgeopt/demo/smollm2.py) is what it claims to be:
its rebuilt tokenizer reads text exactly as llama.cpp reads the original GGUF, it answers like a trained
chat model, and the calibration and evaluation texts share nothing."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.english_texts import calibration_text, evaluation_text
from edgeopt.demo.smollm2 import CHECK_STRINGS, llama_cpp_token_ids, smollm2_gguf_path


def test_rebuilt_tokenizer_matches_llama_cpp_on_fixed_strings_and_real_text(smollm2_checkpoint: Path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(smollm2_checkpoint / "tokenizer.json"))
    texts = (*CHECK_STRINGS, evaluation_text()[:20000])
    expected = llama_cpp_token_ids(smollm2_gguf_path(), texts)
    for text, ids in zip(texts, expected):
        assert tokenizer.encode(text, add_special_tokens=False).ids == ids, repr(text[:80])
    assert len(expected[-1]) > 4000  # the real-text sample is long enough to exercise many merges


def test_checkpoint_is_a_trained_chat_model(smollm2_checkpoint: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(smollm2_checkpoint)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\n")  # the GGUF's own template, default system prompt included
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    assert inputs.input_ids[0, 0].item() == tokenizer.convert_tokens_to_ids("<|im_start|>")  # no BOS added
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, inputs.input_ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_calibration_and_evaluation_texts_are_disjoint_and_substantial():
    calibration, evaluation = calibration_text(), evaluation_text()
    assert len(calibration) > 150_000 and len(evaluation) > 150_000
    calibration_paragraphs = {p for p in calibration.split("\n\n") if len(p) > 80}
    evaluation_paragraphs = {p for p in evaluation.split("\n\n") if len(p) > 80}
    assert calibration_paragraphs and evaluation_paragraphs
    assert not calibration_paragraphs & evaluation_paragraphs
