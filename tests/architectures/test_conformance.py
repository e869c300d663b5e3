"""Every architecture of the matrix, converted by our writer and by llama.cpp's own converter
(convert_hf_to_gguf.py, fetched by ``make setup``): same tensors, metadata, tokenizer and logits.

The reference identifies a byte-level BPE by hashing its output on a probe text, so the matrix's
shared tiny tokenizer is unknown to it; each architecture is built here from its catalog entry on a
tokenizer the reference knows (tests/exporters/conformance_models.py). Adding an architecture to this
check is one ``REFERENCE_TOKENIZER`` entry.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.architectures.catalog import ARCHITECTURES, build_architecture, by_name
from tests.exporters.conformance_models import build_tokenizer_files
from tests.exporters.gguf_conformance import check_conformance

# Architecture -> the real tokenizer family it ships with, or the nearest one llama.cpp's tests have.
REFERENCE_TOKENIZER = {
    "llama3.2": "llama-bpe",
    "mistral": "spm",
    "qwen2": "qwen2",
    "qwen3": "qwen2",
    "phi3-mini": "spm",  # Phi-3 / 3.5 ship Llama 2's SentencePiece vocabulary + chat tokens
    "phi3.5": "spm",
    "phi4-mini": "qwen2",  # stands in for its o200k BPE (also with <|endoftext|>), which llama.cpp's tests lack
    "granite3": "qwen2",  # stands in for Granite's GPT-2 style BPE (no BOS added, like Granite's)
    "smollm3": "qwen2",  # stands in for SmolLM3's Llama 3 vocabulary with ChatML tokens
}
# Tokens the real vocabulary has beyond the catalog's: llama.cpp's loader looks <|endoftext|> up by text
# in any model whose name says phi3 (src/llama-vocab.cpp) and fails without it.
EXTRA_SPECIALS = {"phi3-mini": ("<|endoftext|>",), "phi3.5": ("<|endoftext|>",)}
# As the real checkpoints' tokenizer_config.json says; llama.cpp's converter dispatches on it.
TOKENIZER_CLASS = {"phi4-mini": "GPT2Tokenizer"}
PHI3_BOS = ("the reference takes <s> from tokenizer.json's post-processor and sets add_bos_token, although "
            "tokenizer_config.json says add_bos_token false and transformers adds no BOS; ours follows "
            "transformers (the tokenization check proves it), and llama.cpp's default BOS id is that <s>")
REFERENCE_ERRORS = {
    name: {"tokenizer.ggml.add_bos_token": PHI3_BOS, "tokenization": PHI3_BOS} for name in ("phi3-mini", "phi3.5")
}

pytestmark = pytest.mark.timeout(600)


def test_every_architecture_has_a_reference_tokenizer() -> None:
    assert sorted(REFERENCE_TOKENIZER) == sorted(a.name for a in ARCHITECTURES)


@pytest.fixture(scope="session")
def reference_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    built: dict[str, Path] = {}

    def make(kind: str) -> Path:
        if kind not in built:
            built[kind] = build_tokenizer_files(kind, tmp_path_factory.mktemp(f"reference-tokenizer-{kind}"))
        return built[kind]

    return make


def _with_extra_specials(base: Path, out_dir: Path, name: str) -> Path:
    """A copy of the base tokenizer with the architecture's EXTRA_SPECIALS added."""
    from tokenizers import AddedToken, Tokenizer

    if name not in EXTRA_SPECIALS:
        return base
    shutil.copytree(base, out_dir)
    tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in EXTRA_SPECIALS[name]])
    tokenizer.save(str(out_dir / "tokenizer.json"))
    return out_dir


def _as_saved_by_transformers(base: Path, model_dir: Path, name: str) -> None:
    """The catalog extends tokenizer.json only; transformers' save_pretrained also lists added tokens in
    tokenizer_config.json and keeps tokenizer.model next to them, as published checkpoints have it."""
    if (base / "tokenizer.model").is_file():
        shutil.copy2(base / "tokenizer.model", model_dir / "tokenizer.model")
    added = json.loads((model_dir / "tokenizer.json").read_text())["added_tokens"]
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = TOKENIZER_CLASS.get(name, config["tokenizer_class"])
    config["added_tokens_decoder"] = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}
    config_path.write_text(json.dumps(config, indent=1, ensure_ascii=False))


@pytest.mark.parametrize("name", sorted(REFERENCE_TOKENIZER))
def test_gguf_matches_llama_cpp_converter(name: str, tmp_path: Path, reference_tokenizer) -> None:
    base = _with_extra_specials(reference_tokenizer(REFERENCE_TOKENIZER[name]), tmp_path / "tokenizer", name)
    model_dir = build_architecture(by_name(name), tmp_path / name, base)
    _as_saved_by_transformers(base, model_dir, name)
    check_conformance(model_dir, tmp_path / "gguf", allowed=REFERENCE_ERRORS.get(name))
