"""Benchmark: convert a ~200M-parameter random-init Llama to GGUF; report time and peak RSS.

Run as a script:  .venv/bin/python tests/bench/bench_gguf_convert.py [--quant Q4_K_M] [--keep DIR]
or with pytest:   .venv/bin/python -m pytest tests/bench/bench_gguf_convert.py -m slow -s

The conversion runs in a fresh child process so its peak RSS (ru_maxrss) is the converter's own,
not that of building the model. The requirement checked: peak RSS <= 1.5 x the model's fp16 size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHAPE = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
             num_key_value_heads=8, vocab_size=32000)

_CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from edgeopt.exporters.gguf.exporter import GGUFExporter
started = time.perf_counter()
result = GGUFExporter().export(Path({model!r}), Path({out!r}), {quant!r}, {{"threads": 2}})
# VmHWM is this process image's own peak; ru_maxrss would also count the parent's RSS inherited at fork.
hwm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"seconds": time.perf_counter() - started, "peak_rss_bytes": hwm_kib * 1024,
                  "details": result.details}}))
"""


def build_model(out_dir: Path) -> int:
    """Random-init fp16 Llama of SHAPE with the tiny BPE tokenizer; returns its parameter count."""
    import torch
    import transformers

    from tests.fixtures.tiny_models import build_tokenizer
    from edgeopt.demo.tokenizer import special_token_ids

    build_tokenizer(out_dir)
    ids = special_token_ids(out_dir)
    config = transformers.LlamaConfig(**SHAPE, max_position_embeddings=2048, tie_word_embeddings=False,
                                      bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = transformers.LlamaForCausalLM(config).half()
    model.save_pretrained(out_dir, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def run_benchmark(work: Path, quant: str = "F16") -> dict:
    model_dir, out_dir = work / "hf", work / "gguf"
    started = time.perf_counter()
    n_params = build_model(model_dir)
    build_seconds = time.perf_counter() - started
    child = _CHILD.format(root=str(ROOT), model=str(model_dir), out=str(out_dir), quant=quant)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    fp16_bytes = 2 * n_params
    return {
        "parameters": n_params, "quant": quant, "build_seconds": round(build_seconds, 1),
        "convert_seconds": round(measured["seconds"], 2),
        "peak_rss_mib": round(measured["peak_rss_bytes"] / 2**20, 1),
        "fp16_size_mib": round(fp16_bytes / 2**20, 1),
        "peak_rss_over_fp16": round(measured["peak_rss_bytes"] / fp16_bytes, 3),
        "gguf_mib": round((out_dir / "model.gguf").stat().st_size / 2**20, 1),
    }


@pytest.mark.slow
def test_convert_200m_within_memory_budget(tmp_path: Path) -> None:
    figures = run_benchmark(tmp_path)
    print(json.dumps(figures, indent=2))
    assert figures["peak_rss_over_fp16"] <= 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quant", default="F16")
    parser.add_argument("--keep", type=Path, help="work directory to keep (default: a temp dir)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        print(json.dumps(run_benchmark(args.keep, args.quant), indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run_benchmark(Path(tmp), args.quant), indent=2))


if __name__ == "__main__":
    main()
