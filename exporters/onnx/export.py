"""Export a Hugging Face decoder with KV cache to ONNX through optimum, and check it against torch."""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError, MissingDependencyError, UnsupportedArchitectureError
from edgeopt.measuring.metrics import mean_kl, top1_agreement
from edgeopt.exporters.onnx.longrope import traceable_longrope
from edgeopt.exporters.onnx.tied_embedding import share_tied_embedding
from edgeopt.exporters.onnx.validate import probe_text_ids, probe_token_ids

DECODER_TASK = "text-generation-with-past"
ENCODER_TASK = "feature-extraction"
# fp32 ONNX and torch differ only by kernel rounding; anything above this is a broken export.
FP32_KL_LIMIT = 1e-5
ENCODER_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra", "deberta-v2", "modernbert")
MODEL_SIDE_FILES = ("config.json", "generation_config.json")


def model_kind(model_dir: Path) -> str:
    """ "causal-lm", "rerank" (a cross-encoder: edgeopt.sources.model_spec says which ones) or "embedding", from
    config.json (and a sentence-transformers modules.json)."""
    from edgeopt.sources.architectures import RERANK_KIND
    from edgeopt.sources.model_spec import load_model_spec

    config = json.loads((model_dir / "config.json").read_text())
    archs = config.get("architectures") or []
    if any(a.endswith("ForCausalLM") for a in archs):
        return "causal-lm"
    if any(a.endswith("ForSequenceClassification") for a in archs):
        load_model_spec(str(model_dir))  # refuses the classifiers that are not cross-encoders it can serve
        return RERANK_KIND
    if config.get("model_type") in ENCODER_MODEL_TYPES or (model_dir / "modules.json").is_file():
        return "embedding"
    raise UnsupportedArchitectureError(
        f"{model_dir} (architectures {archs}, model_type {config.get('model_type')!r}) is neither a causal LM "
        "nor an encoder edgeopt can export to ONNX",
        f"ONNX export supports *ForCausalLM checkpoints and encoders of type {', '.join(ENCODER_MODEL_TYPES)}")


def optimum_export(model_dir: Path, out_dir: Path, task: str, threads: int = 2) -> Path:
    """Run optimum's exporter; returns the path of model.onnx in out_dir."""
    try:
        import torch
        from optimum.exporters.onnx import main_export
    except ImportError as exc:
        raise MissingDependencyError(f"ONNX export needs {exc.name}", "pip install 'edgeopt[optimize]'") from exc
    from edgeopt.sources.model_spec import reference_attention

    torch.set_num_threads(threads)
    eager = reference_attention(model_dir) if task == DECODER_TASK else {}
    try:
        # Validation is ours (KL on logits, below); optimum's would run the model a second time. Its post-processing
        # of a decoder only de-duplicates a tied head, by serializing the whole graph: past 2 GB (a 1B model in
        # fp32) protobuf refuses that, so share_tied_embedding (which never does) de-duplicates instead.
        no_post_process = task == DECODER_TASK
        with traceable_longrope(json.loads((model_dir / "config.json").read_text())):
            if eager:  # optimum loads with SDPA, which drops attention soft-capping: trace an eager model
                _export_eager(model_dir, out_dir, task, no_post_process)
            else:
                main_export(str(model_dir), output=str(out_dir), task=task, do_validation=False,
                            library_name="transformers", local_files_only=True,
                            no_post_process=no_post_process)
    except Exception as exc:  # optimum raises ValueError/KeyError/RuntimeError for unsupported models
        raise ExportError(f"optimum could not export {model_dir} for {task}: {exc.__class__.__name__}: {exc}",
                          "check that optimum-onnx supports this architecture (optimum-cli export onnx --help)") from exc
    model = out_dir / "model.onnx"
    if not model.is_file():
        raise ExportError(f"optimum wrote no model.onnx into {out_dir} (found {sorted(p.name for p in out_dir.iterdir())})",
                          "report this model to edgeopt")
    if task == DECODER_TASK:
        # The traced torch model sits in reference cycles: collected now, its float32 copy (4 bytes a parameter)
        # is not held beside the graph share_tied_embedding reads.
        gc.collect()
        share_tied_embedding(model)
    return model


def _export_eager(model_dir: Path, out_dir: Path, task: str, no_post_process: bool) -> None:
    from optimum.exporters.onnx import onnx_export_from_model

    from edgeopt.measuring.torch_metrics import load_causal_lm  # loads a soft-capped model with eager attention

    onnx_export_from_model(load_causal_lm(model_dir), str(out_dir), task=task, do_validation=False,
                           no_post_process=no_post_process)


def copy_model_files(src_dir: Path, dst_dir: Path, with_onnx: bool) -> None:
    """config.json etc. (ORTModelForCausalLM needs them beside the graph), plus the graph if asked."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    for path in src_dir.iterdir():
        is_onnx = path.name.startswith("model.onnx")
        if (is_onnx and with_onnx) or path.name in MODEL_SIDE_FILES:
            shutil.copy2(path, dst_dir / path.name)


def torch_logits(model_dir: Path, token_ids: list[int]) -> Any:
    import torch

    from edgeopt.measuring.torch_metrics import load_causal_lm

    model = load_causal_lm(model_dir)
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0].float().numpy()


def validate_decoder(model_dir: Path, onnx_path: Path, threads: int = 2) -> dict[str, Any]:
    """KL(torch || onnx) on a probe sequence, run in two chunks so the KV-cache path is exercised too."""
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session

    decoder = DecoderSession(create_session(onnx_path, threads, ["CPUExecutionProvider"]))
    ids = probe_token_ids(decoder.vocab_size)
    reference = torch_logits(model_dir, ids)
    candidate = decoder.logits_for(ids, chunk=len(ids) // 2)
    kl = mean_kl(reference, candidate)
    if not kl <= FP32_KL_LIMIT:
        raise ExportError(f"the fp32 ONNX export of {model_dir} disagrees with torch: KL {kl:.3g} > {FP32_KL_LIMIT}",
                          "the export is broken for this architecture; report it (use --format gguf meanwhile)")
    return {"fp32_kl_vs_torch": kl, "fp32_top1_vs_torch": top1_agreement(reference, candidate),
            "kv_elements_per_token": decoder.layout.kv_elements_per_token,
            "kv_bytes_per_token": decoder.layout.kv_bytes_per_token, "num_layers": decoder.layout.num_layers,
            "kv_heads": decoder.layout.kv_heads, "head_dim": decoder.layout.head_dim}


def compare_with_fp32(fp32_path: Path, quant_path: Path, tokenizer_json: Path, threads: int = 2) -> dict[str, float]:
    """Cheap fidelity figures of a quantized decoder against the fp32 graph (the full evaluation is separate)."""
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session

    ref = DecoderSession(create_session(fp32_path, threads, ["CPUExecutionProvider"]))
    cand = DecoderSession(create_session(quant_path, threads, ["CPUExecutionProvider"]))
    ids = probe_text_ids(tokenizer_json, ref.vocab_size)
    a, b = ref.logits_for(ids), cand.logits_for(ids)
    return {"probe_kl_vs_fp32": mean_kl(a, b), "probe_top1_vs_fp32": top1_agreement(a, b)}
