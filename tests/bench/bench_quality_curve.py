"""Benchmark: the whole quality-per-byte curve of edgeopt's size-budgeted GGUF mix against llama.cpp's own
imatrix types, on a real trained model (SmolLM2-135M-Instruct), judged by ``llama-perplexity --kl-divergence``.

For each of llama.cpp's types (default Q3_K_M, Q4_K_M, Q5_K_M, Q6_K) the file ``llama-quantize --imatrix``
writes, and edgeopt's mix made to that file's exact size. Both start from the same F16 (llama.cpp's converter)
and the same importance matrix (``llama-imatrix`` on the calibration text, the even sections of CPython's
language reference), so only the tensor types differ. The mix's costs are measured once
(exporters/gguf/mix/build.py's MixMaker: rounding errors, group sensitivities on the calibration text's first 2
chunks) and a mix is chosen for every size; each row says whether the mix or a llama.cpp type it fell back to
was written, and the KL the mix predicted and measured on the calibration text. Every file is then scored on the
disjoint evaluation text (the odd sections) against llama.cpp's F16.

``--onnx`` adds edgeopt's ONNX int8 / int4 rows, and GGUF Q4_K_M for reference, by edgeopt's own evaluation
against the checkpoint on the evaluation text (tests/bench/bench_onnx_quality.py; a different scale from
llama-perplexity's, so they are a table of their own).

Heavy (the mix's measurements are minutes; run it alone):
``nice .venv/bin/python tests/bench/bench_quality_curve.py --work /work/cache-quality/curve``
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_quality_gguf import cpu_model, kld_stats, prepare, run  # noqa: E402

SENSITIVITY_CHUNKS = 2  # what edgeopt optimize --quant MIX measures groups on (exporters/gguf/mix/build.py)


def llama_imatrix(tools: Path, f16: Path, calibration: Path, chunks: int, out: Path, threads: int) -> Path:
    if not out.is_file():
        run([str(tools / "llama-imatrix"), "-m", str(f16), "-f", str(calibration), "-c", "512", "-b", "512",
             "--chunks", str(chunks), "-o", str(out), "-t", str(threads), "-nr"])
    return out


def llama_quant(tools: Path, f16: Path, imatrix: Path, quant: str, out: Path, threads: int) -> Path:
    if not out.is_file():
        run([str(tools / "llama-quantize"), "--imatrix", str(imatrix), str(f16), str(out), quant, str(threads)])
    return out


def curve(work: Path, quants: list[str], calib_chunks: int, eval_chunks: int, threads: int) -> list[dict[str, Any]]:
    from edgeopt.exporters.gguf.imatrix_file import read_imatrix
    from edgeopt.exporters.gguf.mix.build import MixMaker
    from edgeopt.exporters.gguf.mix.recipes import COMPETING_RECIPES
    from edgeopt.exporters.input_energy import text_file_chunks
    from edgeopt.sources.model_spec import load_model_spec

    tools, checkpoint, calibration, f16, base = prepare(work, eval_chunks, threads)
    imatrix_path = llama_imatrix(tools, f16, calibration, calib_chunks, work / f"llama-imatrix-{calib_chunks}.gguf",
                                 threads)
    theirs = {q: llama_quant(tools, f16, imatrix_path, q, work / f"llama-im{calib_chunks}-{q.lower()}.gguf", threads)
              for q in quants}
    chunks = text_file_chunks(checkpoint, calibration, SENSITIVITY_CHUNKS, "to measure the mix's groups")
    started = time.perf_counter()
    (work / "mix").mkdir(exist_ok=True)
    cached = work / "mix" / f"costs-{calib_chunks}-v2.pickle"  # same F16, matrix and chunks: measured once (v2: MixCosts gained the file size fields)
    maker = MixMaker(f16, work / "mix", read_imatrix(imatrix_path), chunks, load_model_spec(str(checkpoint)).num_layers,
                     threads, costs=pickle.loads(cached.read_bytes()) if cached.is_file() else None)
    cached.write_bytes(pickle.dumps(maker.costs))
    measured_s = time.perf_counter() - started
    rows = []
    for quant, path in theirs.items():
        size = path.stat().st_size
        mix_path = work / f"mix-at-{quant.lower()}.gguf"
        facts = maker.write(mix_path, size, list(COMPETING_RECIPES))["mix"]
        ours, llama = kld_stats(tools, base, mix_path, threads), kld_stats(tools, base, path, threads)
        rows.append({"quant": quant, "bytes": size, "mix_bytes": mix_path.stat().st_size, "llama": llama, "mix": ours,
                     "written": facts["written"], "predicted": facts["predicted_kl"],
                     "measured_calib": facts["measured_kl"], "recipe_kl": facts["recipe_kl"],
                     "types": Counter(facts.get("mix_types", facts["types"]).values())})
    print(f"\nSmolLM2-135M-Instruct, {cpu_model()}, {threads} threads; importance matrix: llama-imatrix on "
          f"{calib_chunks}x512 calibration tokens; evaluation {eval_chunks}x512 disjoint tokens, "
          f"llama-perplexity --kl-divergence against llama.cpp's F16; the mix's measurements took {measured_s:.0f} s")
    print("| size of | MiB | llama.cpp imatrix KLD | mix KLD | ratio | same top: llama / mix | written | "
          "mix predicted / measured KL (calibration) |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['quant']} | {r['bytes'] / 2**20:.1f} | {r['llama']['kld']:.4f} | {r['mix']['kld']:.4f} | "
              f"{r['mix']['kld'] / r['llama']['kld']:.2f}x | {r['llama']['same_top']:.1f}% / {r['mix']['same_top']:.1f}% "
              f"| {r['written']} | {r['predicted']:.4f} / {r['measured_calib']:.4f} |")
    print("\nmeasured on the calibration chunks (what decides the written file); the mix's own types by tensor count (also where a llama.cpp type was written):")
    for r in rows:
        print(f"- at {r['quant']}'s size: mix {r['measured_calib']:.4f}, "
              + ", ".join(f"{name} {kl:.4f}" for name, kl in r["recipe_kl"].items())
              + f"; {dict(r['types'].most_common())}")
    return rows


def onnx_rows(work: Path, threads: int) -> None:
    from tests.bench.bench_onnx_quality import GGUF_Q4_K_M, SETTINGS, run as run_settings, table

    wanted = {GGUF_Q4_K_M, "onnx int8 weight-only b32 (default)",
              "onnx int4 sensitive-int8 weighted b32 (default: generated text)",
              "onnx int4 --size at gguf Q4_K_M's size (8-bit MatMuls measured)"}
    print(table(run_settings([s for s in SETTINGS if s[0] in wanted], work / "onnx", threads)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "edgeopt" / "bench-quality-curve")
    parser.add_argument("--quants", default="Q3_K_M,Q4_K_M,Q5_K_M,Q6_K")
    parser.add_argument("--calib-chunks", type=int, default=8)
    parser.add_argument("--eval-chunks", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--onnx", action="store_true", help="add edgeopt's ONNX int8/int4 rows (minutes more)")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    curve(args.work, args.quants.split(","), args.calib_chunks, args.eval_chunks, args.threads)
    if args.onnx:
        onnx_rows(args.work, args.threads)
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
