"""Gemma chat as the real templates do it: no system role in Gemma 2, a folded system prompt in Gemma 3,
turns that end with <end_of_turn>, which stops generation."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ChatTemplateError
from edgeopt.server.chat.template import ChatTemplate

CHAT = [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again."}]
SYSTEM = [{"role": "system", "content": "You answer briefly."}, *CHAT]


def _ours(model_dir: Path) -> ChatTemplate:
    template = ChatTemplate.from_bundle(model_dir, None, ".")
    assert template is not None
    return template


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_rendering_equals_transformers(variant: str, tiny_gemma_factory) -> None:
    from transformers import AutoTokenizer

    model_dir = tiny_gemma_factory(variant)
    reference = AutoTokenizer.from_pretrained(str(model_dir))
    messages = CHAT if variant == "gemma2" else SYSTEM
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert _ours(model_dir).render(messages) == expected
    assert expected.startswith("<bos><start_of_turn>user\n") and expected.endswith("<start_of_turn>model\n")


def test_gemma3_folds_the_system_prompt_into_the_first_user_turn(tiny_gemma_factory) -> None:
    text = _ours(tiny_gemma_factory("gemma3")).render(SYSTEM)
    assert "<start_of_turn>user\nYou answer briefly.\n\nSay hello.<end_of_turn>" in text
    assert "<start_of_turn>system" not in text


def test_gemma2_refuses_a_system_message_as_its_template_does(tiny_gemma_factory) -> None:
    with pytest.raises(ChatTemplateError) as refused:
        _ours(tiny_gemma_factory("gemma2")).render(SYSTEM)
    assert "System role not supported" in refused.value.message and refused.value.param == "messages"


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_end_of_turn_ends_generation_in_the_gguf(variant: str, tiny_gemma_factory, tmp_path: Path) -> None:
    """The served runtime stops on <end_of_turn> (the turn end the template writes), as on <eos>."""
    import llama_cpp
    from edgeopt.exporters.gguf.exporter import GGUFExporter
    from edgeopt.runtimes.llama_cpp.tokenizer import LlamaCppTokenizer

    model_dir = tiny_gemma_factory(variant)
    result = GGUFExporter().export(model_dir, tmp_path, "F16", {})
    llm = llama_cpp.Llama(model_path=str(tmp_path / result.model_file), n_ctx=64, vocab_only=True, verbose=False)
    try:
        tokenizer = LlamaCppTokenizer(llama_cpp.llama_model_get_vocab(llm.model))
        end_of_turn = tokenizer.encode("<end_of_turn>", add_special=False)
        assert len(end_of_turn) == 1 and end_of_turn[0] in tokenizer.eog_token_ids()
        assert 1 in tokenizer.eog_token_ids()  # <eos>
        assert tokenizer.encode("<start_of_turn>user\nhi", add_special=False)[0] == 4
    finally:
        llm.close()
