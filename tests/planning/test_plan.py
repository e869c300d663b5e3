"""Planner arithmetic against values computed by hand (see the comments for each number)."""

from __future__ import annotations

import pytest

from edgeopt.errors import DoesNotFitError
from edgeopt.sources.model_spec import spec_from_config
from edgeopt.planning.checkpoint import make_plan, size_candidate
from edgeopt.planning.recommend import require_fit
from edgeopt.sizing.budget import MIB
from edgeopt.profiles import DeviceProfile, Platform

GIB = 1024**3

# Multi-head attention, tied embeddings: head_dim = 256 / 4 = 64.
MHA = {"architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": True,
       "max_position_embeddings": 2048}
# Grouped-query attention (14 query heads over 2 KV heads), Qwen2 biases, tied: Qwen2.5-0.5B's shape.
QWEN_05B = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936, "hidden_size": 896,
            "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "tie_word_embeddings": True, "max_position_embeddings": 32768}


def profile(total_gb: float, reserved_gb: float) -> DeviceProfile:
    return DeviceProfile(name="test", description="", family="test", platform=Platform.cpu_only(total_gb, 2, "avx2"),
                         os_reserved_gb=reserved_gb, memory_bandwidth_gbps=1.0, preferred_format="gguf",
                         default_quant="Q8_0", default_runtime="llama_cpp")


def test_mha_parameter_count_and_kv_bytes():
    spec = spec_from_config(MHA, "mha")
    # embed 1000*256 = 256000; per layer: q,k,v,o 4*256*256 = 262144, mlp 3*256*512 = 393216, norms 512
    # -> 655872 per layer, x2 = 1311744; final norm 256. Tied: no lm_head.
    assert spec.num_parameters == 256000 + 1311744 + 256
    # 2 (K and V) x 2 layers x 4 kv heads x 64 head_dim x 2 bytes (f16)
    assert spec.kv_bytes_per_token(2) == 2048


def test_mha_f16_gguf_size_and_capacity():
    spec = spec_from_config(MHA, "mha")
    cand = size_candidate(spec, profile(4, 1), "gguf", "F16", context=1024, concurrency=2)
    q8 = size_candidate(spec, profile(4, 1), "gguf", "Q8_0", context=1024, concurrency=2)
    # Tensor data in F16: 2-D matrices embed 256000*2 + layers 2*655360*2 = 3133440 bytes; 1-D (5 norms of
    # 256) stay f32: 5120. In Q8_0 the 1566720 matrix weights take 34 bytes per 32: 1664640, plus 5120.
    # Both files carry the same metadata (vocabulary, tensor index), which must be small here.
    f16_data, q8_data = 3133440 + 5120, 1664640 + 5120
    metadata = cand.weight_bytes - f16_data
    assert q8.weight_bytes - metadata == q8_data
    assert 0 < metadata < 128 * 1024
    usable = 3 * GIB
    # llama.cpp's overhead: 94 MiB fixed, 300 bytes a vocabulary entry, 9,216 per unit of the feed-forward
    # width, 4 logits rows (4 bytes x vocabulary) for each of the 2 sequences asked for, and 2 for each of the 10
    # tokens of serve's default speculation's longest draft; in the streams layout with an f16 KV cache, plain
    # attention's scores too: 128 batch tokens x 1,024 cells x 4 heads x 4 bytes.
    assert cand.kv_layout == "streams"
    overhead = 94 * MIB + 1000 * 300 + 512 * 9216 + 2 * 4 * 1000 * 4 + 2 * 10 * 1000 * 4 + 128 * 1024 * 4 * 4
    assert cand.overhead_bytes == overhead
    budget = usable - int(usable * 0.05) - cand.weight_bytes - overhead  # the 5% safety margin
    assert cand.kv_budget_bytes == budget
    assert cand.kv_token_capacity == budget // 2048
    assert cand.max_concurrency == budget // 2048 // 1024
    assert cand.fits


def test_gqa_qwen_shape_matches_published_size():
    spec = spec_from_config(QWEN_05B, "qwen")
    assert spec.num_parameters == 494_032_768  # Qwen2.5-0.5B's published parameter count
    # GQA: only the 2 KV heads are cached: 2 x 24 layers x 2 heads x 64 x 2 bytes
    assert spec.kv_bytes_per_token(2) == 12288
    # ONNX runtime keeps KV in fp32: twice as much.
    assert size_candidate(spec, profile(8, 1.5), "onnx", "fp32", 4096, 1).kv_bytes_per_token == 24576


def test_gqa_q8_0_size_by_hand():
    spec = spec_from_config(QWEN_05B, "qwen")
    # Q8_0 keeps every 2-D matrix (the tied embedding included) at 34 bytes per 32 weights; 1-D tensors in f32.
    matrices = sum(t.numel for t in spec.tensors() if len(t.shape) == 2)
    vectors = sum(t.numel for t in spec.tensors() if len(t.shape) == 1)
    data = matrices // 32 * 34 + vectors * 4
    q8 = size_candidate(spec, profile(8, 1.5), "gguf", "Q8_0", 4096, 1).weight_bytes
    # The rest is metadata, dominated by the 151936-entry vocabulary and its merges (a few MB).
    assert 151936 * 8 < q8 - data < 151936 * 64


def test_recommendation_prefers_profile_default_then_smaller():
    spec = spec_from_config(QWEN_05B, "qwen")
    roomy = make_plan(spec, profile(8, 1.5), context=4096, concurrency=4, formats=("gguf",))
    assert roomy.recommended is not None and roomy.recommended.quant == "Q8_0"
    # 1.1 GiB usable: Q8_0 (~500 MiB) + ~190 MiB llama.cpp overhead + 10 x 4096 x 12 KiB f16 KV (480 MiB) does
    # not fit, so with the KV cache held at f16 the planner steps down to the largest candidate that does.
    tight = make_plan(spec, profile(1.6, 0.5), context=4096, concurrency=10, formats=("gguf",), kv_type="f16")
    q8 = next(c for c in tight.candidates if c.quant == "Q8_0")
    assert not q8.fits
    fitting = [c for c in tight.candidates if c.fits]
    assert tight.recommended == max(fitting, key=lambda c: c.weight_bytes)
    assert tight.recommended.weight_bytes < q8.weight_bytes


def test_does_not_fit_says_by_how_much():
    spec = spec_from_config(QWEN_05B, "qwen")
    plan = make_plan(spec, profile(1.0, 0.5), context=32768, concurrency=8, formats=("gguf",))
    with pytest.raises(DoesNotFitError) as err:
        require_fit(plan)
    assert "even at gguf:Q4_0" in err.value.message and "MiB more than" in err.value.message
    assert "--fit" in err.value.hint
