"""Issue-4 throughput figures (slow; run with -m slow): raw llama.cpp batched decode vs our engine.

    .venv/bin/python -m pytest tests/runtimes/test_llama_cpp_bench.py -m slow -q -s

On a ~95M-parameter random Llama (hidden 1024, 8 layers) at Q8_0 and Q4_0, EDGEOPT_BENCH_THREADS threads
(default 2; use 1 on a machine shared with other jobs: llama.cpp's spinning thread barriers collapse when
the OS deschedules one of its threads, 20x slower at a load average of 10 on 2 cores):
raw decode tok/s at N=1 and N=16 (llama.cpp alone), and the engine's aggregate decode tok/s with 16
concurrent greedy streams and with one. The engine must reach 0.9x raw batched decode at 16.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from edgeopt.engine import Engine, SamplingParams, engine_config_for
from edgeopt.runtimes.llama_cpp import load_gguf
from edgeopt.runtimes.llama_cpp.bench import raw_batched_decode

pytestmark = pytest.mark.slow
THREADS = int(os.environ.get("EDGEOPT_BENCH_THREADS", "2"))
REPEATS = 3  # best of: other processes on the machine only ever slow a run down
DECODE_TOKENS = 48


@pytest.fixture(scope="module")
def bench_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    from tests.fixtures.tiny_models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("bench-hf"), "llama-gqa", tiny_tokenizer_dir,
                            hidden_size=1024, num_layers=8, intermediate_size=2816)


def export(model_dir: Path, out_dir: Path, quant: str) -> Path:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    return out_dir / GGUFExporter().export(model_dir, out_dir, quant, {"threads": THREADS}).model_file


def engine_decode_tps(gguf: Path, streams: int) -> float:
    """Aggregate generated tok/s over the decode phase (first token of every stream excluded)."""
    runtime = load_gguf(gguf, kv_capacity_tokens=streams * 128, max_slots=streams, threads=THREADS, n_gpu_layers=0)
    engine = Engine(runtime, engine_config_for(runtime))
    params = SamplingParams(max_tokens=DECODE_TOKENS + 1, temperature=0.0, ignore_eos=True)

    async def main() -> float:
        first_seen: list[float] = []
        engine.start()

        async def consume(i: int) -> int:
            count = 0
            async for out in engine.add_request(f"s{i}", [5 + i] * 32, params):
                count += len(out.token_ids)
                if count == 1:
                    first_seen.append(time.perf_counter())
            return count

        counts = await asyncio.gather(*(consume(i) for i in range(streams)))
        end = time.perf_counter()
        return (sum(counts) - streams) / (end - max(first_seen))

    try:
        return asyncio.run(main())
    finally:
        engine.shutdown()


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0"])
def test_engine_reaches_raw_batched_decode_speed(bench_model_dir: Path, tmp_path: Path, quant: str) -> None:
    gguf = export(bench_model_dir, tmp_path, quant)
    raw1, raw16, eng1, eng16 = 0.0, 0.0, 0.0, 0.0
    for _ in range(REPEATS):  # interleaved, so a burst of load elsewhere hits both sides alike
        raw1 = max(raw1, raw_batched_decode(gguf, 1, decode_steps=DECODE_TOKENS, threads=THREADS).tokens_per_s)
        eng1 = max(eng1, engine_decode_tps(gguf, 1))
        raw16 = max(raw16, raw_batched_decode(gguf, 16, decode_steps=DECODE_TOKENS, threads=THREADS).tokens_per_s)
        eng16 = max(eng16, engine_decode_tps(gguf, 16))
    print(json.dumps({"quant": quant, "threads": THREADS, "raw_n1": round(raw1, 1), "raw_n16": round(raw16, 1),
                      "raw_ratio": round(raw16 / raw1, 2), "engine_n1": round(eng1, 1),
                      "engine_n16": round(eng16, 1), "engine_vs_raw16": round(eng16 / raw16, 3),
                      "engine16_vs_engine1": round(eng16 / eng1, 2)}))
    assert eng16 >= 0.9 * raw16
