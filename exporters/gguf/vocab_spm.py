"""SentencePiece tokenizers (Llama 2 style) as GGUF metadata: pieces, scores and piece types.

llama.cpp's "llama" tokenizer re-implements SentencePiece's BPE from the scores, so scores must rank
pieces as the model does; byte-fallback pieces (``<0x41>``) are typed BYTE so unknown characters
decompose into bytes exactly as SentencePiece does.

The pieces come from ``tokenizer.model`` when the checkpoint has one, else from ``tokenizer.json``
(a byte-fallback BPE that transformers converted from the SentencePiece model). The JSON keeps no
scores, but it keeps the merges in the model's order: ranking each piece by the first merge that
produces it gives llama.cpp the same merge order as the original scores.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError, MissingDependencyError
from edgeopt.exporters.gguf.vocab_common import (BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, Vocab, _add_flags,
                                         _chat_template, read_json, _special_ids, looks_special)

ADDED_TOKEN_SCORE = -1000.0  # user-defined and control tokens are matched by text, never merged
PADDING_SCORE = -10000.0  # embedding rows beyond the tokenizer
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")

Piece = tuple[str, float, int]  # text, score, token type


def _sentencepiece_pieces(path: Path) -> list[Piece]:
    try:
        import sentencepiece
    except ImportError as exc:
        raise MissingDependencyError("converting a SentencePiece tokenizer needs the sentencepiece package",
                                     "pip install 'edgeopt[optimize]'") from exc
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromFile(str(path))
    except (OSError, RuntimeError) as exc:
        raise ExportError(f"{path} is not a SentencePiece model ({str(exc).strip().splitlines()[-1]})",
                          "replace it with the tokenizer.model the model was published with, or delete it "
                          "if the directory's tokenizer.json describes the tokenizer") from exc
    pieces = []
    for i in range(sp.get_piece_size()):
        if sp.is_unknown(i):
            kind = UNKNOWN
        elif sp.is_control(i):
            kind = CONTROL
        elif sp.is_unused(i):
            kind = UNUSED
        elif sp.is_byte(i):
            kind = BYTE
        else:
            kind = NORMAL
        pieces.append((sp.id_to_piece(i), float(sp.get_score(i)), kind))
    return pieces


def is_sentencepiece_json(tokenizer_json: dict[str, Any]) -> bool:
    """Whether tokenizer.json is a SentencePiece BPE in HF form: BPE with byte fallback."""
    model = tokenizer_json.get("model") or {}
    return model.get("type") == "BPE" and bool(model.get("byte_fallback"))


def _merge_ranks(model: dict[str, Any]) -> dict[str, int]:
    """Merged piece -> rank of the first merge producing it."""
    ranks: dict[str, int] = {}
    for rank, merge in enumerate(model.get("merges", [])):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        ranks.setdefault(left + right, rank)
    return ranks


def _tokenizer_json_pieces(tokenizer_json: dict[str, Any], where: Path) -> list[Piece]:
    model = tokenizer_json["model"]
    by_id = {i: text for text, i in model["vocab"].items()}
    if sorted(by_id) != list(range(len(by_id))):
        raise ExportError(f"{where}'s vocabulary ids are not contiguous from 0",
                          "save the tokenizer again with tokenizer.save_pretrained(DIR)")
    ranks = _merge_ranks(model)
    specials = {t["id"] for t in tokenizer_json.get("added_tokens", []) if t.get("special")}
    pieces = []
    for i in range(len(by_id)):
        text = by_id[i]
        if _BYTE_PIECE.fullmatch(text):
            kind = BYTE
        elif i in specials or text == model.get("unk_token"):
            kind = CONTROL
        else:
            kind = NORMAL
        # Higher score merges first; pieces no merge produces (characters, bytes) are never merge results.
        pieces.append((text, -float(ranks[text]) if text in ranks else 0.0, kind))
    return pieces


def _apply_added_tokens(tokens: list[str], scores: list[float], types: list[int], model_dir: Path,
                        tokenizer_json: dict[str, Any]) -> None:
    """Added tokens override pieces: added_tokens.json (user-defined), then tokenizer.json's added_tokens
    and tokenizer_config.json's added_tokens_decoder (control when special). transformers writes the
    last two alike; llama.cpp's converter reads only the config's, so a token added to tokenizer.json
    alone would become an unused row there, and is kept here."""
    size = len(tokens)
    for text, tid in read_json(model_dir / "added_tokens.json").items():
        if tid < size:
            tokens[tid], scores[tid], types[tid] = text, ADDED_TOKEN_SCORE, USER_DEFINED
    decoder = read_json(model_dir / "tokenizer_config.json").get("added_tokens_decoder") or {}
    entries = {t["id"]: t for t in tokenizer_json.get("added_tokens", [])}
    entries.update({int(i): t for i, t in decoder.items()})
    for tid, entry in sorted(entries.items()):
        if tid >= size:
            raise ExportError(f"added token {entry['content']!r} has id {tid}, beyond the {size} embedding rows",
                              "resize the model's embeddings to the tokenizer (model.resize_token_embeddings)")
        text = entry["content"]
        if entry.get("special") or looks_special(text):
            types[tid] = CONTROL
        else:
            text = text.replace("\u2581", " ")  # llama.cpp expects user-defined tokens pre-normalized
            types[tid] = USER_DEFINED
        tokens[tid], scores[tid] = text, ADDED_TOKEN_SCORE


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
    """The SentencePiece vocabulary from tokenizer.model, or from tokenizer.json when that is all there is."""
    tokenizer_json = read_json(model_dir / "tokenizer.json")
    spm_file = model_dir / "tokenizer.model"
    pieces = (_sentencepiece_pieces(spm_file) if spm_file.is_file()
              else _tokenizer_json_pieces(tokenizer_json, model_dir / "tokenizer.json"))
    size = max(vocab_size, len(pieces))
    tokens = [text for text, _, _ in pieces] + [f"[PAD{i}]" for i in range(len(pieces), size)]
    scores = [score for _, score, _ in pieces] + [PADDING_SCORE] * (size - len(pieces))
    types = [kind for _, _, kind in pieces] + [UNUSED] * (size - len(pieces))
    _apply_added_tokens(tokens, scores, types, model_dir, tokenizer_json)
    vocab = Vocab("llama", tokens, types, scores=scores, pre="default")
    vocab.special_ids = _special_ids(model_dir, {t: i for i, t in enumerate(tokens)}, config)
    unk = next((i for i, (_, _, kind) in enumerate(pieces) if kind == UNKNOWN), None)
    if unk is not None:
        vocab.special_ids.setdefault("unk", unk)
    _add_flags(vocab, model_dir, tokenizer_json, default_bos=True)
    vocab.add_space_prefix = _add_space_prefix(tokenizer_json)
    vocab.chat_template = _chat_template(model_dir)
    return vocab
