"""Print the Gemma figures of issue 17's closing note: fidelity and sizes per architecture and format.

Run as a script:  .venv/bin/python tests/bench/gemma_figures.py [--out DIR]

For each tiny Gemma (tests/fixtures/tiny_gemma.py, every quirk on): GGUF F32 / Q8_0 / Q4_K_M logits
against transformers (300 tokens, KL and top-1), file bytes against the planner, and the ONNX
fp32 / int8 / int4 exports' own validation figures with their file bytes against the planner.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def gguf_rows(model_dir: Path, out: Path) -> list[str]:
    from edgeopt.sources.model_spec import load_model_spec
    from edgeopt.planning.checkpoint import weight_bytes
    from edgeopt.exporters.gguf.exporter import GGUFExporter
    from tests.fixtures.parity import gguf_parity

    spec, rows = load_model_spec(str(model_dir)), []
    for quant in ("F32", "Q8_0", "Q4_K_M"):
        result = GGUFExporter().export(model_dir, out / f"gguf-{quant}", quant, {"threads": 2})
        path = out / f"gguf-{quant}" / result.model_file
        comparison = gguf_parity(model_dir, path)
        planned = weight_bytes(spec, "gguf", quant)
        rows.append(f"gguf {quant:7s} KL {comparison.mean_kl:9.3g}  top-1 {comparison.top1_agreement:7.2%}  "
                    f"file {path.stat().st_size:>9,d} B  plan {planned / path.stat().st_size - 1:+6.1%}")
    return rows


def onnx_rows(model_dir: Path, out: Path) -> list[str]:
    from edgeopt.sources.model_spec import load_model_spec
    from edgeopt.planning.checkpoint import weight_bytes
    from tests.fixtures.onnx_bundles import optimize_onnx

    spec, rows = load_model_spec(str(model_dir)), []
    for quant in ("fp32", "int8", "int4"):
        bundle = optimize_onnx(model_dir, out / f"onnx-{quant}", quant)
        export = json.loads((bundle / "manifest.json").read_text())["export"]
        size = sum(p.stat().st_size for p in (bundle / "model").iterdir() if p.name.startswith("model.onnx"))
        vs_torch = f"fp32 graph KL vs torch {export['fp32_kl_vs_torch']:.3g}"
        vs_fp32 = (f", probe KL vs fp32 {export['probe_kl_vs_fp32']:.3g} top-1 {export['probe_top1_vs_fp32']:.2%}"
                   if "probe_kl_vs_fp32" in export else "")
        rows.append(f"onnx {quant:7s} {vs_torch}{vs_fp32}  kv {export['kv_heads']}x{export['head_dim']}  "
                    f"file {size:>9,d} B  plan {weight_bytes(spec, 'onnx', quant) / size - 1:+6.1%}")
    return rows


def main() -> None:
    from tests.fixtures.tiny_gemma import build_tiny_gemma

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="gemma-figures-"))
    for variant in ("gemma2", "gemma3"):
        model_dir = build_tiny_gemma(root / variant / "hf", variant)
        for row in gguf_rows(model_dir, root / variant) + onnx_rows(model_dir, root / variant):
            print(f"{variant}  {row}", flush=True)


if __name__ == "__main__":
    main()
