"""One EOS-id collector for every runtime that reads a Hugging Face checkpoint (onnxruntime, torch)."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer, eos_token_ids
from edgeopt.runtimes.torch.loading import runtime_info

VOCAB = {"a": 0, "<|endoftext|>": 1, "<|im_end|>": 2, "<|eot_id|>": 3, "<unk>": 4}


def chat_bundle(tmp_path: Path) -> tuple[Path, BundleTokenizer]:
    """A ChatML fine-tune: config.json names the base model's <|endoftext|>, the tokenizer ends turns with
    <|im_end|> (tokenizer_config's eos_token, stored as an AddedToken dict), generation_config lists two."""
    tok_dir, model_dir = tmp_path / "tokenizer", tmp_path / "model"
    tok_dir.mkdir()
    model_dir.mkdir()
    Tokenizer(WordLevel(VOCAB, unk_token="<unk>")).save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|im_end|>"}}))
    (model_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 3]}))
    return model_dir, BundleTokenizer(tok_dir / "tokenizer.json")


def test_eos_ids_are_config_generation_config_and_the_tokenizers_eos(tmp_path: Path) -> None:
    _, tokenizer = chat_bundle(tmp_path)
    assert eos_token_ids({"eos_token_id": 1}, {"eos_token_id": [1, 3]}, {"eos_token": "<|im_end|>"},
                         tokenizer) == {1, 2, 3}
    assert eos_token_ids({"eos_token_id": 1}, {}, {"eos_token": "<not-in-vocab>"}, tokenizer) == {1}
    assert eos_token_ids({}, {"eos_token_id": 3}, {}, tokenizer) == {3}


def test_the_torch_runtime_stops_at_the_tokenizers_end_of_turn_too(tmp_path: Path) -> None:
    """The torch runtime used to read config.json and generation_config.json only, so a chat fine-tune's
    <|im_end|> did not end its replies while the ONNX runtime (and llama.cpp) stopped there."""
    model_dir, tokenizer = chat_bundle(tmp_path)
    info = runtime_info(model_dir, {"vocab_size": len(VOCAB), "eos_token_id": 1}, tokenizer, None, 1, 16)
    assert info.eos_token_ids == {1, 2, 3}
