"""ONNX benchmarks, side by side in one run (slow; run with: pytest tests/bench/bench_onnx.py -m slow -s).

1. Sentence embeddings: INT8 ONNX (onnxruntime) vs fp32 torch on CPU, same encoder, same batches.
2. Decode: INT4 ONNX (onnxruntime runtime) vs Q4_0 GGUF (llama.cpp runtime), single stream and 8
   streams, driven through the same runtimes.base.Runtime interface, on two models: the 5M-parameter
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

from edgeopt.bundle import load_bundle
from runtimes import load_runtime
from runtimes.base import StepInput
from tests.fixtures.onnx_bundles import encoder_bundle

THREADS = int(os.environ.get("EDGEOPT_BENCH_THREADS", "2"))
BENCH_WORK = Path(os.environ.get("EDGEOPT_BENCH_WORK", "/tmp/edgeopt-bench-200m"))  # shared with bench_serve_200m
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


def _minilm_l6(out_dir: Path) -> Path:
    """Random-init BERT of all-MiniLM-L6-v2's shape: 6 layers, hidden 384, 12 heads, FFN 1536."""
    import torch
    from transformers import BertConfig, BertModel

    from tests.fixtures.tiny_encoder import build_wordpiece_tokenizer, write_sentence_transformers_config

    vocab = build_wordpiece_tokenizer(out_dir)
    config = BertConfig(vocab_size=vocab, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=128, pad_token_id=0)
    config.architectures = ["BertModel"]
    torch.manual_seed(0)
    BertModel(config).eval().save_pretrained(out_dir, safe_serialization=True)
    write_sentence_transformers_config(out_dir)
    return out_dir


def _encoder_rates(rt, model, batches: list[list[list[int]]]) -> tuple[float, float, float]:
    """texts/s of torch fp32, the ONNX runtime's embed path, and the ONNX session alone."""
    import torch

    padded = [_padded(ids) for ids in batches]
    tensors = [(torch.from_numpy(x), torch.from_numpy(m)) for x, m in padded]

    def run_torch() -> None:  # already padded tensors: torch pays no Python tokenization/padding either
        with torch.inference_mode():
            for x, mask in tensors:
                model(input_ids=x, attention_mask=mask)

    def run_onnx() -> None:  # the full runtime path: padding, session, pooling, normalization
        for ids in batches:
            rt.embed_ids(ids)

    def run_session() -> None:  # the session alone, for the Python overhead of the path above
        for x, mask in padded:
            feed = {"input_ids": x, "attention_mask": mask, "token_type_ids": np.zeros_like(x)}
            rt.session.run(None, {k: v for k, v in feed.items() if k in rt._input_names})

    run_torch(), run_onnx(), run_session()  # warm-up
    n = sum(map(len, batches))
    return tuple(n / _best_of(fn) for fn in (run_torch, run_onnx, run_session))


def test_encoder_int8_onnx_vs_torch_fp32(tmp_path):
    import torch
    from transformers import AutoModel

    model_dir = _minilm_l6(tmp_path / "minilm")
    bundle = encoder_bundle(model_dir, tmp_path / "bundle", "int8")
    torch.set_num_threads(THREADS)  # after the export, which sets its own thread count
    rt = load_runtime("onnxruntime", bundle, load_bundle(bundle), threads=THREADS)
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    # A small WordPiece vocabulary splits words finely: cut every text to the model's 128 positions.
    ids = [seq[:128] for seq in rt.tokenizer.encode_batch(_sentences(64))]
    speedups = {}
    for size in (16, 1):  # batched throughput; one text per call (no padding, per-call overheads count)
        torch_rate, onnx_rate, session_rate = _encoder_rates(rt, model, [ids[i:i + size] for i in range(0, 64, size)])
        speedups[size] = onnx_rate / torch_rate
        print(f"\nencoder MiniLM-L6 shape ({THREADS} threads), 64 texts of <= 128 tokens, batches of {size}: "
              f"torch fp32 {torch_rate:.1f}/s, onnx int8 {onnx_rate:.1f}/s (session alone {session_rate:.1f}/s), "
              f"speedup {speedups[size]:.2f}x (target >= 2.5x)")
    # Without VNNI/AMX, x86 int8 GEMM (u8 x s8 via pmaddubsw) peaks near 2x fp32 FMA: the weight
    # matmuls bound the batched ratio below 2.5x on AVX2-only CPUs; the message says which case this is.
    assert speedups[16] >= 2.5, f"batched int8/fp32 speedup {speedups[16]:.2f}x on a CPU with {_int8_isa()}"


def _padded(batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    longest = max(map(len, batch))
    ids, mask = np.zeros((len(batch), longest), dtype=np.int64), np.zeros((len(batch), longest), dtype=np.int64)
    for row, seq in enumerate(batch):
        ids[row, :len(seq)], mask[row, :len(seq)] = seq, 1
    return ids, mask


def _int8_isa() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    found = [f for f in ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp") if f" {f}" in flags]
    return ", ".join(found) if found else "no int8 dot-product instructions (AVX2 pmaddubsw only)"


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
