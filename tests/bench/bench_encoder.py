"""Sentence embeddings: INT8 ONNX (edgeopt's runtime) vs fp32 torch on CPU, side by side in one run.

Slow; run with: pytest tests/bench/bench_encoder.py -m slow -s

Model: a random-init BERT of all-MiniLM-L6-v2's shape (6 layers, hidden 384, 12 heads, FFN 1536) with
a 10k-entry WordPiece vocabulary trained on local text, so texts have realistic token counts.
Workloads, 64 texts each:
- queries: one text of 8-30 words (about 15-60 tokens) per call: an embedding endpoint answering one
  request at a time, the common case on a device;
- sentences x16: the same texts 16 per call (the server's batcher merges concurrent requests);
- passages x16: 16 texts of 128 tokens per call (indexing documents), where the weight GEMMs dominate.
And the int8 GEMM alone: one FFN-shaped weight matmul (2048x384 @ 384x1536), onnxruntime int8 (the
same quantizer settings) vs torch fp32. Its ratio is what the CPU's int8 instructions allow; no
GEMM-bound workload can beat it by much.

Rounds interleave torch and onnx, so machine noise hits both alike; a ratio is the median over rounds
of torch time / onnx time within a round. Both use THREADS threads (EDGEOPT_BENCH_THREADS, default 2).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.profiles import load_profile
from edgeopt.profiles.host import cpu_flags
from edgeopt.runtimes import load_embedding_runtime
from edgeopt.encoders.pooling import pad_batch
from tests.fixtures.onnx_bundles import encoder_bundle

THREADS = int(os.environ.get("EDGEOPT_BENCH_THREADS", "2"))
ROUNDS = 7
TARGET = 2.5
INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp")
pytestmark = pytest.mark.slow


def _minilm_l6(out_dir: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    from tests.fixtures.tiny_encoder import build_wordpiece_tokenizer, write_sentence_transformers_config

    vocab = build_wordpiece_tokenizer(out_dir, vocab_size=30522, corpus_chars=2_000_000)  # ~10k entries
    config = BertConfig(vocab_size=vocab, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=128, pad_token_id=0)
    config.architectures = ["BertModel"]
    torch.manual_seed(0)
    BertModel(config).eval().save_pretrained(out_dir, safe_serialization=True)
    write_sentence_transformers_config(out_dir)
    return out_dir


def _texts(n: int, words: tuple[int, int], seed: int = 0) -> list[str]:
    """n windows of the local corpus, each of words[0] to words[1] words."""
    from edgeopt.demo.corpus import stdlib_text

    corpus = stdlib_text(400_000).split()
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(corpus) - words[1], size=n)
    return [" ".join(corpus[s:s + int(rng.integers(words[0], words[1] + 1))]) for s in starts]


def _paired(torch_fn: Callable[[], None], onnx_fn: Callable[[], None]) -> tuple[float, float, float]:
    """Median torch seconds, median onnx seconds, median of the per-round ratios."""
    torch_fn(), onnx_fn()  # warm-up: lazy initialisation, prepacked weights
    torch_times, onnx_times = [], []
    for _ in range(ROUNDS):
        for fn, times in ((torch_fn, torch_times), (onnx_fn, onnx_times)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    ratios = [t / o for t, o in zip(torch_times, onnx_times)]
    return statistics.median(torch_times), statistics.median(onnx_times), statistics.median(ratios)


def _workload_ratio(model, torch_batches: list[list[list[int]]], onnx_fn: Callable[[], None]) -> tuple[float, float, float]:
    """texts/s of torch fp32 (forward on pre-padded tensors) and of onnx_fn (edgeopt's path: padding,
    session, pooling, normalization), and their paired ratio."""
    import torch

    tensors = [tuple(map(torch.from_numpy, pad_batch(ids))) for ids in torch_batches]

    def run_torch() -> None:
        with torch.inference_mode():
            for ids, mask in tensors:
                model(input_ids=ids, attention_mask=mask)

    n = sum(map(len, torch_batches))
    torch_s, onnx_s, ratio = _paired(run_torch, onnx_fn)
    return n / torch_s, n / onnx_s, ratio


def _runtime_batches(rt, batches: list[list[list[int]]]) -> Callable[[], None]:
    return lambda: [rt.embed_ids(ids) for ids in batches]


def _concurrent_requests(rt, texts: list[list[int]]) -> Callable[[], None]:
    """Every text as its own request to the server's batcher, all in flight at once."""
    from edgeopt.server.batching.embedding_batcher import EmbeddingBatcher

    async def requests() -> None:
        batcher = EmbeddingBatcher(rt)
        await asyncio.gather(*(batcher.embed([ids]) for ids in texts))

    return lambda: asyncio.run(requests())


