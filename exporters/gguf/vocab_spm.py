"""SentencePiece tokenizers (Llama 2 style) as GGUF metadata: pieces, scores and piece types.

llama.cpp's "llama" tokenizer re-implements SentencePiece's BPE from the scores, so scores must be
the model's own; byte-fallback pieces (``<0x41>``) are typed BYTE so unknown characters decompose
into bytes exactly as SentencePiece does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError, MissingDependencyError
from exporters.gguf.vocab import (BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, Vocab, _add_flags,
                                  _chat_template, _pad_to, _read_json, _special_ids)


def _piece_type(sp: Any, i: int) -> int:
    if sp.is_unknown(i):
        return UNKNOWN
    if sp.is_control(i):
        return CONTROL
    if sp.is_byte(i):
        return BYTE
    if sp.is_unused(i):
        return UNUSED
    return NORMAL


def _add_space_prefix(tokenizer_json: dict[str, Any]) -> bool:
    """Whether HF prepends "▁" to the text: its tokenizer.json says so; SentencePiece alone always does."""
    if not tokenizer_json:
        return True
    for part in (tokenizer_json.get("pre_tokenizer") or {}, tokenizer_json.get("normalizer") or {}):
        steps = part.get("pretokenizers") or part.get("normalizers") or [part]
        for step in steps:
            if step.get("type") == "Metaspace":
                return step.get("prepend_scheme", "always") != "never" and step.get("add_prefix_space", True)
            if step.get("type") == "Prepend":
                return True
    return False


def load_spm_vocab(model_dir: Path, vocab_size: int, config: dict[str, Any]) -> Vocab:
    try:
        import sentencepiece
    except ImportError as exc:
        raise MissingDependencyError("converting a SentencePiece tokenizer needs the sentencepiece package",
                                     "pip install 'edgeopt[optimize]'") from exc
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "tokenizer.model"))
    tokens = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    scores = [float(sp.get_score(i)) for i in range(len(tokens))]
    types = [_piece_type(sp, i) for i in range(len(tokens))]
    tokenizer_json = _read_json(model_dir / "tokenizer.json")
    added = {t["id"]: t for t in tokenizer_json.get("added_tokens", [])}
    added_file = _read_json(model_dir / "added_tokens.json")
    added.update({i: {"content": c, "special": False} for c, i in added_file.items() if i not in added})
    for tid in sorted(added):
        tok = added[tid]
        if tid > max(len(tokens), vocab_size):
            raise ExportError(f"added token {tok['content']!r} has id {tid}, beyond the vocabulary",
                              "resize the model's embeddings to the tokenizer")
        while len(tokens) <= tid:
            tokens.append(f"[PAD{len(tokens)}]")
            scores.append(-1000.0)
            types.append(UNUSED)
        tokens[tid] = tok["content"]
        if types[tid] in (NORMAL, UNUSED):
            types[tid] = CONTROL if tok.get("special") else USER_DEFINED
    vocab = Vocab("llama", tokens, types, scores=scores, pre="default")
    _pad_to(vocab, vocab_size)
    vocab.special_ids = _special_ids(model_dir, {t: i for i, t in enumerate(tokens)}, config)
    if sp.unk_id() >= 0:
        vocab.special_ids.setdefault("unk", sp.unk_id())
    _add_flags(vocab, model_dir, tokenizer_json, default_bos=True)
    vocab.add_space_prefix = _add_space_prefix(tokenizer_json)
    vocab.chat_template = _chat_template(model_dir)
    return vocab
