"""Issue-46 item 0: one user, one stream: `edgeopt serve --speculative off` against llama-server ``-np 1``.

    flock /work/wt/heavy.lock .venv/bin/python tests/bench/bench_single_stream.py [--rounds 8]
    .venv/bin/python tests/bench/bench_single_stream.py --gguf OTHER.gguf [--hf-dir ITS_TOKENIZER_DIR]
    .venv/bin/python tests/bench/bench_single_stream.py --serve-arg=--max-concurrency=1   # set up for one user

Both servers load the same GGUF (default: edgeopt's Q4_K_M of the real SmolLM2-135M-Instruct, made once in
--work, as tests/bench/bench_speculation_vs_llama_server.py makes it) with the same threads, stay up for the
whole run, and are measured one after the other in each round, the order alternating, so every figure comes
in pairs taken seconds apart. Workloads (streamed chat completions, temperature 0 and 0.7 with a seed): a
long prompt (a ~500-token document to rewrite) and open chat. For each request:

* decode tok/s from the streamed token times (first to last token), what a user sees;
* the server process's CPU milliseconds per completion token (psutil, every thread: llama.cpp's included),
  which other processes' load moves far less than wall time.

Prints, per workload and temperature, the median of the per-round edgeopt / llama-server ratios with their
spread (min-max over the rounds), both CPU figures, and the CPU model. On a host shared with other jobs,
read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.server.startup.serve_process import LaunchedServer, launched_server, stop  # noqa: E402
from tests.bench import bench_speculation_vs_llama_server as spec  # noqa: E402
from tests.bench.bench_vs_llama_server import cpu_model, llama_server_binary  # noqa: E402
from tests.server.gguf_bundle import make_gguf_bundle  # noqa: E402

WORKLOADS = ("copy-heavy", "open-chat")


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def one_request(server: LaunchedServer, messages: list, temperature: float, seed: int,
                      max_tokens: int, raw: bool) -> tuple[float, float]:
    """(decode tok/s, server CPU ms per completion token) of one streamed chat (``raw``: plain) completion."""
    before = cpu_seconds(server.process.pid)
    async with httpx.AsyncClient(timeout=600) as client:
        _, first, last, tokens = await spec.one_stream(client, server.base_url, messages, temperature, seed,
                                                      max_tokens, raw)
    cpu = cpu_seconds(server.process.pid) - before
    return (tokens - 1) / (last - first), 1000 * cpu / tokens


def row(name: str, temperature: float, results: dict[str, list[tuple[float, float]]]) -> str:
    ours, theirs = results["edgeopt"], results["llama-server"]
    ratios = [a[0] / b[0] for a, b in zip(ours, theirs)]
    cpu = [b[1] / a[1] for a, b in zip(ours, theirs)]  # > 1: edgeopt spends less CPU per token
    return (f"{name:<11} {temperature:>3} {statistics.median(r[0] for r in ours):>8.1f} "
            f"{statistics.median(r[0] for r in theirs):>8.1f} {statistics.median(ratios):>6.3f} "
            f"{min(ratios):>6.3f}-{max(ratios):<6.3f} {statistics.median(r[1] for r in ours):>7.2f} "
            f"{statistics.median(r[1] for r in theirs):>7.2f} {statistics.median(cpu):>7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-speculation"))
    parser.add_argument("--gguf", type=Path, help="the GGUF both serve (default: edgeopt's SmolLM2 Q4_K_M)")
    parser.add_argument("--hf-dir", type=Path, help="tokenizer/config directory for --gguf's bundle (default: "
                        "the SmolLM2 checkpoint; with --gguf and no --hf-dir edgeopt serves the GGUF file as it is)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--raw", action="store_true", help="plain completions of the workloads' texts (a GGUF "
                        "without a chat template: edgeopt refuses to chat with it, llama-server falls back to chatml)")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="extra `edgeopt serve` argument (repeat), e.g. --serve-arg=--max-concurrency=1")
    args = parser.parse_args()

    from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint
    from edgeopt.runtimes.llama_cpp.amx_guard import cpu_has_amx

    args.work.mkdir(parents=True, exist_ok=True)
    if args.gguf is not None and args.hf_dir is None:
        gguf = bundle = args.gguf  # tokenizer and chat template from the file's own metadata, as llama-server reads them
    else:
        hf_dir = args.hf_dir or ensure_smollm2_checkpoint()
        gguf = args.gguf or spec.edgeopt_q4_k_m(hf_dir, args.work / "edgeopt-q4_k_m")
        bundle = make_gguf_bundle(gguf, hf_dir, args.work / f"single-{gguf.stem}", quant=spec.gguf_quant(gguf))
    serve = ["--no-verify", "--memory", "2GiB", "--insecure-no-auth", "--speculative", "off", *args.serve_arg]
    no_repack = cpu_has_amx()
    with launched_server(bundle, threads=args.threads, extra_args=serve,
                         log_path=args.work / "single-edgeopt.log") as ours:
        theirs = spec.llama_server(llama_server_binary(), gguf, args.threads, 1, args.work / "single-llama.log",
                                   no_repack)
        try:
            servers = {"edgeopt": ours, "llama-server": theirs}
            for server in servers.values():
                spec.MODEL_IDS[server.base_url] = httpx.get(f"{server.base_url}/v1/models",
                                                            timeout=30).json()["data"][0]["id"]
            print(f"CPU: {cpu_model()}, threads {args.threads}, load average {psutil.getloadavg()[0]:.1f} "
                  f"(shared host: ratios, not absolutes); {gguf.name}; llama-server --no-repack: {no_repack}; "
                  f"edgeopt serve {' '.join(serve)}; {args.rounds} rounds x {args.max_tokens} tokens")
            print(f"{'workload':<11} {'T':>3} {'edgeopt':>8} {'llama':>8} {'ratio':>6} {'spread':>13} "
                  f"{'cpu ms/tok e/l':>15} {'l/e cpu':>7}")
            messages_of = spec.workloads()
            for name in args.workloads:
                for temperature in args.temperatures:
                    results: dict[str, list[tuple[float, float]]] = {k: [] for k in servers}
                    for server in servers.values():  # warm-up: first-request page faults, graph reservation
                        asyncio.run(one_request(server, messages_of[name], temperature, 7, 8, args.raw))
                    for r in range(args.rounds):
                        order = list(servers) if r % 2 == 0 else list(reversed(servers))
                        for key in order:
                            results[key].append(asyncio.run(one_request(
                                servers[key], messages_of[name], temperature, 100 + r, args.max_tokens, args.raw)))
                            time.sleep(0.2)
                    print(row(name, temperature, results), flush=True)
        finally:
            stop(theirs.process)


if __name__ == "__main__":
    main()
