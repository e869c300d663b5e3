"""A real SentencePiece tokenizer (Llama 2 settings) trained here in seconds, with its HF files."""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt.demo.corpus import stdlib_text

SPM_VOCAB = 700
# Llama 2 chat's [INST] shape, taking `tools` as instruct templates do.
LLAMA2_TEMPLATE = (
    "{% if tools %}{{ bos_token }}[INST] Tools: {{ tools | tojson }} [/INST]{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token }}[INST] {{ m['content'] | trim }} [/INST]"
    "{% else %} {{ m['content'] | trim }} {{ eos_token }}{% endif %}{% endfor %}"
)


def build_spm_tokenizer(out_dir: Path, vocab_size: int = SPM_VOCAB) -> Path:
    """Train a byte-fallback SentencePiece BPE and save tokenizer.model + tokenizer.json (transformers'
    converter, via LlamaTokenizerFast) + tokenizer_config.json into out_dir."""
    import sentencepiece as spm

    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [line for line in stdlib_text(150_000).splitlines() if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(out_dir / "tokenizer"), vocab_size=vocab_size,
        model_type="bpe", byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=0.9995, num_threads=2,
        minloglevel=2,
    )
    (out_dir / "tokenizer.vocab").unlink()
    save_llama2_hf_files(out_dir)
    return out_dir


def save_llama2_hf_files(out_dir: Path) -> None:
    """tokenizer.json and tokenizer_config.json from out_dir/tokenizer.model, as Llama 2 publishes them
    (transformers' converter, via LlamaTokenizerFast)."""
    import transformers

    tokenizer = transformers.LlamaTokenizerFast(vocab_file=str(out_dir / "tokenizer.model"), legacy=True,
                                                add_prefix_space=True, from_slow=True,  # Llama 2's Prepend("▁")
                                                add_bos_token=True, add_eos_token=False)
    tokenizer.save_pretrained(str(out_dir))
    finish_llama2_config(out_dir, LLAMA2_TEMPLATE)


def finish_llama2_config(out_dir: Path, chat_template: str | None = None) -> None:
    """Make tokenizer_config.json as published Llama 2 files have it: the Prepend("\u2581") lives in
    tokenizer.json only (a saved add_prefix_space makes LlamaTokenizerFast rebuild itself from
    tokenizer.model, which a JSON-only copy lacks), and the chat template is in it."""
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("add_prefix_space", None)
    if chat_template is not None:
        config["chat_template"] = chat_template
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False))
