"""Print the architecture matrix's figures: ``python -m tests.architectures.report``.

For each catalog entry: llama.cpp F32 and Q8_0 logits against transformers (mean KL, top-1 over 300
tokens), the ONNX fp32 export's, and the planner's size estimates against the files.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeopt.errors import EdgeoptError
from edgeopt.measuring.metrics import Comparison
from edgeopt.measuring.scorers import HFScorer
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.planning.checkpoint import weight_bytes
from tests.architectures.catalog import ARCHITECTURES, build_architecture
from tests.fixtures.parity import gguf_parity, parity_ids
from tests.fixtures.tiny_models import build_tokenizer


def _onnx(model: Path, out: Path) -> tuple[str, int]:
    from edgeopt.exporters.onnx.exporter import ONNXExporter
    from edgeopt.exporters.onnx.scorer import OnnxScorer

    try:
        result = ONNXExporter().export(model, out, "fp32", {})
    except EdgeoptError as exc:
        return f"refused: {exc.message[:90]}...", 0
    ids = parity_ids(model)
    comparison = Comparison()
    comparison.add(HFScorer(model).score(ids), OnnxScorer(out / result.model_file, context=len(ids)).score(ids))
    return f"KL {comparison.mean_kl:.1e} top-1 {comparison.top1_agreement:.0%}", result.details["onnx_bytes"]


def main() -> None:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    root = Path(tempfile.mkdtemp(prefix="edgeopt-matrix-"))
    tokenizer = build_tokenizer(root / "tokenizer")
    for arch in ARCHITECTURES:
        model = build_architecture(arch, root / arch.name, tokenizer)
        spec = load_model_spec(str(model))
        cells = [f"{arch.name:10s} {spec.arch:8s}"]
        for quant in ("F32", "Q8_0"):
            result = GGUFExporter().export(model, root / f"{arch.name}-{quant}", quant, {"threads": 2})
            path = root / f"{arch.name}-{quant}" / result.model_file
            c = gguf_parity(model, path)
            plan = weight_bytes(spec, "gguf", quant) / path.stat().st_size - 1
            cells.append(f"gguf {quant}: KL {c.mean_kl:.1e} top-1 {c.top1_agreement:.0%} plan {plan:+.1%}")
        onnx, onnx_bytes = _onnx(model, root / f"{arch.name}-onnx")
        if onnx_bytes:
            onnx += f" plan {weight_bytes(spec, 'onnx', 'fp32') / onnx_bytes - 1:+.1%}"
        cells.append(f"onnx fp32: {onnx}")
        print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
