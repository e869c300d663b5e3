"""The architectures edgeopt supports, each as a tiny random model with its real model's properties.

One entry per architecture: the transformers config class and the config values that make it that
architecture (GQA, explicit head_dim, rope scaling, tied embeddings, sliding windows, multipliers,
NoPE layers, ...), the special tokens and chat template of the real model (the structure of the
published template, written here, with its ``tools`` branch), and what structured pruning must do.
Adding an architecture to the matrix (tests/architectures/test_matrix.py) is adding one entry.

Models are small (hidden 128, 2-4 layers, ~520 tokens) so each case runs in seconds, but big
enough that weights, not file headers, dominate their sizes (the planner's 5% check is meaningful).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.architectures import templates
from tests.fixtures import tiny_gemma
from tests.fixtures.tiny_models import widen_init

HIDDEN, INTERMEDIATE, LAYERS, CONTEXT = 128, 256, 2, 512


@dataclass(frozen=True)
class Architecture:
    name: str  # the test id
    config_class: str  # transformers' own config class
    config: dict[str, Any]  # the properties of the real model, on a tiny scale
    chat_template: str
    special_tokens: tuple[str, ...]  # added to the shared tiny tokenizer, as the real vocabulary has them
    bos: str | None
    eos: str
    # Structured pruning: knob ("ratio", "heads", "mlp", "layers") -> words its refusal must contain.
    # Knobs not listed must work.
    prune_refusals: dict[str, tuple[str, ...]] = field(default_factory=dict)
    takes_tools: bool = True  # the real template renders a ``tools`` list (Phi-3 / 3.5's do not)
    # Words of the 400 the real template gives a system message (Gemma 2 has no system role); None: accepted.
    system_refusal: str | None = None
    # Builds the checkpoint itself (own tokenizer, own init) instead of from the shared tiny tokenizer;
    # called as build(out_dir, **config_overrides).
    build: Callable[..., Path] | None = None

    @property
    def hf_architecture(self) -> str:
        return self.config_class.replace("Config", "ForCausalLM")


def _gqa(**extra: Any) -> dict[str, Any]:
    return dict(num_attention_heads=4, num_key_value_heads=2, **extra)


_LLAMA3_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
# Phi-3.5-mini / Phi-4-mini: LongRoPE over a 4k original window of 128k (here 256 of 1024; llama.cpp's
# context is at least 256 cells, so a smaller window could not be tested in its short regime): one
# factor per rotated dimension pair, short ones near 1, long ones growing with the wavelength.
_PHI_ORIGINAL, _PHI_CONTEXT = 256, 1024


def _longrope(pairs: int) -> dict[str, Any]:
    return {"type": "longrope",
            "short_factor": [round(1.0 + 0.05 * i, 4) for i in range(pairs)],
            "long_factor": [round(1.0 + 1.5 * i, 4) for i in range(pairs)]}


ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture(  # Llama 3.2 1B/3B: llama3 rope scaling, tied embeddings, GQA
        "llama3.2", "LlamaConfig",
        _gqa(tie_word_embeddings=True, rope_theta=500000.0, rope_scaling=_LLAMA3_SCALING,
             max_position_embeddings=131072),
        templates.LLAMA3, ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        bos="<|begin_of_text|>", eos="<|eot_id|>"),
    Architecture(  # Mistral 7B v0.1: sliding window (wider than any test sequence), untied
        "mistral", "MistralConfig",
        _gqa(tie_word_embeddings=False, sliding_window=4096, rope_theta=10000.0),
        templates.MISTRAL, ("<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"),
        bos="<s>", eos="</s>"),
    Architecture(  # Qwen2.5 0.5B: q/k/v biases, tied, ChatML with <tools>
        "qwen2", "Qwen2Config", _gqa(tie_word_embeddings=True, rope_theta=1000000.0),
        templates.QWEN, (), bos=None, eos="<|im_end|>",
        prune_refusals={"heads": ("Qwen2ForCausalLM", "attention heads", "hidden_size")}),
    Architecture(  # Qwen3: q/k norms, head_dim != hidden / heads
        "qwen3", "Qwen3Config", _gqa(head_dim=48, tie_word_embeddings=True, rope_theta=1000000.0),
        templates.QWEN, (), bos=None, eos="<|im_end|>"),
    Architecture(  # Phi-3-mini-4k: MHA, fused qkv / gate_up, no rope scaling, sliding window 2047 of 4096
        "phi3-mini", "Phi3Config",
        dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False, rope_theta=10000.0,
             max_position_embeddings=4096, original_max_position_embeddings=4096, sliding_window=2047),
        templates.PHI3, ("<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
        bos=None, eos="<|end|>", takes_tools=False,
        prune_refusals={"heads": ("Phi3ForCausalLM", "attention heads", "hidden_size")}),
    Architecture(  # Phi-3.5-mini: MHA, fused qkv / gate_up, LongRoPE, untied, SentencePiece-era specials
        "phi3.5", "Phi3Config",
        dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False, rope_theta=10000.0,
             max_position_embeddings=_PHI_CONTEXT, original_max_position_embeddings=_PHI_ORIGINAL,
             rope_scaling=_longrope(16), sliding_window=262144),
        # The SentencePiece-era <unk>/<s>/</s> are in the real vocabulary, and llama.cpp's vocab loader
        # looks them up for any model named phi3.
        templates.PHI3, ("<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
        bos=None, eos="<|end|>", takes_tools=False,
        prune_refusals={"heads": ("Phi3ForCausalLM", "attention heads", "hidden_size")}),
    Architecture(  # Phi-4-mini: GQA, partial rotary 0.75 (LongRoPE over the rotated 3/4), tied, tools
        "phi4-mini", "Phi3Config",
        _gqa(tie_word_embeddings=True, rope_theta=10000.0, partial_rotary_factor=0.75,
             max_position_embeddings=_PHI_CONTEXT, original_max_position_embeddings=_PHI_ORIGINAL,
             rope_scaling=_longrope(12), sliding_window=262144),
        templates.PHI4_MINI, ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool|>", "<|/tool|>"),
        bos=None, eos="<|end|>",
        prune_refusals={"heads": ("Phi3ForCausalLM", "attention heads", "hidden_size")}),
    Architecture(  # Granite 3.3 2B: the real multipliers, GQA, tied
        "granite3", "GraniteConfig",
        _gqa(tie_word_embeddings=True, rope_theta=10000000.0, embedding_multiplier=12.0, residual_multiplier=0.22,
             attention_multiplier=0.015625, logits_scaling=8.0),
        templates.GRANITE, ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_call|>"),
        bos="<|end_of_text|>", eos="<|end_of_text|>"),
    Architecture(  # SmolLM3 3B: every 4th layer without rope (4 layers here, so layer 3 is NoPE), tied
        "smollm3", "SmolLM3Config",
        _gqa(num_hidden_layers=4, tie_word_embeddings=True, rope_theta=5000000.0),
        templates.SMOLLM3, ("<think>", "</think>", "<tool_call>", "</tool_call>"), bos=None, eos="<|im_end|>",
        prune_refusals={"layers": ("SmolLM3ForCausalLM", "layers", "every 4th")}),
    Architecture(  # Gemma 2 2B/9B: soft-caps, alternating sliding window, (1 + w) norms, SentencePiece
        "gemma2", "Gemma2Config", tiny_gemma.GEMMA_VARIANTS["gemma2"][1], tiny_gemma.GEMMA2_TEMPLATE,
        tiny_gemma.TURN_TOKENS, bos="<bos>", eos="<eos>", takes_tools=False,  # neither real template has tools
        system_refusal="System role not supported",
        build=lambda out, **changes: tiny_gemma.build_tiny_gemma(out, "gemma2", **changes)),
    Architecture(  # Gemma 3 1B (text): 5 local : 1 global layers, local rope base, q/k norms
        "gemma3", "Gemma3TextConfig", tiny_gemma.GEMMA_VARIANTS["gemma3"][1], tiny_gemma.GEMMA3_TEMPLATE,
        tiny_gemma.TURN_TOKENS, bos="<bos>", eos="<eos>", takes_tools=False,
        build=lambda out, **changes: tiny_gemma.build_tiny_gemma(out, "gemma3", **changes)),
)


def _extend_tokenizer(base_dir: Path, out_dir: Path, arch: Architecture) -> int:
    """Copy the shared tokenizer, add the architecture's special tokens and chat template; vocab size."""
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(base_dir / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in arch.special_tokens])
    tokenizer.save(str(out_dir / "tokenizer.json"))
    if "phi3" in arch.name:
        _strip_after_specials(out_dir / "tokenizer.json")
    config = json.loads((base_dir / "tokenizer_config.json").read_text())
    config.update(bos_token=arch.bos, eos_token=arch.eos, pad_token=arch.eos, chat_template=arch.chat_template,
                  add_bos_token=arch.bos is not None)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "special_tokens_map.json").write_text(json.dumps(
        {k: v for k, v in {"bos_token": arch.bos, "eos_token": arch.eos, "pad_token": arch.eos}.items() if v}))
    return tokenizer.get_vocab_size(with_added_tokens=True)


