"""Issue-14 prefix-cache benchmark: multi-turn chat on a ~200M Q8_0 GGUF, cache on vs --no-prefix-cache.

    .venv/bin/python tests/bench/bench_prefix_cache.py [--bundle DIR | --work /tmp/edgeopt-bench-200m]

Workload: 8 conversations at once, each a 1,000-token system prompt (its own first user line), 4 turns;
each turn's prompt is the chat template's rendering of the whole conversation so far (the answers as
the server returned them). Each conversation waits for its answer before its next turn. Run once with
the prefix cache and once without, on the same bundle, one after the other in this run. Reported:
TTFT per turn (median over conversations), its ratio to turn 1's and to the cold TTFT (turn 1 without
the cache: with it, 7 of the 8 first turns borrow the system prompt the first computes), the share of prompt tokens served
from the cache (usage.prompt_tokens_details.cached_tokens), aggregate generated tokens/s over the whole
workload. Then the persisted prompt cache: the first chat after a start with ``--warm FILE`` whose saved
state exists, against the first chat of a server started without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.bench.loadgen import streamed_chunks  # noqa: E402
from edgeopt.server.startup.serve_process import launched_server  # noqa: E402
from tests.bench.bench_serve_200m import build_bundle  # noqa: E402

CONVERSATIONS = 8
TURNS = 4
SYSTEM_TOKENS = 1000
WORDS = ("sensor", "motor", "board", "firmware", "voltage", "calibrate", "the", "robot", "arm", "reading",
         "controller", "loop", "gain", "safety", "limit", "current", "encoder", "driver", "bus", "frame")


def system_prompt(bundle: Path, tokens: int = SYSTEM_TOKENS) -> str:
    """About ``tokens`` tokens of plausible instructions, measured with the bundle's own tokenizer."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer" / "tokenizer.json"))
    words, i = [], 0
    while len(tokenizer.encode(" ".join(words), add_special_tokens=False).ids) < tokens:
        words.extend(f"{WORDS[(i * 7 + k) % len(WORDS)]}" for k in range(10))
        words.append(f"rule {i}.")
        i += 1
    return "You are the lab assistant. " + " ".join(words)


async def chat_turn(client: httpx.AsyncClient, model: str, messages: list[dict], max_tokens: int) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first, text, usage = None, [], {}
    async for chunk in streamed_chunks(client, "/v1/chat/completions", body):
        usage = chunk.get("usage") or usage
        if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
            first = first or time.perf_counter()
            text.append(chunk["choices"][0]["delta"]["content"])
    return {"ttft": (first or time.perf_counter()) - start, "text": "".join(text), "prompt": usage["prompt_tokens"],
            "cached": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            "generated": usage["completion_tokens"]}


async def conversation(client: httpx.AsyncClient, model: str, system: str, index: int, max_tokens: int,
                       turns_wanted: int) -> list[dict]:
    messages = [{"role": "system", "content": system}]
    turns = []
    for turn in range(turns_wanted):
        messages.append({"role": "user", "content": f"Conversation {index}, question {turn}: check the {WORDS[turn]}."})
        result = await chat_turn(client, model, messages, max_tokens)
        messages.append({"role": "assistant", "content": result["text"]})
        turns.append(result)
    return turns


def model_id(url: str) -> str:
    """The served model's id, after one short request: it pages the weights in, so the first timed
    request of each server does not pay for reading the model file (the runs would not be comparable)."""
    model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
    httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": "warm up", "max_tokens": 2}, timeout=300)
    return model


