"""Benchmark: ``edgeopt serve`` cold start (process start -> /health 200) with a 151k-token vocabulary.

Run as a script:  .venv/bin/python tests/bench/bench_cold_start.py [--work DIR] [--baseline-src DIR] [--repeat N]
or with pytest:   .venv/bin/python -m pytest tests/bench/bench_cold_start.py -m slow -s
                  (EDGEOPT_BENCH_BASELINE_SRC=DIR adds the baseline there too)

Bundles: a Qwen2-shaped checkpoint with tiny layers and Qwen2's vocabulary size (151,646 tokens and
151k merges, tests/fixtures/big_vocab.py) through ``edgeopt optimize`` as GGUF F16 and ONNX fp32, plus
the GGUF with a manifest as older versions wrote it (no recorded KV shape); with tiny weights, the
vocabulary is what a cold start pays for. Each bundle is served by this checkout's
code and, with ``--baseline-src`` (e.g. another checkout of main), by that code too, alternately in the
same run, so the ratio holds under the machine's load. Both get ``--context 2048`` (the model's window),
which older code needs to start an ONNX bundle at all. Then one child process per bundle times the
phases of startup in this checkout, to show where the remaining time goes. Target: < 3 s to /health
(held against the server's CPU seconds, which the machine's load does not inflate; wall time is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET_SECONDS = 3.0
SERVE_ARGS = ["--context", "2048", "--memory", "2GiB", "--threads", "2"]

_PHASES = """
import json, sys, time
from pathlib import Path
marks = [("start", time.perf_counter())]
from edgeopt.store.bundle import load_bundle
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
import edgeopt.server.app, uvicorn
marks.append(("import server", time.perf_counter()))
bundle = Path(sys.argv[1])
options = ServeOptions(context=2048, memory_bytes=2 << 30, threads=2)
manifest = load_bundle(bundle, verify=True)
marks.append(("read + verify bundle", time.perf_counter()))
shape = serving_shape(bundle, manifest, options)
sizing = shape.sizing
marks.append(("size KV", time.perf_counter()))
served = load_served_model(bundle, manifest, shape, options)
marks.append(("load runtime + engine", time.perf_counter()))
served.engine.shutdown()
phases = {b[0]: round(b[1] - a[1], 3) for a, b in zip(marks, marks[1:])}
# The parts of "load runtime", timed again on their own (warm now, so a lower bound)
started = time.perf_counter()
if manifest.runtime == "onnxruntime":
    from edgeopt.runtimes.onnxruntime.session import create_session
    from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer
    create_session(bundle / manifest.model_file, 2, ["CPUExecutionProvider"])
    phases["of which: ORT session"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    BundleTokenizer(bundle / manifest.tokenizer_dir / "tokenizer.json")
    phases["of which: tokenizer"] = round(time.perf_counter() - started, 3)
else:
    import llama_cpp
    from edgeopt.runtimes.llama_cpp.model import load_model
    llama_cpp.llama_model_free(load_model(bundle / manifest.model_file, 0))
    phases["of which: llama.cpp model load"] = round(time.perf_counter() - started, 3)
print(json.dumps(phases))
"""


def build_bundles(work: Path) -> dict[str, Path]:
    """The 151k-vocabulary bundles, built once per work directory: GGUF and ONNX as ``edgeopt optimize``
    writes them now, and the GGUF with the manifest older versions wrote (no kv_bytes_per_token or
    context_length: the server must size it without them, and older servers read the GGUF header)."""
    from edgeopt.store.bundle import load_bundle, write_manifest
    from tests.fixtures.big_vocab import build_big_vocab_model, optimize_bundle

    bundles = {"gguf": work / "bundle-gguf", "gguf, older manifest": work / "bundle-gguf-older",
               "onnx": work / "bundle-onnx"}
    if all((b / "manifest.json").is_file() for b in bundles.values()):
        return bundles
    model = build_big_vocab_model(work / "qwen2-151k")
    optimize_bundle(model, bundles["gguf"], "gguf", "F16")
    optimize_bundle(model, bundles["onnx"], "onnx", "fp32")
    shutil.rmtree(bundles["gguf, older manifest"], ignore_errors=True)
    shutil.copytree(bundles["gguf"], bundles["gguf, older manifest"])
    older = load_bundle(bundles["gguf, older manifest"])
    older.kv = None  # a manifest from before the typed kv section, which recorded no KV facts at all
    write_manifest(bundles["gguf, older manifest"], older)
    return bundles


def time_to_health(src: Path, bundle: Path, timeout_s: float = 120.0) -> tuple[float, float]:
    """Seconds from spawning ``edgeopt serve`` (code from ``src``) to its first 200 on /health, and the CPU
    seconds (user + system) the server spent until then: the load-independent half of the figure."""
    from edgeopt.server.startup.serve_process import free_port, serve_command
    from tests.bench.bench_gguf_cold_start import to_health

    port = free_port()
    figures = to_health(serve_command(bundle, port, extra_args=SERVE_ARGS), port,
                        {**os.environ, "PYTHONPATH": str(src)}, settle_s=0.0, timeout_s=timeout_s, cwd=src)
    return figures["wall"], figures["cpu"]


def startup_phases(bundle: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _PHASES, str(bundle)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_benchmark(work: Path, baseline_src: Path | None = None, repeat: int = 3) -> dict:
    bundles = build_bundles(work)
    sources = {"this": ROOT} | ({"baseline": baseline_src} if baseline_src else {})
    results: dict = {"cpu": cpu_model(), "vocabulary": 151_646, "seconds": {}, "phases": {}}
    for label, bundle in bundles.items():
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in sources}
        for _ in range(repeat):  # alternate, so both codes see the same background load
            for name, src in sources.items():
                runs[name].append(time_to_health(src, bundle))
        results["seconds"][label] = {name: {"median": round(statistics.median(w for w, _ in r), 2),
                                            "best": round(min(w for w, _ in r), 2),
                                            "cpu_median": round(statistics.median(c for _, c in r), 2)}
                                     for name, r in runs.items()}
        results["phases"][label] = startup_phases(bundle)
    return results


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def report(results: dict) -> None:
    print(f"\ncold start of `edgeopt serve` (spawn -> /health 200), 151,646-token vocabulary, CPU: {results['cpu']}")
    print("wall seconds: median (best); cpu: the server's user+system seconds until /health (median)")
    print(f"{'bundle':>22} {'this code':>22} {'baseline':>22} {'baseline/this wall, cpu':>24}")
    for label, seconds in results["seconds"].items():
        this, base = seconds["this"], seconds.get("baseline")
        cols = [f"{r['median']:.2f} ({r['best']:.2f}) cpu {r['cpu_median']:.2f}" if r else "-" for r in (this, base)]
        ratio = (f"{base['median'] / this['median']:.1f}x, {base['cpu_median'] / this['cpu_median']:.1f}x"
                 if base else "-")
        print(f"{label:>22} {cols[0]:>22} {cols[1]:>22} {ratio:>24}")
    for label, phases in results["phases"].items():
        print(f"{label} startup phases (this code): " + ", ".join(f"{k} {v:.2f}s" for k, v in phases.items()))


@pytest.mark.slow
def test_cold_start_of_a_151k_vocabulary_bundle_is_under_3_seconds(tmp_path: Path) -> None:
    baseline = os.environ.get("EDGEOPT_BENCH_BASELINE_SRC")
    results = run_benchmark(tmp_path, Path(baseline) if baseline else None, repeat=2)
    report(results)
    # On an idle machine startup is CPU-bound and single-threaded: wall ~ CPU time. On a shared one the wall
    # time says more about the neighbours than about us, so the target is held against the CPU seconds.
    for label, seconds in results["seconds"].items():
        assert seconds["this"]["cpu_median"] < TARGET_SECONDS, f"{label}: {seconds['this']} to /health"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="Directory for the bundles (reused when present).")
    parser.add_argument("--baseline-src", type=Path, help="Another checkout to compare with (e.g. main's).")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="Also write the results here.")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    work = args.work or Path(tempfile.mkdtemp(prefix="edgeopt-cold-start-"))
    work.mkdir(parents=True, exist_ok=True)
    results = run_benchmark(work, args.baseline_src, args.repeat)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
