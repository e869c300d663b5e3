"""The tokenizer as GGUF metadata, so any GGUF consumer tokenizes exactly like Hugging Face.

Two kinds: byte-level BPE read from ``tokenizer.json`` (GGUF model "gpt2", with merges and the
pre-tokenizer's identity, which llama.cpp knows by name) and SentencePiece read from
``tokenizer.model`` (GGUF model "llama", with scores and byte-fallback tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError
from exporters.gguf.pretokenizer import pre_tokenizer_name

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


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _special_ids(model_dir: Path, token_to_id: dict[str, int], config: dict[str, Any]) -> dict[str, int]:
    tok_config = _read_json(model_dir / "tokenizer_config.json")
    special_map = _read_json(model_dir / "special_tokens_map.json")
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
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    template = _read_json(model_dir / "tokenizer_config.json").get("chat_template")
    if isinstance(template, list):  # named templates: keep the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    return template if isinstance(template, str) else None


# transformers classes that rebuild their post-processor from tokenizer_config.json's add_bos_token /
# add_eos_token (their update_post_processor); every other fast tokenizer runs tokenizer.json's as saved.
_CONFIG_DECIDES_SPECIALS = ("LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer", "GPTNeoXTokenizer",
                            "CohereTokenizer")


def _add_flags(vocab: Vocab, model_dir: Path, tokenizer_json: dict[str, Any], default_bos: bool) -> None:
    """Whether BOS / EOS are added, as transformers decides: tokenizer_config.json's flags for the classes
    that honour them, else tokenizer.json's post-processor (a config flag it ignores is not obeyed)."""
    tok_config = _read_json(model_dir / "tokenizer_config.json")
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


def load_bpe_vocab(model_dir: Path, vocab_size: int, config: dict[str, Any]) -> Vocab:
    data = _read_json(model_dir / "tokenizer.json")
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
    from exporters.gguf.vocab_spm import is_sentencepiece_json, load_spm_vocab

    tokenizer_json = _read_json(model_dir / "tokenizer.json")
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
