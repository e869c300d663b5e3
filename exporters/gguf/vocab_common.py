"""What both tokenizer readers share (byte-level BPE in vocab.py, SentencePiece in vocab_spm.py): the
GGUF token types, the Vocab record and the tokenizer_config.json facts (special ids, BOS/EOS flags, chat
template). Its own module so the two readers depend on it, not on each other (no import cycle)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from edgeopt.sources.tokenizer_config import chat_template_in

# gguf TokenType values (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@dataclass
class Vocab:
    model: str  # "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    tokens: list[str]
    types: list[int]
    scores: list[float] | None = None
    merges: list[str] = field(default_factory=list)
    pre: str | None = None
    special_ids: dict[str, int] = field(default_factory=dict)  # bos/eos/unk/pad -> id
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool | None = None
    chat_template: str | None = None


def looks_special(text: str) -> bool:
    """Added tokens some checkpoints forget to mark special but that are control tokens all the same
    (``<|im_start|>``-style, DeepSeek's full-width bars, Gemma's ``<unused0>``, ``<pad>``, ``<mask>``).
    llama.cpp's converter types them CONTROL; so do we, or llama.cpp would print them as text."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def read_json(path: Path) -> dict[str, Any]:
    """A tokenizer file's JSON, ``{}`` where there is none. Parsed once per process while the file's stat stamp
    holds (Llama 3's 9 MB tokenizer.json took 0.8 s a parse, and the conversion, its name and its check each
    read it): callers share the result and must not change it."""
    if not path.is_file():
        return {}
    st = path.stat()
    return _parsed(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=8)
def _parsed(path: str, _size: int, _mtime_ns: int, _inode: int) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _special_ids(model_dir: Path, token_to_id: dict[str, int], config: dict[str, Any]) -> dict[str, int]:
    tok_config = read_json(model_dir / "tokenizer_config.json")
    special_map = read_json(model_dir / "special_tokens_map.json")
    ids: dict[str, int] = {}
    for role in ("bos", "eos", "unk", "pad"):
        text = _token_text(tok_config.get(f"{role}_token")) or _token_text(special_map.get(f"{role}_token"))
        if text is not None and text in token_to_id:
            ids[role] = token_to_id[text]
        elif isinstance(config.get(f"{role}_token_id"), int):
            ids[role] = config[f"{role}_token_id"]
        elif isinstance(config.get(f"{role}_token_id"), list) and config[f"{role}_token_id"]:
            ids[role] = config[f"{role}_token_id"][0]
    return ids


def _post_processor_adds(tokenizer_json: dict[str, Any], token: str | None) -> bool:
    """Whether tokenizer.json's TemplateProcessing puts ``token`` in a single sequence (Llama 3 style BOS)."""
    proc = tokenizer_json.get("post_processor") or {}
    procs = proc.get("processors", [proc]) if proc.get("type") == "Sequence" else [proc]
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            return any(piece.get("SpecialToken", {}).get("id") == token for piece in p.get("single", []))
    return False


def _chat_template(model_dir: Path) -> str | None:
    return chat_template_in(model_dir, read_json(model_dir / "tokenizer_config.json"))


# transformers classes that rebuild their post-processor from tokenizer_config.json's add_bos_token /
# add_eos_token (their update_post_processor); every other fast tokenizer runs tokenizer.json's as saved.
_CONFIG_DECIDES_SPECIALS = ("LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer", "GPTNeoXTokenizer",
                            "CohereTokenizer")


def _add_flags(vocab: Vocab, model_dir: Path, tokenizer_json: dict[str, Any], default_bos: bool) -> None:
    """Whether BOS / EOS are added, as transformers decides: tokenizer_config.json's flags for the classes
    that honour them, else tokenizer.json's post-processor (a config flag it ignores is not obeyed)."""
    tok_config = read_json(model_dir / "tokenizer_config.json")
    inv = {i: t for i, t in enumerate(vocab.tokens)}
    bos_text = inv.get(vocab.special_ids.get("bos", -1))
    eos_text = inv.get(vocab.special_ids.get("eos", -1))
    tokenizer_class = str(tok_config.get("tokenizer_class") or "").removesuffix("Fast")
    if tokenizer_json.get("post_processor") and tokenizer_class not in _CONFIG_DECIDES_SPECIALS:
        vocab.add_bos = _post_processor_adds(tokenizer_json, bos_text)
        vocab.add_eos = bool(eos_text) and _post_processor_adds(tokenizer_json, eos_text)
        return
    vocab.add_bos = bool(tok_config.get("add_bos_token", _post_processor_adds(tokenizer_json, bos_text) or default_bos))
    vocab.add_eos = bool(tok_config.get("add_eos_token", bool(eos_text) and _post_processor_adds(tokenizer_json, eos_text)))
