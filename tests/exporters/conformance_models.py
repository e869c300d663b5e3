"""Tiny random checkpoints for the conformance check, each with a tokenizer llama.cpp's converter knows.

The reference converter identifies a byte-level BPE by hashing its output on a probe text, so our
own trained test tokenizer is refused there; these checkpoints carry real tokenizers instead: Llama 3
(128k) and Qwen2 (151k) rebuilt from llama.cpp's test vocabularies, or a SentencePiece model trained
here (Llama 2 style). Adding a case is one ``CASES`` entry; the architecture matrix
(tests/architectures/test_conformance.py) checks every supported architecture the same way.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fixtures.tiny_models import widen_init

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


@dataclass(frozen=True)
class ConformanceCase:
    config_class: str  # transformers config class; the model class is its *ForCausalLM
    tokenizer: str  # "llama-bpe" / "qwen2" (real vocabularies), "spm" or "spm-json-only" (trained here)
    overrides: dict[str, Any] = field(default_factory=dict)
    vocab_size: int | None = None  # embedding rows; None: the tokenizer's size
    # Metadata keys (or "tokenization") where the reference's output is wrong for this case, with why;
    # each needs a test proving it (tests/exporters/test_gguf_conformance.py).
    reference_errors: dict[str, str] = field(default_factory=dict)


SCORES_FROM_JSON = ("from a tokenizer.json-only SentencePiece model the reference writes the placeholder "
                    "score -1000 for every piece, so llama.cpp merges left to right instead of in the model's "
                    "order and mistokenizes; we rank pieces by their merges, which matches transformers")


SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-5)

CASES: dict[str, ConformanceCase] = {
    # Llama 3.2: llama3 rope scaling (rope_freqs tensor), tied embeddings, 128k vocabulary, GQA.
    "llama-3.2": ConformanceCase("LlamaConfig", "llama-bpe", dict(
        tie_word_embeddings=True, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE, max_position_embeddings=131072,
        bos_token_id=128000, eos_token_id=[128001, 128008, 128009])),
    # Llama 2: SentencePiece with byte fallback, untied embeddings.
    "llama-2": ConformanceCase("LlamaConfig", "spm", dict(tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                                                          max_position_embeddings=4096)),
    # Llama 2 tokenizer shipped as tokenizer.json only (no tokenizer.model).
    "llama-2-tokenizer-json": ConformanceCase("LlamaConfig", "spm-json-only", dict(
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, max_position_embeddings=4096),
        reference_errors={"tokenizer.ggml.scores": SCORES_FROM_JSON, "tokenization": SCORES_FROM_JSON}),
    # Qwen2: q/k/v biases, untied, embedding rows beyond the tokenizer (151,936 vs 151,646).
    "qwen2": ConformanceCase("Qwen2Config", "qwen2", dict(
        tie_word_embeddings=False, rope_theta=1000000.0, bos_token_id=151643, eos_token_id=151645,
        max_position_embeddings=32768), vocab_size=151936),
}


def build_tokenizer_files(kind: str, out_dir: Path) -> Path:
    """Write the named tokenizer's files into out_dir."""
    if kind in ("llama-bpe", "qwen2"):
        from tests.exporters.real_tokenizers import build_byte_level_tokenizer

        return build_byte_level_tokenizer(kind, out_dir)
    from tests.exporters.spm_tokenizers import build_spm_tokenizer

    build_spm_tokenizer(out_dir)
    if kind == "spm-json-only":
        (out_dir / "tokenizer.model").unlink()
    return out_dir


def _tokenizer_size(tokenizer_dir: Path) -> int:
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    ids = list(data["model"]["vocab"].values()) + [t["id"] for t in data["added_tokens"]]
    return max(ids) + 1


def build_conformance_checkpoint(out_dir: Path, case: ConformanceCase, tokenizer_dir: Path, seed: int = 0) -> Path:
    """Random-init checkpoint of ``case`` (config + safetensors) with the tokenizer files copied in."""
    import torch
    import transformers

    out_dir.mkdir(parents=True, exist_ok=True)
    for f in tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copy2(f, out_dir / f.name)
    vocab_size = case.vocab_size or _tokenizer_size(tokenizer_dir)
    config = getattr(transformers, case.config_class)(vocab_size=vocab_size, **{**SMALL, **case.overrides})
    config.architectures = [case.config_class.replace("Config", "ForCausalLM")]
    torch.manual_seed(seed)
    model = getattr(transformers, config.architectures[0])(config)
    widen_init(model)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
