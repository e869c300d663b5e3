"""Issue-42 building block: a conversation's next turn after its model was swapped out, with the prefix cache
restored from the swap space against a full prefill, on the real SmolLM2-135M-Instruct (Q4_1 GGUF).

    .venv/bin/python tests/bench/bench_swap_space.py [--threads 1] [--lengths 300,1000,2000] [--repeats 3]

For each conversation length (tokens of the first turn's prompt): an engine answers the first turn and its
prefix cache is saved (SwapSpace.save), the model is closed; then, side by side in this run and alternating
which goes first, a freshly loaded model answers the next turn (a) after SwapSpace.restore and (b) without it.
Reported (medians over --repeats): the state's size, save and restore times, the next turn's time to first
token (restore included for (a)) and the ratio (a)/(b). Model loading is not timed: both pay it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.store.bundle import load_bundle  # noqa: E402
from edgeopt.engine import SamplingParams  # noqa: E402
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape  # noqa: E402
from edgeopt.server.models.swap_space import SwapSpace  # noqa: E402
from tests.bench.bench_prefix_cache import system_prompt  # noqa: E402
from tests.server.gguf_bundle import smollm2_bundle  # noqa: E402


def load(bundle: Path, threads: int):  # noqa: ANN201 - edgeopt.server.state.ServedModel
    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=2 << 30, context=4096, max_concurrency=2, threads=threads,
                           kv_layout="unified")
    return load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)


def answer(model, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, float, int]:  # noqa: ANN001
    """(text, seconds to the last of ``max_tokens`` tokens, prompt tokens served from the cache)."""
    prompt = model.tokenizer.encode(model.chat_template.render(messages))

    async def run():  # noqa: ANN202
        return await model.engine.add_request(f"b{time.perf_counter_ns()}", prompt,
                                              SamplingParams(max_tokens=max_tokens, temperature=0.0)).collect()

    started = time.perf_counter()
    out = asyncio.run(run())
    return out.text, time.perf_counter() - started, out.cached_tokens


def one_length(bundle: Path, work: Path, tokens: int, threads: int, repeats: int) -> dict[str, float]:
    messages = [{"role": "system", "content": system_prompt(bundle, tokens)},
                {"role": "user", "content": "Summarise the rules about the motor controller."}]
    model = load(bundle, threads)
    space = SwapSpace(work / f"swap-{tokens}", 1 << 30)
    fingerprint = space.fingerprint(bundle, load_bundle(bundle), model.runtime)
    first, _, _ = answer(model, messages, 16)
    record = space.save("smollm2", model.engine, model.runtime, fingerprint)
    model.close()
    follow_up = messages + [{"role": "assistant", "content": first}, {"role": "user", "content": "And the encoder?"}]
    restored, cold, restores, cached = [], [], [], 0
    for repeat in range(repeats):
        for warm in ([True, False] if repeat % 2 == 0 else [False, True]):
            model = load(bundle, threads)
            try:
                started = time.perf_counter()
                if warm:
                    assert space.restore("smollm2", model.engine, model.runtime, fingerprint) == 1
                    restores.append(time.perf_counter() - started)
                _, ttft, hit = answer(model, follow_up, 1)
            finally:
                model.close()
            (restored if warm else cold).append(time.perf_counter() - started if warm else ttft)
            cached = hit if warm else cached
    return {"tokens": record.tokens, "mib": record.bytes / (1 << 20), "save_s": record.seconds,
            "restore_s": statistics.median(restores), "cached": cached,
            "ttft_restored_s": statistics.median(restored), "ttft_cold_s": statistics.median(cold)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)  # 2 oversubscribe a shared 2-core box
    parser.add_argument("--lengths", default="300,1000,2000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint
    from tests.conftest import DEMO_CACHE_ROOT

    with tempfile.TemporaryDirectory(prefix="edgeopt-swap-bench-") as tmp:
        work = Path(tmp)
        bundle = smollm2_bundle(ensure_smollm2_checkpoint(cache_root=DEMO_CACHE_ROOT), work / "smollm2")
        print("| saved entry (tokens) | next turn: cached | state MiB | save s | restore s "
              "| next-turn TTFT restored s | cold s | ratio |\n|---|---|---|---|---|---|---|---|")
        for tokens in (int(t) for t in args.lengths.split(",")):
            r = one_length(bundle, work, tokens, args.threads, args.repeats)
            ratio = r["ttft_restored_s"] / r["ttft_cold_s"]
            print(f"| {r['tokens']} | {r['cached']} | {r['mib']:.1f} | {r['save_s']:.3f} | {r['restore_s']:.3f} | "
                  f"{r['ttft_restored_s']:.3f} | {r['ttft_cold_s']:.3f} | {ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
