"""The tokenizer as GGUF metadata, so any GGUF consumer tokenizes exactly like Hugging Face.

Two kinds: byte-level BPE read from ``tokenizer.json`` (GGUF model "gpt2", with merges and the
pre-tokenizer's identity, which llama.cpp knows by name) and SentencePiece read from
``tokenizer.model`` (GGUF model "llama", with scores and byte-fallback tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError
from edgeopt.exporters.gguf.pretokenizer import pre_tokenizer_name
from edgeopt.exporters.gguf.vocab_common import (CONTROL, NORMAL, UNUSED, USER_DEFINED, Vocab, _add_flags, _chat_template,
                                         read_json, _special_ids, looks_special)
from edgeopt.exporters.gguf.vocab_spm import is_sentencepiece_json, load_spm_vocab


def load_bpe_vocab(model_dir: Path, vocab_size: int, config: dict[str, Any]) -> Vocab:
    data = read_json(model_dir / "tokenizer.json")
    model = data.get("model", {})
    if model.get("type") != "BPE":
        raise ExportError(f"{model_dir / 'tokenizer.json'} has a {model.get('type')!r} model; expected BPE",
                          "supported tokenizers: byte-level BPE (tokenizer.json) and SentencePiece (tokenizer.model)")
    token_to_id: dict[str, int] = dict(model["vocab"])
    added = {t["id"]: t for t in data.get("added_tokens", [])}
    for tid, tok in added.items():
        token_to_id[tok["content"]] = tid
    size = max(vocab_size, max(token_to_id.values()) + 1)
    by_id = {tid: text for text, tid in token_to_id.items()}
    tokens, types = [], []
    for i in range(size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(CONTROL if added[i].get("special") or looks_special(added[i]["content"]) else USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    vocab = Vocab("gpt2", tokens, types, merges=merges, pre=pre_tokenizer_name(data, model_dir))
    vocab.special_ids = _special_ids(model_dir, token_to_id, config)
    _add_flags(vocab, model_dir, data, default_bos=False)
    vocab.chat_template = _chat_template(model_dir)
    return vocab


def load_vocab(model_dir: Path, vocab_size: int, config: dict[str, Any]) -> Vocab:
    """The checkpoint's tokenizer: byte-level BPE from tokenizer.json, else SentencePiece from
    tokenizer.model, or from a tokenizer.json that is SentencePiece in HF form (byte-fallback BPE)."""
    tokenizer_json = read_json(model_dir / "tokenizer.json")
    is_byte_level = tokenizer_json.get("model", {}).get("type") == "BPE" and not is_sentencepiece_json(tokenizer_json)
    if not is_byte_level and ((model_dir / "tokenizer.model").is_file() or is_sentencepiece_json(tokenizer_json)):
        return load_spm_vocab(model_dir, vocab_size, config)
    if tokenizer_json:
        return load_bpe_vocab(model_dir, vocab_size, config)
    raise ExportError(f"{model_dir} has neither tokenizer.json nor tokenizer.model",
                      "save the tokenizer next to the weights (tokenizer.save_pretrained(DIR))")


def add_vocab(writer: Any, vocab: Vocab) -> None:
    """Write the tokenizer.ggml.* keys."""
    writer.add_tokenizer_model(vocab.model)
    if vocab.pre:
        writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
    if vocab.merges:
        writer.add_token_merges(vocab.merges)
    setters = {"bos": writer.add_bos_token_id, "eos": writer.add_eos_token_id,
               "unk": writer.add_unk_token_id, "pad": writer.add_pad_token_id}
    for role, token_id in vocab.special_ids.items():
        setters[role](token_id)
    writer.add_add_bos_token(vocab.add_bos)
    writer.add_add_eos_token(vocab.add_eos)
    if vocab.add_space_prefix is not None:
        writer.add_add_space_prefix(vocab.add_space_prefix)
    if vocab.chat_template:
        writer.add_chat_template(vocab.chat_template)
