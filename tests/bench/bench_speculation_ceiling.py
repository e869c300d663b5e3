"""How much speculative decoding *could* gain on this host and model, whatever the controller does.

    .venv/bin/python -m tests.bench.bench_speculation_ceiling [--gguf FILE] [--threads 2]

Three measurements on SmolLM2-135M-Instruct (by default edgeopt's Q4_K_M of it, as
tests/bench/bench_speculation_vs_llama_server.py serves it):

1. **Pass cost**: a runtime step of n tokens (a logits row for every one, as verification needs) at
   position 500, relative to one token: t(n) / t(1). On a memory-bound device t(n) stays near 1 for small n; on a
   compute-bound one it grows with n, and each verified guess costs that much.
2. **n-gram drafting per workload**: the greedy answer (engine, speculation off) is replayed with an
   n-gram draft of at most k tokens wherever the lookup finds one; a draft's tokens count as accepted up
   to the first that differs from the answer. Speed-up = answer tokens / sum of t(1 + draft) over the
   passes, against one pass per token: what a fixed draft limit gains with no engine overhead. The last
   column replays the engine's own controller (``--speculative ngram``: the k it picks each step from its
   acceptance estimate and step-cost model, taught the same pass-cost curve as the engine teaches it real
   steps): the policy's share of the ceiling, apart from the engine's overhead and the host's noise.
3. **Any drafter's ceiling**: for a drafter whose every guess is accepted with probability a and which
   costs nothing to run, max over k of (1 + a + ... + a^k) / t(k + 1). A draft model costs something,
   so it gains less than this; a row under 1.2 means no draft model reaches 1.2x at that acceptance.

Prints the tables and the CPU. Measured in one run; times are medians of 10 passes.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgeopt.engine import Engine, SamplingParams, engine_config_for
from edgeopt.engine.prefix_tree import common_prefix_length
from edgeopt.engine.speculation.calibration import CALIBRATION_SIZES
from edgeopt.engine.speculation.controller import SpeculationController
from edgeopt.engine.speculation.draft_state import expected_gain
from edgeopt.engine.speculation.ngram import NgramIndex
from edgeopt.runtimes.base import Runtime, StepInput
from edgeopt.runtimes.llama_cpp import load_gguf
from tests.bench.bench_speculation import workloads
from tests.bench.bench_speculation_vs_llama_server import edgeopt_q4_k_m
from tests.bench.bench_vs_llama_server import cpu_model

PASS_SIZES = tuple(range(1, 13))
DRAFT_LIMITS = (1, 2, 3, 4, 6, 8, 10)
ACCEPTANCES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def load(gguf: Path, threads: int) -> Runtime:
    """One runtime for both measurements: two slots, and cache slots whose logits rows (n_outputs_max) let a
    pass of PASS_SIZES tokens return a row per token, as a verification does."""
    return load_gguf(gguf, kv_capacity_tokens=4096, max_slots=2, threads=threads, n_gpu_layers=0,
                     cache_slots=max(PASS_SIZES), context_length=2048)


def pass_costs(runtime: Runtime, position: int = 500) -> dict[int, float]:
    """t(n) / t(1) for n in PASS_SIZES: median seconds of a runtime step of n tokens with a logits row for
    each (a verification, logits copy included) after ``position`` prompt tokens on slot 0."""
    rng = random.Random(0)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1000, 20000) for _ in range(n)]

    for start in range(0, position, 128):
        runtime.step([StepInput(0, tokens(min(128, position - start)), start, False)])
    seconds = {}
    for n in PASS_SIZES:
        times = []
        for _ in range(12):
            started = time.perf_counter()
            runtime.step([StepInput(0, tokens(n), position, True, all_logits=True)])
            times.append(time.perf_counter() - started)
            runtime.trim(0, position)
        seconds[n] = statistics.median(times[2:])
    runtime.release(0)
    return {n: t / seconds[1] for n, t in seconds.items()}


def greedy_answers(runtime: Runtime, max_tokens: int) -> dict[str, tuple[list[int], list[int]]]:
    """workload -> (prompt ids, greedy answer ids), from the engine with speculation off."""
    engine = Engine(runtime, engine_config_for(runtime, speculative="off"))
    prompts = {name: runtime.tokenizer.encode(text, parse_special=True) for name, text in workloads().items()}

    async def run() -> dict[str, tuple[list[int], list[int]]]:
        engine.start()
        answers = {}
        for name, prompt in prompts.items():
            answer: list[int] = []
            async for out in engine.add_request(name, prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0)):
                answer += out.token_ids
            answers[name] = (prompt, answer)
        engine.shutdown()
        return answers

    return asyncio.new_event_loop().run_until_complete(run())


def replay_ngram(prompt: list[int], answer: list[int], limit: int, cost: dict[int, float]) -> tuple[float, float]:
    """(acceptance, speed-up) of n-gram drafts of at most ``limit`` tokens over the known greedy answer."""
    index, emitted, drafted, accepted, spent = NgramIndex(), 0, 0, 0, 0.0
    while emitted < len(answer):
        draft = index.draft(prompt + answer[:emitted], limit)
        agreed = common_prefix_length(draft, answer[emitted:])
        drafted, accepted = drafted + len(draft), accepted + agreed
        spent += cost[1 + len(draft)]
        emitted += agreed + 1
    return (accepted / drafted if drafted else 0.0), len(answer) / spent


@dataclass
class ReplayedSequence:
    """What the controller reads of a sequence, for a replay outside the engine."""

    prompt_ids: list[int]
    params: SamplingParams
    output_ids: list[int] = field(default_factory=list)
    constraint: None = None
    draft_state: object = None


def replay_controller(prompt: list[int], answer: list[int], cost: dict[int, float],
                      fixed_seconds: float = 0.01) -> tuple[float, float]:
    """(acceptance, speed-up) of the engine's controller over the known greedy answer: its prior from the
    curve as the start-up calibration measures it (passes of 1 and 5 tokens), then every step's cost observed
    as the engine observes it. Sizes past the measured curve are priced on its last slope."""
    def t(n: int) -> float:
        top = max(cost)
        return cost[n] if n in cost else cost[top] + (n - top) * (cost[top] - cost[top - 1])

    controller = SpeculationController("ngram")
    per_token = (t(5) - t(1)) / 4
    controller.cost.set_prior((t(1) - per_token) * fixed_seconds, per_token / (t(1) - per_token),
                              {n: t(n) * fixed_seconds for n in CALIBRATION_SIZES})
    seq = ReplayedSequence(prompt, SamplingParams(max_tokens=len(answer), temperature=0.0))
    drafted = accepted = 0
    spent = 0.0
    while len(seq.output_ids) < len(answer):
        draft = controller.propose([seq], 0, 1 << 20, 1 << 20, False)[0]
        emitted = len(seq.output_ids)
        agreed = common_prefix_length(draft, answer[emitted:])
        if draft:
            controller.record(seq, len(draft), agreed)  # type: ignore[arg-type]
        controller.observe_step(1 + len(draft), t(1 + len(draft)) * fixed_seconds)
        drafted, accepted, spent = drafted + len(draft), accepted + agreed, spent + t(1 + len(draft))
        seq.output_ids += answer[emitted:emitted + agreed + 1]
    return (accepted / drafted if drafted else 0.0), len(answer) / spent


def free_drafter_ceiling(acceptance: float, cost: dict[int, float]) -> tuple[float, int]:
    """(best speed-up, its draft length) of a drafter that costs nothing, accepted at ``acceptance``."""
    return max(((1 + expected_gain(acceptance, k)) / cost[k + 1], k) for k in range(0, max(cost)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", type=Path, help="default: edgeopt's Q4_K_M of SmolLM2-135M-Instruct")
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-speculation"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint

    gguf = args.gguf or edgeopt_q4_k_m(ensure_smollm2_checkpoint(), args.work / "edgeopt-q4_k_m")
    runtime = load(gguf, args.threads)
    try:
        cost = pass_costs(runtime)
        answers = greedy_answers(runtime, args.max_tokens)
    finally:
        runtime.close()
    print(f"CPU: {cpu_model()}, threads {args.threads}, model {gguf}")
    print("pass of n tokens / pass of 1: " + " ".join(f"{n}:{c:.2f}" for n, c in cost.items()))
    print(f"\n{'workload':<11} {'answer':>6} " + " ".join(f"{f'k<={k}':>11}" for k in DRAFT_LIMITS)
          + f" {'controller':>11}   (acceptance/speed-up of n-gram drafts of at most k tokens; the engine's choice)")
    for name, (prompt, answer) in answers.items():
        cells = [replay_ngram(prompt, answer, k, cost) for k in DRAFT_LIMITS] + [replay_controller(prompt, answer, cost)]
        print(f"{name:<11} {len(answer):>6} " + " ".join(f"{a:>5.2f}/{s:<5.2f}" for a, s in cells))
    print("\nany drafter, free to run: best speed-up (draft length) at acceptance a")
    print("  " + "  ".join(f"a={a}: {s:.2f} (k={k})" for a in ACCEPTANCES for s, k in [free_drafter_ceiling(a, cost)]))


if __name__ == "__main__":
    main()
