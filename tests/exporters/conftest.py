"""Fixtures for exporter tests: a tiny Llama-2-style SentencePiece tokenizer and model (trained locally)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.demo.corpus import stdlib_text
from tests.fixtures.tiny_models import widen_init

SPM_VOCAB = 700


def build_spm_model(out_dir: Path) -> Path:
    """Train a byte-fallback SentencePiece BPE (Llama 2 settings), wrap it for HF, add a random Llama."""
    import sentencepiece as spm
    import torch
    import transformers

    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [line for line in stdlib_text(150_000).splitlines() if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(out_dir / "tokenizer"), vocab_size=SPM_VOCAB,
        model_type="bpe", byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=0.9995, num_threads=2,
        minloglevel=2,
    )
    (out_dir / "tokenizer.vocab").unlink()
    tokenizer = transformers.LlamaTokenizerFast(vocab_file=str(out_dir / "tokenizer.model"), legacy=True,
                                                add_prefix_space=True, from_slow=True,  # Llama 2's Prepend("▁")
                                                add_bos_token=True, add_eos_token=False)
    tokenizer.save_pretrained(str(out_dir))
    config = transformers.LlamaConfig(
        vocab_size=SPM_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False)
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    widen_init(model)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


@pytest.fixture(scope="session")
def spm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_spm_model(tmp_path_factory.mktemp("spm"))
