"""The demo model's recipe: architecture, training budget, and the cache key that identifies a build.

Architecture choice: a Llama with grouped-query attention (4 query heads over 2 KV heads, head_dim
64), hidden 256, intermediate 768, 4096-token byte-level BPE. Every 2-D weight has a row size (its
input dimension) of 256 or 768, both multiples of 256, so llama.cpp's k-quants (256-value super
blocks) apply to every tensor without falling back to a legacy quant type.

Embeddings are *untied*: at this size the embedding matrix is a fifth of the model, and a separate
output head is what llama.cpp quantizes differently (Q6_K for output.weight under Q4_K_M), so the
demo shows per-tensor quantization effects the way real Llama checkpoints do. Tied models are
covered by the tiny test fixtures (``llama-tied``, ``qwen3``).
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass
from importlib import metadata

# Bump when the training code changes in a way the fields below do not capture; it invalidates
# every cached demo model.
RECIPE_VERSION = 2  # 2: tokenizer declares model_input_names (no token_type_ids)
KEY_PACKAGES = ("torch", "transformers", "tokenizers")


@dataclass(frozen=True)
class DemoRecipe:
    seed: int = 0
    vocab_size: int = 4096
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 768
    max_position_embeddings: int = 2048  # matches the tokenizer's model_max_length; trained at seq_len
    tie_word_embeddings: bool = False
    seq_len: int = 256
    batch_size: int = 8
    steps: int = 300
    learning_rate: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.1
    chat_fraction: float = 0.5  # share of each batch's rows drawn from the ChatML samples
    eval_fraction: float = 0.05  # tail of the corpus held out as eval.txt
    corpus_chars: int | None = None  # None: every CORPUS_MODULES entry; smaller for quick test builds
    torch_threads: int = 1  # one thread: no OpenMP barrier stalls on shared CI runners; numerics fixed

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def recipe_key(recipe: DemoRecipe, data_sha256: str) -> str:
    """Hash of everything that determines the trained weights: recipe, corpus, library versions."""
    blob = json.dumps({"recipe": asdict(recipe), "version": RECIPE_VERSION, "data": data_sha256,
                       "packages": package_versions()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def llama_config(recipe: DemoRecipe, vocab_size: int, special_ids: dict[str, int]):
    """The transformers LlamaConfig for ``recipe`` (imported lazily: serving never needs it)."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers, num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads, max_position_embeddings=recipe.max_position_embeddings,
        rms_norm_eps=1e-5, tie_word_embeddings=recipe.tie_word_embeddings,
        bos_token_id=special_ids["<|endoftext|>"], eos_token_id=special_ids["<|im_end|>"],
        pad_token_id=special_ids["<|endoftext|>"],
    )
    config.architectures = ["LlamaForCausalLM"]
    return config