def run_workload(bundle: Path, system: str, threads: int, max_tokens: int, extra: list[str],
                 conversations: int = CONVERSATIONS, turns: int = TURNS) -> dict:
    with launched_server(bundle, threads=threads, extra_args=["--memory", "2GiB", *extra]) as server:
        model = model_id(server.base_url)

        async def everything() -> list[list[dict]]:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=1800) as client:
                return await asyncio.gather(*(conversation(client, model, system, i, max_tokens, turns)
                                              for i in range(conversations)))

        started = time.perf_counter()
        results = asyncio.run(everything())
        wall = time.perf_counter() - started
    per_turn = [[conv[t] for conv in results] for t in range(turns)]
    ttft = [statistics.median(r["ttft"] for r in turn) for turn in per_turn]
    later = [r for turn in per_turn[1:] for r in turn]
    return {
        "ttft_median_per_turn_s": [round(t, 3) for t in ttft],
        "ttft_ratio_to_turn1": [round(t / ttft[0], 4) for t in ttft],
        "cached_share_all": round(sum(r["cached"] for t in per_turn for r in t) / sum(r["prompt"] for t in per_turn for r in t), 4),
        "cached_share_turns_2_on": round(sum(r["cached"] for r in later) / sum(r["prompt"] for r in later), 4),
        "prompt_tokens_per_turn": [round(statistics.mean(r["prompt"] for r in turn)) for turn in per_turn],
        "generated_tokens": sum(r["generated"] for t in per_turn for r in t),
        "wall_s": round(wall, 1),
        "tokens_per_s": round(sum(r["generated"] for t in per_turn for r in t) / wall, 2),
    }


def first_chat_ttft(bundle: Path, system: str, threads: int, extra: list[str]) -> dict:
    with launched_server(bundle, threads=threads, extra_args=["--memory", "2GiB", *extra]) as server:
        model = model_id(server.base_url)

        async def one() -> dict:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:
                messages = [{"role": "system", "content": system}, {"role": "user", "content": "Check the motor."}]
                return await chat_turn(client, model, messages, 1)

        result = asyncio.run(one())
    return {"ttft_s": round(result["ttft"], 3), "prompt_tokens": result["prompt"], "cached_tokens": result["cached"]}


def warm_restart(bundle: Path, system: str, threads: int, work: Path) -> dict:
    warm_file = work / "system-prompt.txt"
    warm_file.write_text(system)
    for stale in work.glob("system-prompt.txt.kvstate*"):
        stale.unlink()
    cold = first_chat_ttft(bundle, system, threads, [])
    with launched_server(bundle, threads=threads, extra_args=["--memory", "2GiB", "--warm", str(warm_file)]):
        pass  # the first start computes and saves the state
    warm = first_chat_ttft(bundle, system, threads, ["--warm", str(warm_file)])
    return {"cold": cold, "after_restart_with_warm": warm, "ratio": round(warm["ttft_s"] / cold["ttft_s"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-200m"))
    parser.add_argument("--bundle", type=Path, help="an existing ~200M GGUF bundle (default: build it in --work)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--conversations", type=int, default=CONVERSATIONS, help="smoke runs only; the figure is 8")
    parser.add_argument("--turns", type=int, default=TURNS, help="smoke runs only; the figure is 4")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    bundle = args.bundle or build_bundle(args.work, "deep")
    system = system_prompt(bundle)
    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip()
    print(f"{cpu}; {args.threads} threads; {args.conversations} conversations x {args.turns} turns, "
          f"{SYSTEM_TOKENS}-token system prompt, {args.max_tokens} tokens per answer")
    shape = dict(conversations=args.conversations, turns=args.turns)
    out = {"cache": run_workload(bundle, system, args.threads, args.max_tokens, [], **shape),
           "no_cache": run_workload(bundle, system, args.threads, args.max_tokens, ["--no-prefix-cache"], **shape),
           "warm": warm_restart(bundle, system, args.threads, args.work), "cpu": cpu}
    # Cold: a first turn that computes the whole prompt, i.e. turn 1 without the cache. (With the cache only
    # one of the 8 first turns computes the system prompt: the others borrow it while it runs.)
    cold = out["no_cache"]["ttft_median_per_turn_s"][0]
    out["cache"]["ttft_ratio_to_cold"] = [round(t / cold, 4) for t in out["cache"]["ttft_median_per_turn_s"]]
    for name in ("cache", "no_cache"):
        print(f"{name:>9}: {json.dumps(out[name])}")
    print(f"throughput cache / no cache: {out['cache']['tokens_per_s'] / out['no_cache']['tokens_per_s']:.2f}x")
    print(f"     warm: {json.dumps(out['warm'])}")
    (args.work / "prefix-cache-results.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