def _length_sorted(texts: list[list[int]], size: int) -> list[list[list[int]]]:
    """Batches as sentence-transformers' encode() makes them: sorted by length, then cut."""
    ordered = sorted(texts, key=len)
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def _gemm_ratio(work: Path, m: int = 2048, k: int = 384, n: int = 1536) -> float:
    """int8 dynamic-quantized MatMul in onnxruntime vs fp32 torch.matmul, same shape and threads."""
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper

    from edgeopt.exporters.onnx.quantize import isa_preset, quantize_dynamic_int8
    from edgeopt.runtimes.onnxruntime.session import create_session

    rng = np.random.default_rng(0)
    weight = rng.normal(0, 0.05, (k, n)).astype(np.float32)
    x = rng.normal(0, 1, (m, k)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="ffn_MatMul")], "gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
                              [numpy_helper.from_array(weight, "w")])
    fp32_path, int8_path = work / "gemm.onnx", work / "gemm-int8.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)  # what onnxruntime reads
    onnx.save(model, str(fp32_path))
    quantize_dynamic_int8(fp32_path, int8_path, isa_preset(load_profile("host").cpu_isa), [])
    session = create_session(int8_path, THREADS, ["CPUExecutionProvider"])
    xt, wt = torch.from_numpy(x), torch.from_numpy(weight)

    def run_torch() -> None:
        with torch.inference_mode():
            for _ in range(8):
                torch.matmul(xt, wt)

    def run_onnx() -> None:
        for _ in range(8):
            session.run(None, {"x": x})

    return _paired(run_torch, run_onnx)[2]


def test_encoder_int8_onnx_vs_torch_fp32(tmp_path):
    import torch
    from transformers import AutoModel

    model_dir = _minilm_l6(tmp_path / "minilm")
    bundle = encoder_bundle(model_dir, tmp_path / "bundle", "int8", cpu_isa=load_profile("host").cpu_isa)
    torch.set_num_threads(THREADS)  # after the export, which sets its own thread count
    rt = load_embedding_runtime("onnxruntime", bundle, load_bundle(bundle), threads=THREADS)
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    def tokenized(texts: list[str]) -> list[list[int]]:  # cut to the model's 128 positions
        return [ids[:128] for ids in rt.tokenizer.encode_batch(texts, add_special=True)]

    sentences = tokenized(_texts(64, words=(8, 30)))
    passages = tokenized(_texts(64, words=(100, 100), seed=1))
    sentence_batches = [sentences[i:i + 16] for i in range(0, len(sentences), 16)]
    passage_batches = [passages[i:i + 16] for i in range(0, len(passages), 16)]
    mean_tokens = np.mean([len(s) for s in sentences])
    workloads = {  # name: (what torch runs, what edgeopt runs)
        f"queries, 1 per call ({mean_tokens:.0f} tokens mean)": ([[s] for s in sentences],
                                                               _runtime_batches(rt, [[s] for s in sentences])),
        "sentences x16 as given": (sentence_batches, _runtime_batches(rt, sentence_batches)),
        "64 concurrent requests (server batcher)": (_length_sorted(sentences, 16), _concurrent_requests(rt, sentences)),
        f"passages x16 ({len(passages[0])} tokens)": (passage_batches, _runtime_batches(rt, passage_batches)),
    }
    ratios = {}
    print(f"\nencoder MiniLM-L6 shape, {THREADS} threads, median of {ROUNDS} interleaved rounds:")
    for name, (torch_batches, onnx_fn) in workloads.items():
        torch_rate, onnx_rate, ratios[name] = _workload_ratio(model, torch_batches, onnx_fn)
        print(f"  {name:42s} torch fp32 {torch_rate:6.1f} texts/s   onnx int8 {onnx_rate:6.1f} texts/s   "
              f"speedup {ratios[name]:.2f}x (target >= {TARGET}x)")
    gemm = _gemm_ratio(tmp_path)
    dot_product = sorted(cpu_flags() & set(INT8_DOT_PRODUCT_FLAGS))
    print(f"  int8 GEMM alone (2048x384 @ 384x1536): {gemm:.2f}x fp32; int8 dot-product instructions: "
          f"{', '.join(dot_product) or 'none (x86 AVX2 pmaddubsw only)'}")
    query_ratio, *batched = ratios.values()
    assert query_ratio >= TARGET
    if min(batched) < TARGET and not dot_product:
        # Without int8 dot-product instructions the int8 GEMM is about 2x fp32, which caps every
        # GEMM-bound batch below the target: reported as an expected failure, not hidden as a pass.
        pytest.xfail(f"batched speedups {', '.join(f'{r:.2f}x' for r in batched)} < {TARGET}x: this CPU's int8 "
                     f"GEMM is only {gemm:.2f}x fp32 (no VNNI / ARM dot product)")
    assert min(batched) >= TARGET
