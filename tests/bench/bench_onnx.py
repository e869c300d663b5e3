"""ONNX decoder benchmark, side by side in one run (slow; run with: pytest tests/bench/bench_onnx.py -m slow -s).
The encoder benchmark (INT8 ONNX vs fp32 torch) is tests/bench/bench_encoder.py.

Decode: INT4 ONNX (onnxruntime runtime) vs Q4_0 GGUF (llama.cpp runtime), single stream and 8
streams, driven through the same edgeopt.runtimes.base.Runtime interface, on two models: the 5M-parameter
demo model (printed for information: per-step dispatch overhead dominates it) and a ~200M-parameter
random-init Llama (bench_serve_200m's), where the matmul kernels dominate as on real edge models;
the targets are asserted on the latter.
Both use THREADS threads (EDGEOPT_BENCH_THREADS, default 2: the CI machine's budget).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.base import StepInput

THREADS = int(os.environ.get("EDGEOPT_BENCH_THREADS", "2"))
BENCH_WORK = Path(os.environ.get("EDGEOPT_BENCH_WORK", "/tmp/edgeopt-bench-200m"))  # shared with bench_serve_200m
pytestmark = pytest.mark.slow


def _decode_tokens_per_s(rt, streams: int, prompt: list[int], new_tokens: int) -> float:
    """Prefill every stream, then time greedy decode steps of all streams batched together."""
    rows = rt.step([StepInput(slot=s, tokens=prompt, start_pos=0, want_logits=True) for s in range(streams)])
    nxt = rows.argmax(axis=1).tolist()
    pos = len(prompt)
    start = time.perf_counter()
    for _ in range(new_tokens):
        rows = rt.step([StepInput(slot=s, tokens=[nxt[s]], start_pos=pos, want_logits=True) for s in range(streams)])
        nxt = rows.argmax(axis=1).tolist()
        pos += 1
    elapsed = time.perf_counter() - start
    for s in range(streams):
        rt.release(s)
    return streams * new_tokens / elapsed


def _bundle(demo_model_dir: Path, out: Path, fmt: str, quant: str) -> Path:
    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize

    run_optimize(OptimizeOptions(model=str(demo_model_dir), target="x86-64-cpu", output=out, format=fmt,
                                 quant=quant, context=512, evaluate=False, force=True), report=lambda _m: None)
    return out


def _compare_decode(checkpoint: Path, work: Path, new_tokens: int) -> dict[str, dict[int, float]]:
    """tokens/s of both runtimes, 1 and 8 streams, on bundles of the same checkpoint."""
    onnx_dir = _bundle(checkpoint, work / "onnx-int4", "onnx", "int4")
    gguf_dir = _bundle(checkpoint, work / "gguf-q4_0", "gguf", "Q4_0")
    opts = dict(kv_capacity_tokens=8 * 256, max_slots=8, context_length=256, threads=THREADS)
    results: dict[str, dict[int, float]] = {}
    for name, bundle in (("onnx int4", onnx_dir), ("llama.cpp Q4_0", gguf_dir)):
        manifest = load_bundle(bundle)
        rt = load_runtime(manifest.runtime, bundle, manifest, **opts)
        prompt = rt.tokenizer.encode("The function returns a list of", add_special=False)
        _decode_tokens_per_s(rt, 1, prompt, 4)  # warm-up
        _decode_tokens_per_s(rt, 8, prompt, 4)
        results[name] = {n: _decode_tokens_per_s(rt, n, prompt, new_tokens) for n in (1, 8)}
        rt.close()
    return results


def _print_ratios(label: str, results: dict[str, dict[int, float]]) -> dict[int, float]:
    onnx, llama = results["onnx int4"], results["llama.cpp Q4_0"]
    ratios = {n: onnx[n] / llama[n] for n in (1, 8)}
    for n in (1, 8):
        print(f"\n{label} ({THREADS} threads), decode {n} stream(s): onnx int4 {onnx[n]:.1f} tok/s, "
              f"llama.cpp Q4_0 {llama[n]:.1f} tok/s, ratio {ratios[n]:.2f} (target >= {0.6 if n == 1 else 0.8})")
    assert np.isfinite([*onnx.values(), *llama.values()]).all()
    return ratios


def test_decoder_int4_onnx_vs_llama_cpp_q4_0(demo_model_dir, tmp_path):
    from tests.bench.bench_serve_200m import build_checkpoint

    demo = _compare_decode(demo_model_dir, tmp_path / "demo", new_tokens=64)
    _print_ratios("demo model 5M", demo)  # information only: per-node dispatch dominates a 5M model
    BENCH_WORK.mkdir(parents=True, exist_ok=True)
    checkpoint = build_checkpoint(BENCH_WORK / "hf-200m")
    ratios = _print_ratios("llama 200M", _compare_decode(checkpoint, tmp_path / "200m", new_tokens=32))
    assert ratios[1] >= 0.6
    assert ratios[8] >= 0.8
