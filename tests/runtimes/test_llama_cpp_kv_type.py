"""--kv-type in the llama.cpp runtime: llama.cpp really stores the cache in the type we size it by,
the quantized cache decodes (flash attention set up) with logits close to f16's, and bad models are refused."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from edgeopt.errors import ConfigError
from edgeopt.measuring.metrics import mean_kl
from edgeopt.sizing.kv_types import kv_element_bytes
from edgeopt.sizing.budget import kv_bytes_per_token
from edgeopt.runtimes.base import StepInput
from edgeopt.engine import Engine, SamplingParams, engine_config_for
from edgeopt.runtimes.llama_cpp import LlamaCppRuntime, load_gguf
from tests.engine.helpers import generate_all, run_engine
from tests.fixtures.demo_gguf import optimize_demo_gguf
from tests.runtimes.test_llama_cpp import TEXTS, assert_same_greedy, greedy_alone

KV_TYPES = ("f16", "q8_0", "q4_0")


@pytest.fixture(scope="module")
def demo_gguf(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = optimize_demo_gguf(demo_model_dir, tmp_path_factory.mktemp("kv") / "demo", "f16")
    return bundle / "model.gguf"


def open_runtime(path: Path, kv_type: str, kv: int = 512, slots: int = 2, batch: int = 128) -> LlamaCppRuntime:
    return load_gguf(path, kv_capacity_tokens=kv, max_slots=slots, max_batch_tokens=batch, threads=1,
                     n_gpu_layers=0, kv_type=kv_type)


def sequence_state_bytes(runtime: LlamaCppRuntime, tokens: list[int]) -> int:
    """Bytes llama.cpp serializes for slot 0 after prefilling ``tokens``: its KV rows plus per-cell metadata."""
    runtime.release(0)
    for start in range(0, len(tokens), 128):
        runtime.step([StepInput(0, tokens[start:start + 128], start, start + 128 >= len(tokens))])
    return int(llama_cpp.llama_state_seq_get_size(runtime._ctx, 0))  # noqa: SLF001 - the cache llama.cpp holds


def test_llama_cpp_stores_exactly_the_bytes_per_token_we_size_by(demo_gguf: Path) -> None:
    prompt = [(7 * i) % 4000 + 5 for i in range(256)]
    overhead_per_cell = {}
    for kv_type in KV_TYPES:
        runtime = open_runtime(demo_gguf, kv_type)
        try:
            assert runtime.kv_type == kv_type
            grown = sequence_state_bytes(runtime, prompt) - sequence_state_bytes(runtime, prompt[:128])
            # what plan and serve size the cache with
            predicted = kv_bytes_per_token(runtime.facts.kv_elements_per_token, kv_element_bytes(kv_type))
            overhead_per_cell[kv_type] = grown / 128 - predicted
        finally:
            runtime.close()
    # 4 layers x 2 KV heads x (64 + 64): f16 2048 bytes, q8_0 1088, q4_0 576; the rest is the same few
    # bytes of cell metadata (position, sequence ids) whatever the type, so the rows are exactly ours.
    assert len(set(overhead_per_cell.values())) == 1, overhead_per_cell
    assert 0 <= overhead_per_cell["f16"] <= 16, overhead_per_cell


def test_a_quantized_cache_decodes_close_to_f16(demo_gguf: Path) -> None:
    prompt = [(11 * i) % 4000 + 5 for i in range(100)]
    rows = {}
    for kv_type in KV_TYPES:
        runtime = open_runtime(demo_gguf, kv_type)
        try:
            first = runtime.step([StepInput(0, prompt, 0, True)])
            token = int(np.argmax(first[0]))
            # a decode step attends over the 100 cached (quantized) positions
            rows[kv_type] = np.vstack([first, runtime.step([StepInput(0, [token], len(prompt), True)])])
        finally:
            runtime.close()
    assert mean_kl(rows["f16"], rows["q8_0"]) < 2e-3
    assert 0 < mean_kl(rows["f16"], rows["q4_0"]) < 5e-2  # > 0: the cache really is stored in 4 bits


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_a_quantized_cache_decodes_8_sequences_batched_as_each_alone(demo_gguf: Path, kv_type: str) -> None:
    """Flash attention over quantized cells of 8 sequences in one unified cache: no cross-talk."""
    runtime = open_runtime(demo_gguf, kv_type, kv=2048, slots=8, batch=512)
    try:
        prompts = {f"r{i}": runtime.tokenizer.encode(text) for i, text in enumerate(TEXTS[:8])}
        expected = {rid: greedy_alone(runtime, ids, 16) for rid, ids in prompts.items()}
        engine = Engine(runtime, engine_config_for(runtime))
        params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
        results = run_engine(engine, lambda e: generate_all(e, prompts, params), autostart=False)
        for rid, (tokens, rows) in expected.items():
            assert_same_greedy(tokens, results[rid].token_ids, rows)
        assert runtime.kv_cells_used() == 0
    finally:
        runtime.close()


def test_head_dims_that_are_not_whole_blocks_are_refused_before_llama_cpp(tiny_gguf_factory) -> None:
    path = tiny_gguf_factory("qwen3", "F16")  # head_dim 16
    with pytest.raises(ConfigError) as err:
        open_runtime(path, "q8_0")
    assert "key head dim 16" in err.value.message and "--kv-type f16" in err.value.hint


def test_an_unknown_kv_type_is_refused(demo_gguf: Path) -> None:
    with pytest.raises(ConfigError) as err:
        open_runtime(demo_gguf, "q5_1")
    assert "'q5_1'" in err.value.message and "q8_0" in err.value.hint
