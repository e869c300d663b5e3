"""The planner's GGUF sizes for real Gemma checkpoints against the files people publish.

Configs are the real models' config.json values (only what sizing reads); sizes are the published
GGUF files made with llama.cpp (Hugging Face shows 1e9-byte GB, rounded to 0.01 GB):
bartowski/gemma-2-9b-it-GGUF, bartowski/gemma-2-27b-it-GGUF, bartowski/google_gemma-3-1b-it-qat-GGUF
(QAT weights, same shapes as gemma-3-1b-it) and tensorblock/gemma-3-1b-it-GGUF (Q4_0).
"""

from __future__ import annotations

import pytest

from edgeopt.sources.model_spec import spec_from_config
from edgeopt.planning.checkpoint import weight_bytes

GEMMA2_9B = dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2", vocab_size=256000, hidden_size=3584,
                 intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=256, max_position_embeddings=8192)
GEMMA2_27B = dict(GEMMA2_9B, hidden_size=4608, intermediate_size=36864, num_hidden_layers=46, num_attention_heads=32,
                  num_key_value_heads=16, head_dim=128)
GEMMA3_1B = dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", vocab_size=262144, hidden_size=1152,
                 intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
                 head_dim=256, max_position_embeddings=32768)

PUBLISHED = [
    ("gemma-2-9b-it", GEMMA2_9B, "Q8_0", 9.82e9),
    ("gemma-2-27b-it", GEMMA2_27B, "Q8_0", 28.93e9),
    ("gemma-3-1b-it", GEMMA3_1B, "BF16", 2.01e9),
    ("gemma-3-1b-it", GEMMA3_1B, "Q8_0", 1.07e9),
    ("gemma-3-1b-it", GEMMA3_1B, "Q6_K", 1.01e9),
    ("gemma-3-1b-it", GEMMA3_1B, "Q5_K_M", 0.85e9),
    ("gemma-3-1b-it", GEMMA3_1B, "Q4_K_M", 0.81e9),  # hidden 1152 is no multiple of 256: k-quant fallbacks
    ("gemma-3-1b-it", GEMMA3_1B, "Q4_K_S", 0.78e9),
    ("gemma-3-1b-it", GEMMA3_1B, "Q4_0", 0.72e9),
]


@pytest.mark.parametrize("name,config,quant,published", PUBLISHED, ids=[f"{p[0]}-{p[2]}" for p in PUBLISHED])
def test_planned_size_within_5_percent_of_published_file(name: str, config: dict, quant: str, published: float) -> None:
    planned = weight_bytes(spec_from_config(config, name), "gguf", quant)
    assert abs(planned / published - 1) <= 0.05, f"{name} {quant}: planned {planned / 1e9:.3f} GB, file {published / 1e9} GB"


def test_gemma_parameter_count_includes_sandwich_norms_and_tied_output() -> None:
    spec = spec_from_config(GEMMA3_1B, "gemma-3-1b-it")
    names = {t.name for t in spec.tensors()}
    assert {"model.layers.0.pre_feedforward_layernorm.weight", "model.layers.0.post_feedforward_layernorm.weight",
            "model.layers.0.self_attn.q_norm.weight"} <= names
    assert "lm_head.weight" not in names  # config.json omits tie_word_embeddings; Gemma ties by default
    assert spec.num_parameters == 999_885_952  # gemma-3-1b: "1,000M params" on its model card


def test_transformers5_per_layer_type_rope_block_is_read() -> None:
    """transformers 5 nests Gemma 3's rope as {"full_attention": ..., "sliding_attention": ...}."""
    from edgeopt.exporters.gguf.architectures.gemma import rope_blocks
    from edgeopt.exporters.gguf.metadata import rope_scaling

    config = dict(GEMMA3_1B, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}})
    assert spec_from_config(config, "gemma-3-4b-text").rope_theta == 1_000_000.0
    assert rope_scaling(config) == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0}
    assert rope_blocks(config)[1]["rope_theta"] == 10_000.0
