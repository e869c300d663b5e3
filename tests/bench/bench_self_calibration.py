"""Benchmark: does text the model writes itself make an importance matrix as good as real text?

On SmolLM2-135M-Instruct (edgeopt/demo/smollm2.py), edgeopt's GGUF exporter makes Q4_K_M and IQ4_XS
(a) without a matrix, (b) with one from real text (the even sections of CPython's language reference,
tests/fixtures/english_texts.py, first ``--chunks`` chunks of 512 tokens) and (c) with one from the same
number of tokens sampled from the model itself (exporters/gguf/self_calibration.py). Every file is scored
by llama.cpp's ``llama-perplexity --kl-divergence`` on the disjoint evaluation text (the odd sections)
against llama.cpp's own F16, exactly as tests/bench/bench_quality_gguf.py does (its helpers are reused).
"recovered" is (KLD(a) - KLD(c)) / (KLD(a) - KLD(b)): the share of the real text's gain that generated
text gets. Export seconds include conversion, generation, the matrix and quantization.

Run it alone (heavy, ~10 minutes on 2 cores):
``nice .venv/bin/python tests/bench/bench_self_calibration.py [--chunks 8] [--eval-chunks 40]`` or
``pytest tests/bench/bench_self_calibration.py -m slow -s``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_quality_gguf import cpu_model, kld_stats, prepare  # noqa: E402

SOURCES = ("none", "real text", "generated")


def export(checkpoint: Path, out: Path, quant: str, source: str, calibration: Path,
           chunks: int) -> tuple[Path, dict]:
    """edgeopt's GGUF exporter with the matrix from ``source``; (model file, export details + seconds)."""
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    # No "threads": as `edgeopt optimize` runs it (generation on the cores other processes leave free)
    options: dict = {"calibration_chunks": chunks}
    if source == "none":
        options["self_calibration"] = False
    elif source == "real text":
        options["calibration_data"] = str(calibration)
    started = time.perf_counter()
    result = GGUFExporter().export(checkpoint, out, quant, options)
    return out / result.model_file, result.details | {"seconds": time.perf_counter() - started}


def recovered(rows: dict[tuple[str, str], dict], quant: str) -> float | None:
    """Share of the real text's KLD reduction that generated text achieves."""
    try:
        none, real, gen = (rows[(quant, s)]["kld"] for s in SOURCES)
    except KeyError:
        return None
    return (none - gen) / (none - real) if none > real else None


def main(argv: list[str] | None = None) -> dict[tuple[str, str], dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "edgeopt" / "bench-self-calibration")
    parser.add_argument("--chunks", type=int, default=8, help="calibration chunks of 512 tokens, real and generated")
    parser.add_argument("--eval-chunks", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp tools' threads")
    parser.add_argument("--quants", default="Q4_K_M,IQ4_XS")
    args = parser.parse_args(argv)
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tools, checkpoint, calibration, _f16, base = prepare(work, args.eval_chunks, args.threads)

    rows: dict[tuple[str, str], dict] = {}
    for quant in args.quants.split(","):
        for source in SOURCES:
            out = work / f"{quant.lower()}-{source.replace(' ', '-')}"
            path, details = export(checkpoint, out, quant, source, calibration, args.chunks)
            rows[(quant, source)] = kld_stats(tools, base, path, args.threads) | {
                "bytes": path.stat().st_size, "seconds": details["seconds"], "imatrix": details.get("imatrix")}

    print(f"\nSmolLM2-135M-Instruct, {cpu_model()}, {args.threads} threads; matrices from {args.chunks}x512 tokens "
          f"(real or generated), evaluation {args.eval_chunks}x512 tokens of a disjoint text; reference: "
          "llama.cpp's F16")
    print("| quant | importance matrix from | MiB | mean KLD | PPL(Q)/PPL(F16) | same top token | export s |\n"
          "|---|---|---|---|---|---|---|")
    for (quant, source), r in rows.items():
        label = r["imatrix"]["source"] if source == "generated" and r["imatrix"] else source
        print(f"| {quant} | {label} | {r['bytes'] / 2**20:.1f} | {r['kld']:.4f} | {r['ppl_ratio']:.4f} "
              f"| {r['same_top']:.1f}% | {r['seconds']:.0f} |")
    for quant in args.quants.split(","):
        share = recovered(rows, quant)
        generated = rows.get((quant, "generated"), {}).get("imatrix") or {}
        print(f"{quant}: generated text recovers "
              f"{'n/a' if share is None else f'{share:.0%}'} of the real text's KLD reduction; "
              f"generation took {generated.get('generated', {}).get('seconds', float('nan')):.1f} s")
    print(f"took {time.perf_counter() - started:.0f} s")
    return rows


@pytest.mark.slow
def test_self_calibration_bench(tmp_path: Path) -> None:
    rows = main(["--work", str(tmp_path), "--eval-chunks", "20", "--quants", "Q4_K_M"])
    share = recovered(rows, "Q4_K_M")
    assert share is not None and share >= 0.7, f"generated text recovers {share} of the real text's gain"


if __name__ == "__main__":
    main()
