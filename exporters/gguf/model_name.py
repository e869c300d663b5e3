"""The GGUF's general.name, which llama.cpp reads for more than display.

A GGUF keeps no per-token whitespace stripping: llama.cpp strips the whitespace after every special token
(but <unk>, <s>, <|endoftext|>) only for a model whose general.name contains "phi3" or "phi-3", as Phi-3's
tokenizer.json does with rstrip on its special tokens. A checkpoint whose tokenizer strips after its special
tokens therefore gets such a name whatever its folder is called (a hub snapshot's folder is a commit hash, a
pruned copy's a cache key); the export's tokenizer check then confirms llama.cpp reads it the same way.
"""

from __future__ import annotations

from pathlib import Path

_STRIPPING_NAMES = ("phi3", "phi-3")


def gguf_model_name(model_dir: Path) -> str:
    name = model_dir.name
    if _strips_after_special_tokens(model_dir) and not any(key in name.lower() for key in _STRIPPING_NAMES):
        return f"phi3-{name}"
    return name


def _strips_after_special_tokens(model_dir: Path) -> bool:
    from edgeopt.exporters.gguf.vocab_common import read_json

    # SentencePiece-only checkpoints have no tokenizer.json: no added-token attributes to honour
    added = read_json(model_dir / "tokenizer.json").get("added_tokens", [])
    return any(token.get("special") and token.get("rstrip") for token in added)
