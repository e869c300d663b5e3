"""Random-weight checkpoints of the shapes users ship (Llama 3.2 1B, Llama 3.1 8B) with the real Llama 3 vocabulary
(128,256 tokens, rebuilt from llama.cpp's ``ggml-vocab-llama-bpe.gguf``: tests/exporters/real_tokenizers.py), for
the workshop's benchmarks at deployment sizes. No hub: every tensor is drawn here.

Written as bf16 safetensors shards of at most 2 GiB, one tensor in memory at a time, so an 8B (16 GB) is made on
a 24 GB machine. Random weights fail any quality floor by design (pass ``--accept-quality-loss``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SHARD_BYTES = 2 << 30


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    tied: bool
    rope_theta: float = 500_000.0


SHAPES = {
    "small": Shape(hidden=256, intermediate=1024, layers=2, heads=4, kv_heads=2, tied=True),  # CI: the real vocab, tiny body
    "1b": Shape(hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8, tied=True),  # Llama 3.2 1B
    "8b": Shape(hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8, tied=False),  # Llama 3.1 8B
}
VOCAB = 128_256


def _config(shape: Shape) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.hidden,
            "intermediate_size": shape.intermediate, "num_hidden_layers": shape.layers,
            "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
            "head_dim": shape.hidden // shape.heads, "vocab_size": VOCAB, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "rope_theta": shape.rope_theta, "tie_word_embeddings": shape.tied,
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
            "bos_token_id": 128000, "eos_token_id": 128009, "initializer_range": 0.02}


def _tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    head_dim = shape.hidden // shape.heads
    out = [("model.embed_tokens.weight", (VOCAB, shape.hidden))]
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", (shape.hidden,)),
                (f"{p}.self_attn.q_proj.weight", (shape.heads * head_dim, shape.hidden)),
                (f"{p}.self_attn.k_proj.weight", (shape.kv_heads * head_dim, shape.hidden)),
                (f"{p}.self_attn.v_proj.weight", (shape.kv_heads * head_dim, shape.hidden)),
                (f"{p}.self_attn.o_proj.weight", (shape.hidden, shape.heads * head_dim)),
                (f"{p}.post_attention_layernorm.weight", (shape.hidden,)),
                (f"{p}.mlp.gate_proj.weight", (shape.intermediate, shape.hidden)),
                (f"{p}.mlp.up_proj.weight", (shape.intermediate, shape.hidden)),
                (f"{p}.mlp.down_proj.weight", (shape.hidden, shape.intermediate))]
    out.append(("model.norm.weight", (shape.hidden,)))
    if not shape.tied:
        out.append(("lm_head.weight", (VOCAB, shape.hidden)))
    return out


def make_checkpoint(name: str, out_dir: Path, seed: int = 0) -> Path:
    """Write the ``name`` shape's checkpoint into ``out_dir`` (reused when a complete one is there)."""
    import torch
    from safetensors.torch import save_file

    from tests.exporters.real_tokenizers import build_byte_level_tokenizer

    done = out_dir / ".complete"
    if done.is_file():
        return out_dir
    shape = SHAPES[name]
    out_dir.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    shards: list[dict] = [{}]
    sizes = [0]
    for tensor, dims in _tensors(shape):
        nbytes = 2 * int(torch.Size(dims).numel())
        if sizes[-1] and sizes[-1] + nbytes > SHARD_BYTES:
            shards.append({})
            sizes.append(0)
        shards[-1][tensor] = dims
        sizes[-1] += nbytes
    weight_map = {}
    for index, names in enumerate(shards, 1):
        file = f"model-{index:05d}-of-{len(shards):05d}.safetensors"
        tensors = {t: (torch.ones(d) if len(d) == 1 else torch.randn(d, generator=generator) * 0.02).to(torch.bfloat16)
                   for t, d in names.items()}
        save_file(tensors, str(out_dir / file), metadata={"format": "pt"})
        del tensors
        weight_map |= {t: file for t in names}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}, indent=1))
    (out_dir / "config.json").write_text(json.dumps(_config(shape), indent=1))
    (out_dir / "generation_config.json").write_text(json.dumps({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}))
    build_byte_level_tokenizer("llama-bpe", out_dir)
    done.write_text("ok\n")
    return out_dir
