"""Decode speed under a co-located busy process: the old thread default (all cores) vs the new one
(the cores other processes leave free, runtimes/llama_cpp/threads.py), side by side (issue 12 item 10).

    .venv/bin/python tests/bench/bench_colocated_threads.py MODEL.gguf [--rounds 3] [--busy 1]

For each round, with 0 and then ``--busy`` synthetic busy processes (each spins one core), it times
5 completions of 20 tokens with: threads = all usable cores (the old default), the new default, and
--threads 1. Prints the CPU, the load average before, one JSON line per measurement, then a table of
medians and the new/old ratio per load. The machine's other load is whatever it is: the ratios, taken
in one run, are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from edgeopt.profiles.host import usable_cpus
from edgeopt.runtimes.llama_cpp.bench import completion_speed

SPIN = "while True: pass"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def measure(gguf: Path, busy: int, all_cores: int) -> dict[str, float]:
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
    try:
        speeds = {}
        for name, threads in (("old: all cores", all_cores), ("new: default", None), ("--threads 1", 1)):
            result = completion_speed(gguf, threads)
            speeds[name] = result.tokens_per_s
            print(json.dumps({"busy_processes": busy, "config": name, "threads": result.threads,
                              "tokens_per_s": round(result.tokens_per_s, 1)}), flush=True)
        return speeds
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=1, help="Busy processes in the loaded case.")
    args = parser.parse_args()
    all_cores = len(usable_cpus()) or os.cpu_count() or 1
    print(f"CPU: {cpu_name()}, {all_cores} usable cores; load average before: {os.getloadavg()}")
    runs: dict[int, list[dict[str, float]]] = {0: [], args.busy: []}
    for _ in range(args.rounds):
        for busy in runs:
            runs[busy].append(measure(args.gguf, busy, all_cores))
    print(f"\nmedian tokens/s over {args.rounds} rounds (5 completions x 20 tokens each)")
    print(f"{'busy processes':>15} {'old: all cores':>15} {'new: default':>13} {'--threads 1':>12} {'new/old':>8}")
    for busy, rounds in runs.items():
        medians = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
        old, new = medians["old: all cores"], medians["new: default"]
        print(f"{busy:>15} {old:>15.1f} {new:>13.1f} {medians['--threads 1']:>12.1f} {new / old:>8.2f}")


if __name__ == "__main__":
    main()