def _strip_after_specials(tokenizer_json: Path) -> None:
    """Phi-3's real tokenizer.json has rstrip on its special tokens (whitespace after <|end|> or <|user|> is
    part of the token), and llama.cpp applies that rule to every special token of a model named phi3 except
    <unk>, <s> and <|endoftext|>; the fixture's tokenizer must agree, or the GGUF export's tokenizer check
    rightly refuses it."""
    data = json.loads(tokenizer_json.read_text())
    for token in data["added_tokens"]:
        if token["special"] and token["content"] not in ("<unk>", "<s>", "<|endoftext|>"):
            token["rstrip"] = True
    tokenizer_json.write_text(json.dumps(data, ensure_ascii=False))


def build_architecture(arch: Architecture, out_dir: Path, base_tokenizer_dir: Path | None, seed: int = 0,
                       **config_overrides: Any) -> Path:
    """A random-init checkpoint of ``arch`` (config.json, safetensors, tokenizer files) in ``out_dir``;
    ``config_overrides`` change the entry's config values. ``base_tokenizer_dir`` may be None only for
    an entry that builds its own tokenizer."""
    import torch
    import transformers

    if arch.build is not None:
        return arch.build(out_dir, **config_overrides)
    if base_tokenizer_dir is None:
        raise ValueError(f"{arch.name} is built on a base tokenizer; none was given")
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_size = _extend_tokenizer(base_tokenizer_dir, out_dir, arch)
    ids = json.loads((out_dir / "tokenizer.json").read_text())["model"]["vocab"]
    ids.update({t["content"]: t["id"] for t in json.loads((out_dir / "tokenizer.json").read_text())["added_tokens"]})
    values = dict(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                  max_position_embeddings=CONTEXT, rms_norm_eps=1e-5)
    values.update(arch.config)
    values.update(config_overrides)
    config = getattr(transformers, arch.config_class)(
        vocab_size=vocab_size, bos_token_id=ids[arch.bos] if arch.bos else None, eos_token_id=ids[arch.eos],
        pad_token_id=ids[arch.eos], **values)
    config.architectures = [arch.hf_architecture]
    torch.manual_seed(seed)
    model = getattr(transformers, arch.hf_architecture)(config)
    widen_init(model)
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def by_name(name: str) -> Architecture:
    return next(a for a in ARCHITECTURES if a.name == name)


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
