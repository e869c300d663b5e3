"""`edgeopt serve --memory M` stays within M on a model with a real 151k vocabulary, and uses most of it.

llama.cpp's memory beside weights and KV grows with the model: its vocabulary tables, its compute buffer
and a logits row per sequence id (edgeopt.backends, the gguf entry). A flat allowance sized on our small-
vocabulary fixtures let a model with Qwen2's 151,936 tokens run past its budget. The model here is random
(Qwen2 architecture, the real Qwen2 tokenizer rebuilt from llama.cpp's test vocabulary) and sized so that
the budget, not the context, bounds its KV cache.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import psutil
import pytest

from edgeopt.bench.loadgen import run_load
from edgeopt.server.startup.serve_process import launched_server

MIB = 1 << 20
MEMORY = 512 * MIB


@pytest.fixture(scope="module")
def qwen2_vocab_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    import transformers

    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
    from tests.exporters.conformance_models import build_tokenizer_files

    root = tmp_path_factory.mktemp("qwen2-vocab")
    checkpoint = root / "checkpoint"
    # 16 KiB of KV a token: 8 layers x 8 KV heads x 64 x K and V x 2 bytes, so 512 MiB holds ~14k tokens,
    # well under 16 sequences x the 4,096-token context.
    config = transformers.Qwen2Config(vocab_size=151936, hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
                                      num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=4096,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(checkpoint)
    build_tokenizer_files("qwen2", checkpoint)
    run_optimize(OptimizeOptions(model=str(checkpoint), target="host", output=root / "bundle", format="gguf",
                                 quant="Q8_0", evaluate=False, force=True), report=lambda _msg: None)
    return root / "bundle"


def test_serve_keeps_a_151k_vocabulary_model_within_its_memory_budget(qwen2_vocab_bundle: Path, tmp_path: Path):
    with launched_server(qwen2_vocab_bundle, threads=2, extra_args=["--memory", f"{MEMORY // MIB}MiB"],
                         log_path=tmp_path / "serve.log") as server:
        process = psutil.Process(server.process.pid)
        model = httpx.get(f"{server.base_url}/v1/models").json()["data"][0]["id"]
        # 16 streams of ~300-token prompts: every buffer llama.cpp reserved gets touched (a full 512-token
        # ubatch, every logits row), and the KV cache was filled with zeros when it was created.
        result = asyncio.run(run_load(server.base_url, model, 16, 32, 300, 16))
        assert not result.errors, result.errors[:3]
        rss = process.memory_info().rss
        metrics = httpx.get(f"{server.base_url}/metrics").text
    capacity = next(float(line.split()[-1]) for line in metrics.splitlines()
                    if line.startswith("edgeopt_kv_cache_capacity_tokens"))
    print(f"\nserve --memory {MEMORY // MIB} MiB: RSS {rss / MIB:.0f} MiB after 16 streams, KV {capacity:.0f} tokens")
    assert capacity < 16 * 4096, "the budget must bound the KV cache for this test to mean anything"
    assert rss <= MEMORY, f"RSS {rss / MIB:.0f} MiB is over the {MEMORY // MIB} MiB budget"
    # And the sizing is not so cautious that it wastes the device: most of the budget is in use.
    assert rss >= 0.85 * MEMORY, f"RSS {rss / MIB:.0f} MiB leaves more of the {MEMORY // MIB} MiB budget unused than the margin"
