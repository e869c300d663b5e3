"""Issue-14 comparison: llama-server and `edgeopt serve` on the same ~200M Q8_0 GGUF, in one run.

    .venv/bin/python tests/bench/bench_vs_llama_server.py [--work /tmp/edgeopt-bench-200m] [--rounds 8]
    .venv/bin/python tests/bench/bench_vs_llama_server.py --layouts --threads 1   (edgeopt unified vs streams)
    .venv/bin/python tests/bench/bench_vs_llama_server.py --bundle DIR --decode-only --rounds 3   (another bundle)

llama-server is built from the llama.cpp inside llama-cpp-python's source distribution of the
installed version (scripts/build_llama_server.sh, cached under ~/.cache/edgeopt). Both servers get
the same threads and are driven by the same client (edgeopt.bench.loadgen). Both servers stay up for
the whole run (an idle one sleeps) and are measured one after the other in each of ``--rounds`` rounds,
in alternating order, so that every figure comes in pairs taken seconds apart: the ratio reported is the
median of the per-round ratios, with a bootstrap 90% interval over the rounds. On a shared host whose
speed drifts by 10-20% within minutes, pairs cancel the drift that comparing two separately measured
medians does not. A target counts as met when the whole interval is on its side of 1.0 and as parity
when the interval straddles 1.0. Later rounds run on servers whose caches earlier rounds filled, as a
long-running deployment's are (that is how parked prefixes slowing 16 streams to 0.43x showed up).
Figures:

* 16 concurrent streamed completions x 128 tokens: aggregate decode tok/s;
* 1 stream: decode tok/s;
* multi-turn TTFT (chat, max_tokens 1): a cold ~1,000-token system prompt, the same conversation's
  second turn, a new conversation with the same system prompt, then the first conversation's third turn
  (median of ``--chats`` conversations). llama-server gives the new conversation the slot holding the
  first one (the longest common prefix) and cuts that slot's cache back to the system prompt, so the
  first conversation's next turn computes its earlier turns again; edgeopt copies the system prompt for
  the new conversation and keeps both;
* a burst: 8 new conversations on one new ~1,000-token system prompt sent at once, median and last TTFT
  (llama-server computes the prompt in each slot; edgeopt computes it once and shares it).

llama-server runs with ``-np 16`` and its defaults except ``-c``: its default context (the model's
2,048) split over 16 slots leaves 256 cells a slot, too few for the multi-turn prompt, so each slot
gets the model's full context (which does not change decode cost: a slot's attention spans only the
cells it uses). Prints one table with edgeopt / llama-server ratios, the targets, and the CPU, and
writes the JSON next to the bundle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.bench.loadgen import LoadResult, run_load  # noqa: E402
from edgeopt.store.bundle import load_bundle  # noqa: E402
from edgeopt.server.startup.launcher import model_names  # noqa: E402
from edgeopt.server.startup.serve_process import LaunchedServer, free_port, launched_server, stop, wait_until_healthy  # noqa: E402
from tests.bench.bench_serve_200m import build_bundle  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SLOTS = 16
BURST = 8  # conversations sent at once on one system prompt (the multi-turn workload has 8)
MODEL_CONTEXT = 2048  # the bench model's max_position_embeddings (tests/bench/bench_serve_200m.py)
SYSTEM_SENTENCE = ("You are a careful assistant for a small hardware shop. Answer briefly, cite the manual "
                   "section when you can, and never invent part numbers. ")


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def llama_server_binary() -> Path:
    """Build (once, cached) and return llama-server for the installed llama-cpp-python version."""
    out = subprocess.run(["bash", str(REPO / "scripts" / "build_llama_server.sh"), sys.executable],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"building llama-server failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@contextmanager
def llama_server(binary: Path, gguf: Path, threads: int, log_path: Path) -> Iterator[LaunchedServer]:
    port = free_port()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(SLOTS),
               "-c", str(SLOTS * MODEL_CONTEXT), "-t", str(threads), "-tb", str(threads)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LaunchedServer(f"http://127.0.0.1:{port}", log_path, process)
    try:
        wait_until_healthy(server, 120.0)
        yield server
    finally:
        stop(process)


def system_prompt(words: int = 470) -> str:
    sentence_words = len(SYSTEM_SENTENCE.split())
    return SYSTEM_SENTENCE * max(1, words // sentence_words)


def chat_seconds(client: httpx.Client, model: str, messages: list[dict[str, str]]) -> tuple[float, str, int]:
    """Wall time of a max_tokens=1 chat completion (prefill + one token: the TTFT), its text, prompt tokens."""
    body = {"model": model, "messages": messages, "max_tokens": 1, "temperature": 0}
    start = time.perf_counter()
    response = client.post("/v1/chat/completions", json=body)
    seconds = time.perf_counter() - start
    response.raise_for_status()
    data = response.json()
    return seconds, data["choices"][0]["message"]["content"] or "", int(data["usage"]["prompt_tokens"])


def multi_turn(url: str, model: str, tag: str) -> dict[str, float]:
    """Cold prompt, its second turn, a new conversation on the same system prompt, then the first
    conversation's third turn (two users of one server taking turns). ``tag`` makes the system prompt new
    for every call of this function, so "cold" is cold on a server that already served others. One kept-alive
    connection, as the openai client holds: a new connection per request would add the client's own ~20 ms
    to every TTFT on both sides and flatten the ratios toward 1.0."""
    system = {"role": "system", "content": f"[session {tag}] " + system_prompt()}
    first = [system, {"role": "user", "content": "Which screwdriver fits the M3 screws?"}]
    with httpx.Client(base_url=url, timeout=600) as client:
        cold, answer, prompt_tokens = chat_seconds(client, model, first)
        second = first + [{"role": "assistant", "content": answer},
                          {"role": "user", "content": "And for the M4 ones?"}]
        turn2, answer2, _ = chat_seconds(client, model, second)
        other = [system, {"role": "user", "content": "Do you sell soldering irons?"}]
        fresh, _, _ = chat_seconds(client, model, other)
        third = second + [{"role": "assistant", "content": answer2}, {"role": "user", "content": "And the M5 ones?"}]
        turn3, _, _ = chat_seconds(client, model, third)
    return {"prompt_tokens": prompt_tokens, "cold_s": cold, "second_turn_s": turn2, "same_system_s": fresh,
            "returning_s": turn3}


async def burst(url: str, model: str, tag: str, conversations: int = BURST) -> dict[str, float]:
    """``conversations`` new conversations on one new ~1,000-token system prompt, sent at once (max_tokens 1):
    the median and the last TTFT. Agents and home-automation clients that share a system prompt do this."""
    system = {"role": "system", "content": f"[burst {tag}] " + system_prompt()}

    async def one(client: httpx.AsyncClient, i: int) -> float:
        body = {"model": model, "max_tokens": 1, "temperature": 0,
                "messages": [system, {"role": "user", "content": f"Question {i}: which drill bit for M{i + 3}?"}]}
        start = time.perf_counter()
        response = await client.post(f"{url}/v1/chat/completions", json=body)
        response.raise_for_status()
        return time.perf_counter() - start

    async with httpx.AsyncClient(timeout=600) as client:
        seconds = await asyncio.gather(*(one(client, i) for i in range(conversations)))
    return {"burst_median_s": statistics.median(seconds), "burst_last_s": max(seconds)}


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def load_with_cpu(server: LaunchedServer, model: str, streams: int, requests: int, max_tokens: int) -> LoadResult:
    """The load, and the server process's CPU seconds per completion token over it: unlike tok/s, that
    figure hardly moves when other processes share the cores (exact with one thread: nothing spins)."""
    before = cpu_seconds(server.process.pid)
    result = asyncio.run(run_load(server.base_url, model, streams, requests, 32, max_tokens))
    cpu = cpu_seconds(server.process.pid) - before
    if result.errors:
        raise SystemExit(f"{len(result.errors)} requests failed, first: {result.errors[0]}")
    result.cpu_ms_per_token = 1000 * cpu / max(result.completion_tokens, 1)  # type: ignore[attr-defined]
    return result


def measure(server: LaunchedServer, model: str, tag: str, max_tokens: int, chats: int,
            decode_only: bool = False) -> dict[str, Any]:
    asyncio.run(run_load(server.base_url, model, 1, 1, 32, 4))  # warm-up: page faults, graph reservation
    many = load_with_cpu(server, model, SLOTS, SLOTS, max_tokens)
    # One request of 128 tokens lasts ~1 s, which load elsewhere easily skews: the median of three, each
    # one request (no keep-alive reuse to race with).
    ones = [load_with_cpu(server, model, 1, 1, max_tokens) for _ in range(3)]
    decode = {"decode_16": many.decode_tokens_per_s, "decode_1": statistics.median(o.decode_tokens_per_s for o in ones),
              "cpu_ms_per_token_16": many.cpu_ms_per_token,
              "cpu_ms_per_token_1": statistics.median(o.cpu_ms_per_token for o in ones)}  # type: ignore[attr-defined]
    if decode_only:
        return decode
    # TTFTs are single requests of ~0.15 s: the median of several conversations, each on its own system prompt.
    turns = [multi_turn(server.base_url, model, f"{tag}-{i}") for i in range(chats)]
    return {**decode, **{key: statistics.median(turn[key] for turn in turns) for key in turns[0]},
            **asyncio.run(burst(server.base_url, model, tag))}


def run_rounds(binary: Path, bundle: Path, gguf: Path, model: str,
               args: argparse.Namespace) -> list[dict[str, dict[str, Any]]]:
    """Both servers up at once; each round measures one then the other, the order alternating."""
    serve_args = ["--no-verify", "--max-concurrency", str(SLOTS), "--memory", args.memory, *args.serve_arg]
    rounds = []
    with llama_server(binary, gguf, args.threads, args.work / "llama-server.log") as theirs, \
            launched_server(bundle, threads=args.threads, extra_args=serve_args,
                            log_path=args.work / "edgeopt-serve.log") as ours:
        servers = {"llama-server": theirs, "edgeopt": ours}
        for round_no in range(args.rounds):
            order = list(servers) if round_no % 2 == 0 else list(reversed(servers))
            rounds.append({name: measure(servers[name], model, f"{name}-{round_no}", args.max_tokens, args.chats,
                                         args.decode_only)
                           for name in order})
            print(f"round {round_no + 1}/{args.rounds}: " + ", ".join(
                f"{key} {rounds[-1]['edgeopt'][key] / rounds[-1]['llama-server'][key]:.3f}"
                for key, _, _ in FIGURES if key in rounds[-1]["edgeopt"]), flush=True)
    return rounds


FIGURES = [  # key, label, higher is better
    ("decode_16", f"{SLOTS} streams x 128 tokens, aggregate decode tok/s", True),
    ("decode_1", "1 stream, decode tok/s", True),
    ("cpu_ms_per_token_16", f"{SLOTS} streams, server CPU ms per token", False),
    ("cpu_ms_per_token_1", "1 stream, server CPU ms per token", False),
    ("cold_s", "chat, ~1k-token system prompt, cold TTFT s", False),
    ("second_turn_s", "same conversation, second turn TTFT s", False),
    ("same_system_s", "new conversation, same system prompt TTFT s", False),
    ("returning_s", "first conversation's third turn, after the new one, TTFT s", False),
    ("burst_median_s", f"{BURST} new conversations at once, one system prompt, median TTFT s", False),
    ("burst_last_s", f"{BURST} new conversations at once, one system prompt, last TTFT s", False),
]


def bootstrap_interval(values: list[float], level: float = 0.9, draws: int = 4000) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of ``values`` (fixed seed: the same data, the same answer)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    tail = (1 - level) / 2
    return medians[int(tail * draws)], medians[min(draws - 1, int((1 - tail) * draws))]


def verdict(low: float, high: float, higher_is_better: bool) -> str:
    if (low >= 1.0) if higher_is_better else (high <= 1.0):
        return "met"
    if (high < 1.0) if higher_is_better else (low > 1.0):
        return "NOT met"
    return "parity"  # the interval straddles 1.0: no difference this run can resolve


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    table = {}
    for key, label, higher in FIGURES:
        if key not in rounds[0]["edgeopt"]:
            continue  # --decode-only
        ours = [r["edgeopt"][key] for r in rounds]
        theirs = [r["llama-server"][key] for r in rounds]
        ratios = [a / b for a, b in zip(ours, theirs)]
        low, high = bootstrap_interval(ratios)
        table[key] = {"label": label, "edgeopt": ours, "llama-server": theirs,
                      "ratio": round(statistics.median(ratios), 3), "interval_90": [round(low, 3), round(high, 3)],
                      "target": verdict(low, high, higher)}
    return table


def compare_layouts(bundle: Path, model: str, args: argparse.Namespace) -> None:
    """--layouts: `edgeopt serve --kv-layout unified` vs `streams`, alternating rounds, 16 streams x
    --max-tokens: server CPU ms per completion token (the figure load hardly moves with 1 thread) and tok/s."""
    runs: dict[str, list[LoadResult]] = {"unified": [], "streams": []}
    for _ in range(args.rounds):
        for layout in runs:
            serve_args = ["--no-verify", "--max-concurrency", str(SLOTS), "--memory", args.memory,
                          "--kv-layout", layout, *args.serve_arg]
            with launched_server(bundle, threads=args.threads, extra_args=serve_args,
                                 log_path=args.work / f"edgeopt-serve-{layout}.log") as server:
                asyncio.run(run_load(server.base_url, model, 1, 1, 32, 4))  # warm-up
                runs[layout].append(load_with_cpu(server, model, SLOTS, SLOTS, args.max_tokens))
    print(f"CPU: {cpu_model()}, threads {args.threads}, {args.rounds} alternating rounds (medians), "
          f"{SLOTS} streams x {args.max_tokens} tokens")
    cpu = {k: statistics.median(r.cpu_ms_per_token for r in v) for k, v in runs.items()}  # type: ignore[attr-defined]
    tok = {k: statistics.median(r.decode_tokens_per_s for r in v) for k, v in runs.items()}
    for layout in runs:
        print(f"  --kv-layout {layout:<8} server CPU {cpu[layout]:6.2f} ms/token   aggregate decode {tok[layout]:7.1f} tok/s")
    print(f"  streams / unified: CPU per token {cpu['streams'] / cpu['unified']:.3f}x, "
          f"tok/s {tok['streams'] / tok['unified']:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-200m"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8, help="paired rounds (--layouts: alternating rounds)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--chats", type=int, default=3, help="multi-turn conversations per server per round")
    parser.add_argument("--memory", default="2GiB", help="edgeopt serve --memory")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra edgeopt serve argument")
    parser.add_argument("--llama-server", type=Path, help="a built llama-server (default: build it)")
    parser.add_argument("--layouts", action="store_true", help="instead: edgeopt --kv-layout unified vs streams")
    parser.add_argument("--bundle", type=Path, help="a GGUF bundle to serve instead of the ~200M one built here "
                        "(e.g. the 1B shape's from bench_optimize_scale.py)")
    parser.add_argument("--decode-only", action="store_true",
                        help="only the 1- and 16-stream decode figures (no multi-turn or burst prompts)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    bundle = args.bundle or build_bundle(args.work, "deep")
    if args.layouts:
        return compare_layouts(bundle, model_names(bundle, load_bundle(bundle, verify=False))[0], args)
    gguf = next(bundle.glob("*.gguf"))
    binary = args.llama_server or llama_server_binary()
    model = model_names(bundle, load_bundle(bundle, verify=False))[0]
    rounds = run_rounds(binary, bundle, gguf, model, args)
    table = summarize(rounds)
    print(f"CPU: {cpu_model()}, threads {args.threads}, {args.rounds} rounds, both servers up, order alternating; "
          "values: medians; ratio: median of the per-round ratios edgeopt / llama-server, 90% bootstrap interval")
    print(f"{'figure':<66} {'llama-server':>13} {'edgeopt':>9} {'ratio':>6} {'interval':>13}  target")
    for row in table.values():
        theirs, ours = statistics.median(row["llama-server"]), statistics.median(row["edgeopt"])
        low, high = row["interval_90"]
        print(f"{row['label']:<66} {theirs:>13.3f} {ours:>9.3f} {row['ratio']:>6.3f} {low:>6.3f}-{high:<6.3f}  "
              f"{row['target']}")
    result = {"cpu": cpu_model(), "threads": args.threads, "rounds": rounds, "table": table}
    (args.work / "vs-llama-server.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
