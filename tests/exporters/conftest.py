"""Fixtures for exporter tests: a tiny Llama-2-style SentencePiece tokenizer and model (trained locally), and an
unquantized GGUF whose rows take both of the mix's palettes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.exporters.spm_tokenizers import SPM_VOCAB, build_spm_tokenizer
from tests.fixtures.tiny_models import widen_init


def build_spm_model(out_dir: Path) -> Path:
    """Train a byte-fallback SentencePiece BPE (Llama 2 settings), wrap it for HF, add a random Llama."""
    import torch
    import transformers

    build_spm_tokenizer(out_dir)
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


@pytest.fixture(scope="session")
def palette_rows_f16(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """An F16 GGUF with rows of 256 (k-quants and IQ types) and of 544 (32-weight blocks only, as SmolLM2's 576)."""
    from edgeopt.exporters.gguf.exporter import GGUFExporter
    from tests.fixtures.tiny_models import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("rows") / "m", "llama-gqa", tiny_tokenizer_dir, hidden_size=256,
                             intermediate_size=544, num_layers=2)
    out = tmp_path_factory.mktemp("rows-f16")
    return out / GGUFExporter().export(model, out, "F16", {}).model_file
