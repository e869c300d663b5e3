"""Every architecture of the matrix, converted by our writer and by llama.cpp's own converter
(convert_hf_to_gguf.py, fetched by ``make setup``): same tensors, metadata, tokenizer and logits.

The reference identifies a byte-level BPE by hashing its output on a probe text, so the matrix's
shared tiny tokenizer is unknown to it; each architecture is built here from its catalog entry on a
tokenizer the reference knows (tests/exporters/conformance_models.py). Adding an architecture to this
check is one ``REFERENCE_TOKENIZER`` entry. Gemma keeps the catalog's own tokenizer: a SentencePiece
model shipped as tokenizer.model and tokenizer.json, as the real Gemma is, which the reference reads.
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
from tests.fixtures import tiny_gemma

# The catalog entry builds its own tokenizer, the one its real model family ships.
OWN_TOKENIZER = "own"

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
    "gemma2": OWN_TOKENIZER,  # Gemma's SentencePiece (tokenizer.model + tokenizer.json, <start_of_turn>)
    # The same, with 36 embedding rows beyond the tokenizer (as 262208 vs 262144): both converters keep
    # them as [PAD] tokens. The reference trims such rows only for a Gemma 3 without tokenizer.model, which
    # it reads as a byte-level BPE (it refuses a SentencePiece tokenizer.json there; we convert it).
    "gemma3": OWN_TOKENIZER,
}
# Config values where the catalog's tiny model departs on purpose from every real checkpoint, set back
# to the real relation here. Gemma: the catalog's query_pre_attn_scalar (24) differs from the head size
# llama.cpp scales by, to test our fold of the ratio into the queries; in every published Gemma 2 / 3
# they are equal (head_dim 256 = 256; the 27B models: hidden/heads 144 / 168 = the scalar), so nothing is
# folded. The reference never folds (test_gguf_gemma.py::test_reference_converter_ignores_query_pre_attn_scalar
# shows its file then disagrees with transformers), so on the catalog's value the two files must differ.
CONFIG_OVERRIDES = {name: {"query_pre_attn_scalar": tiny_gemma.HEAD_DIM} for name in ("gemma2", "gemma3")}
# Added tokens (text, special) of the real vocabulary, saved by transformers into tokenizer.json and
# tokenizer_config.json. Gemma 3: <image_soft_token> beyond the SentencePiece pieces but inside the
# embedding rows (id 262144 of 262208), control tokens its config leaves unmarked (<unused0>, <mask>,
# [@BOS@]: both converters type them CONTROL by their look) and a plain user-defined one (its HTML tags).
ADDED_TOKENS = {"gemma3": (("<image_soft_token>", True), ("<unused0>", False), ("<mask>", False),
                           ("[@BOS@]", False), ("<table>", False))}
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


def _with_added_tokens(model_dir: Path, name: str) -> None:
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    if name not in ADDED_TOKENS:
        return
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    for text, special in ADDED_TOKENS[name]:
        tokenizer.add_tokens([AddedToken(text, special=special, normalized=False)], special_tokens=special)
    tokenizer.save_pretrained(str(model_dir))


@pytest.mark.parametrize("name", sorted(REFERENCE_TOKENIZER))
def test_gguf_matches_llama_cpp_converter(name: str, tmp_path: Path, reference_tokenizer) -> None:
    arch = by_name(name)
    if REFERENCE_TOKENIZER[name] == OWN_TOKENIZER:
        assert arch.build is not None, f"{name} has no builder of its own tokenizer"
        model_dir = build_architecture(arch, tmp_path / name, None, **CONFIG_OVERRIDES.get(name, {}))
        _with_added_tokens(model_dir, name)
    else:
        base = _with_extra_specials(reference_tokenizer(REFERENCE_TOKENIZER[name]), tmp_path / "tokenizer", name)
        model_dir = build_architecture(arch, tmp_path / name, base, **CONFIG_OVERRIDES.get(name, {}))
        _as_saved_by_transformers(base, model_dir, name)
    check_conformance(model_dir, tmp_path / "gguf", allowed=REFERENCE_ERRORS.get(name))
