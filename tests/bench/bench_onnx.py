"""ONNX benchmarks, side by side in one run (slow; run with: pytest tests/bench/bench_onnx.py -m slow -s).

1. Sentence embeddings: INT8 ONNX (onnxruntime) vs fp32 torch on CPU, same encoder, same batches.
2. Decode: INT4 ONNX (onnxruntime runtime) vs Q4_0 GGUF (llama.cpp runtime) on the demo model,
   single stream and 8 streams, driven through the same runtimes.base.Runtime interface.
Both use 2 threads (the CI machine's budget). Figures are printed and checked against the targets.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from edgeopt.bundle import load_bundle
from runtimes import load_runtime
from runtimes.base import StepInput
from tests.fixtures.onnx_bundles import encoder_bundle
from tests.fixtures.tiny_encoder import build_tiny_encoder

THREADS = 2
pytestmark = pytest.mark.slow


def _sentences(n: int) -> list[str]:
    from edgeopt.demo.corpus import stdlib_text

    text = stdlib_text(200_000).split()
    return [" ".join(text[i * 30:(i + 1) * 30]) for i in range(n)]  # 30 words: under the 128-token limit


def _best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def test_encoder_int8_onnx_vs_torch_fp32(tmp_path):
    import torch
    from transformers import AutoModel

    torch.set_num_threads(THREADS)
    model_dir = build_tiny_encoder(tmp_path / "minilm", hidden_size=384, num_layers=6)  # MiniLM-L6 shape
    bundle = encoder_bundle(model_dir, tmp_path / "bundle", "int8")
    rt = load_runtime("onnxruntime", bundle, load_bundle(bundle), threads=THREADS)
    texts = _sentences(64)
    # A small WordPiece vocabulary splits words finely: cut every text to the model's 128 positions.
    batches = [[ids[:128] for ids in rt.tokenizer.encode_batch(texts[i:i + 16])] for i in range(0, len(texts), 16)]
    model = AutoModel.from_pretrained(str(model_dir)).eval()

    def run_torch() -> None:
        for ids in batches:
            longest = max(map(len, ids))
            x = torch.tensor([s + [0] * (longest - len(s)) for s in ids])
            mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in ids])
            with torch.no_grad():
                model(input_ids=x, attention_mask=mask)

    def run_onnx() -> None:
        for ids in batches:
            rt.embed_ids(ids)

    run_torch(), run_onnx()  # warm-up
    t_torch, t_onnx = _best_of(run_torch), _best_of(run_onnx)
    speedup = t_torch / t_onnx
    print(f"\nencoder 6x384, 64 texts: torch fp32 {len(texts) / t_torch:.1f}/s, "
          f"onnx int8 {len(texts) / t_onnx:.1f}/s, speedup {speedup:.2f}x (target >= 2.5x)")
    assert speedup >= 2.5


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
    from edgeopt.pipeline import OptimizeOptions, run_optimize

    run_optimize(OptimizeOptions(model=str(demo_model_dir), target="x86-64-cpu", output=out, format=fmt,
                                 quant=quant, context=512, evaluate=False, force=True), report=lambda _m: None)
    return out


def test_decoder_int4_onnx_vs_llama_cpp_q4_0(demo_model_dir, tmp_path):
    onnx_dir = _bundle(demo_model_dir, tmp_path / "onnx-int4", "onnx", "int4")
    gguf_dir = _bundle(demo_model_dir, tmp_path / "gguf-q4_0", "gguf", "Q4_0")
    opts = dict(kv_capacity_tokens=8 * 256, max_slots=8, context_length=256, threads=THREADS)
    results: dict[str, dict[int, float]] = {}
    for name, bundle in (("onnx int4", onnx_dir), ("llama.cpp Q4_0", gguf_dir)):
        manifest = load_bundle(bundle)
        rt = load_runtime(manifest.runtime, bundle, manifest, **opts)
        prompt = rt.tokenizer.encode("The function returns a list of", add_special=False)
        _decode_tokens_per_s(rt, 1, prompt, 8)  # warm-up
        results[name] = {n: _decode_tokens_per_s(rt, n, prompt, 64) for n in (1, 8)}
        rt.close()
    onnx, llama = results["onnx int4"], results["llama.cpp Q4_0"]
    for n in (1, 8):
        print(f"\ndecode {n} stream(s): onnx int4 {onnx[n]:.1f} tok/s, llama.cpp Q4_0 {llama[n]:.1f} tok/s, "
              f"ratio {onnx[n] / llama[n]:.2f}")
    assert onnx[1] >= 0.6 * llama[1]
    assert onnx[8] >= 0.8 * llama[8]
    assert np.isfinite(list(onnx.values())).all()
