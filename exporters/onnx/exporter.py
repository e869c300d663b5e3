"""``ONNXExporter``: HF checkpoint -> fp32 ONNX (optimum, checked against torch) -> quantized ONNX.

The bundle gets ``model/model.onnx`` (plus ``model.onnx_data`` for models over 2 GB) and the
checkpoint's config.json beside it, which is the layout optimum's ORTModelFor* classes load, so a
bundle is also usable outside edgeopt. Encoders also get ``model/pooling.json``, cross-encoders
``model/rerank.json`` (exporters/onnx/rerank.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError
from edgeopt.exporters import Exporter, ExportResult
from edgeopt.progress import stage
from edgeopt.exporters.onnx import quantize as q
from edgeopt.exporters.onnx.export import (DECODER_TASK, ENCODER_TASK, compare_with_fp32, copy_model_files, model_kind,
                                   optimum_export, validate_decoder)
from edgeopt.exporters.onnx.rerank import RERANK_TASK, quantized_scores, validate_rerank

MODEL_SUBDIR = "model"


class ONNXExporter(Exporter):
    format = "onnx"
    # 2: INT4 decoders are fused (RotaryEmbedding, SkipSimplifiedLayerNorm) first
    # 3: --quant int8 is weight-only (MatMulNBits) for decoders, fused first like INT4
    # 4: INT4 keeps v/o/down projections and an untied lm_head in INT8 (--int4-mix sensitive-int8)
    # 5: INT4's blocks searched for, weighted by calibration text (--int4-algorithm weighted)
    # 6: a decoder's token embedding in 8 bits (GatherBlockQuantized) with weight-only INT8 and INT4
    # 7: --size chooses the token table's width too (4 or 8 bits) and writes 8-bit blocks of 64
    # 11: --size with --calibration-data rounds its 4-bit blocks by GPTQ unless --int4-algorithm says otherwise
    # 12: --size moves the norms' channel scales into the weights that read them (exporters/onnx/smooth_scales.py)
    cache_version = 12

    def calibration_refusal(self, quant: str) -> str | None:
        if quant in ("int8-static", "int4"):
            return None
        return (f"ONNX {quant} is quantized without calibration text (int8-static calibrates activations, int4 "
                "weighs its blocks by them)")

    def check_options(self, quant: str, options: dict[str, Any]) -> None:
        for key, flag, valid in (("int8_method", "--int8-method", q.INT8_METHODS),
                                 ("int4_mix", "--int4-mix", q.INT4_MIXES),
                                 ("int4_algorithm", "--int4-algorithm", q.INT4_ALGORITHMS),
                                 ("calibration_method", "--calibration-method", q.CALIBRATION_METHODS)):
            if key in options and options[key] not in valid:
                raise ConfigError(f"unknown {flag} {options[key]!r}", f"valid: {', '.join(valid)}")
        algorithm = int4_algorithm(options)
        if quant == "int4" and algorithm not in CALIBRATED_ALGORITHMS and ("calibration_data" in options
                                                                  or options.get("self_calibration") is False):
            flag = "--calibration-data" if "calibration_data" in options else "--no-self-calibration"
            raise ConfigError(f"{flag} changes nothing with --int4-algorithm {algorithm}: only the weighted search "
                              "and GPTQ use calibration text", f"drop {flag}, or drop --int4-algorithm")
        if options.get("int4_smoothing") is not None:
            _check_smoothing(options)
        if options.get("mix_size_bytes") is not None:
            _check_sized(options)
        elif algorithm == "gptq":
            raise ConfigError("--int4-algorithm gptq rounds the blocks --size chooses widths for; without --size it "
                              "is not available", "add --size (e.g. the size of the GGUF Q4_K_M file), or use "
                              "--int4-algorithm weighted")
        if quant == "int8-static" and options.get("self_calibration") is False:
            raise ConfigError("--no-self-calibration changes nothing with --quant int8-static: its activation ranges "
                              "come from --calibration-data or a built-in English text, never from generated text",
                              "drop --no-self-calibration")

    def export(self, model_dir: Path, out_dir: Path, quant: str, options: dict[str, Any]) -> ExportResult:
        if quant not in self.quants:
            raise ConfigError(f"unknown ONNX quant {quant!r}", f"valid: {', '.join(self.quants)}")
        self.check_options(quant, options)  # before the (slow) export
        model_dir, out_dir = Path(model_dir), Path(out_dir)
        kind = model_kind(model_dir)
        final_dir = out_dir / MODEL_SUBDIR
        with tempfile.TemporaryDirectory(prefix="edgeopt-onnx-") as tmp:
            fp32_dir = Path(tmp) / "fp32"
            task = {"causal-lm": DECODER_TASK, "rerank": RERANK_TASK}.get(kind, ENCODER_TASK)
            with stage("onnx: export in float32 (optimum)"):
                fp32 = optimum_export(model_dir, fp32_dir, task)
            with stage("onnx: check against torch"):
                if kind == "causal-lm":
                    details = validate_decoder(model_dir, fp32)
                elif kind == "rerank":
                    details = validate_rerank(model_dir, fp32, final_dir)
                else:
                    details = _encoder_checks(model_dir, fp32, final_dir)
            copy_model_files(fp32_dir, final_dir, with_onnx=quant == "fp32")
            if quant != "fp32":
                source = fp32
                if kind == "causal-lm" and _uses_matmul_nbits(quant, kind, options):
                    with stage("onnx: fusions"):
                        source, details["fusion"] = _fused(fp32)
                with stage(f"onnx: quantization to {quant}"):
                    details["quantization"] = _quantize(source, fp32, final_dir / "model.onnx", quant, kind,
                                                        model_dir, options)
                with stage("onnx: check against the export"):
                    details.update(_quant_fidelity(kind, model_dir, fp32, final_dir / "model.onnx", final_dir))
        details.update(kind=kind, task=task, onnx_bytes=_onnx_bytes(final_dir))
        return ExportResult(model_file=f"{MODEL_SUBDIR}/model.onnx", quant=quant, runtime=self.runtime,
                            details=details)


CALIBRATED_ALGORITHMS = ("weighted", "gptq")  # the --int4-algorithm values that read calibration text


def int4_algorithm(options: dict[str, Any]) -> str:
    """How 4-bit blocks are rounded: --int4-algorithm, else GPTQ (exporters/onnx/int4/gptq.py) for --size with
    --calibration-data, else the weighted search.

    GPTQ compensates each rounding error through the inputs' x x^T, so it is only as good as the text that
    measured it: on SmolLM2-135M at GGUF Q4_K_M's size, x x^T of real text (the calibration half of the English
    text) took the held-out KL from 0.055 (weighted) to 0.032 at the same widths, while x x^T of 4096 tokens the
    model wrote itself made the down projections worse on real text than nearest rounding
    (docs/onnx-quantization-and-quality-floor.md)."""
    if options.get("int4_algorithm"):
        return options["int4_algorithm"]
    sized_on_text = options.get("mix_size_bytes") is not None and options.get("calibration_data") is not None
    return "gptq" if sized_on_text else "weighted"


def int4_smoothing(options: dict[str, Any]) -> float:
    """The alpha of the norm scales ``--size`` moves into its weights (exporters/onnx/smooth_scales.py): the
    exporter option ``int4_smoothing``, else the default; 0 turns it off."""
    from edgeopt.exporters.onnx.smooth_scales import ALPHA

    value = options.get("int4_smoothing")
    return ALPHA if value is None else float(value)


def _check_smoothing(options: dict[str, Any]) -> None:
    value = options["int4_smoothing"]
    if options.get("mix_size_bytes") is None:
        raise ConfigError(f"int4_smoothing {value!r} scales the weights --size rounds; without --size nothing reads it",
                          "add --size, or drop int4_smoothing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(f"int4_smoothing {value!r} is not a number from 0 (off) to below 1",
                          "give e.g. 0.4 (the default), or 0 to keep the norms as they are")


def _check_sized(options: dict[str, Any]) -> None:
    """``--size`` chooses each MatMul's width itself, from blocks rounded by GPTQ or the weighted search and
    measured on text."""
    from edgeopt.exporters.onnx.int4.costs import ALGORITHMS

    for key, flag, allowed in (("int4_mix", "--int4-mix", (None, "weighted")),
                               ("int4_algorithm", "--int4-algorithm", (None, *ALGORITHMS))):
        if options.get(key) not in allowed:
            raise ConfigError(f"--size chooses which MatMuls keep 8 bits itself (weighted 4-bit blocks elsewhere); "
                              f"it cannot be combined with {flag} {options[key]}", f"drop {flag}, or drop --size")
    if options.get("self_calibration") is False and options.get("calibration_data") is None:
        raise ConfigError("--size measures what each MatMul's width costs on calibration text, and there is none: "
                          "no --calibration-data and self-calibration is off",
                          "pass --calibration-data FILE (text like what the model will see), or drop --no-self-calibration")


def _encoder_checks(model_dir: Path, fp32: Path, final_dir: Path) -> dict[str, Any]:
    from edgeopt.exporters.onnx.encoder import validate_encoder
    from edgeopt.encoders.pooling import read_sentence_transformers_pooling, save_pooling

    pooling = read_sentence_transformers_pooling(model_dir)
    final_dir.mkdir(parents=True, exist_ok=True)
    save_pooling(pooling, final_dir)
    return {"pooling": pooling.to_dict(), **validate_encoder(model_dir, fp32, pooling)}


def int8_method(kind: str, options: dict[str, Any]) -> str:
    """Decoders: weight-only (see exporters/onnx/quantize.py for why); encoders keep dynamic INT8,
    whose per-tensor activation scale their cosine checks accept (tests/bench/int8_settings_minilm.py)."""
    return options.get("int8_method") or ("weight-only" if kind == "causal-lm" else "dynamic")


def _uses_matmul_nbits(quant: str, kind: str, options: dict[str, Any]) -> bool:
    return quant == "int4" or (quant == "int8" and int8_method(kind, options) == "weight-only")


def _fused(fp32: Path) -> tuple[Path, dict[str, Any]]:
    """The graph INT4 quantization starts from: the fused one when it validates, else the export."""
    from edgeopt.exporters.onnx.fusion import fuse_decoder

    fused = fp32.with_name("model.fused.onnx")
    info = fuse_decoder(fp32, fused)
    return (fused if info["applied"] else fp32), info


def _quant_fidelity(kind: str, model_dir: Path, fp32: Path, quantized: Path, final_dir: Path) -> dict[str, float]:
    if kind == "causal-lm":
        return compare_with_fp32(fp32, quantized, model_dir / "tokenizer.json")
    if kind == "rerank":
        return quantized_scores(model_dir, fp32, quantized, final_dir)
    from edgeopt.exporters.onnx.encoder import quantized_cosine
    from edgeopt.encoders.pooling import load_pooling

    return quantized_cosine(model_dir, fp32, quantized, load_pooling(final_dir))


def _quantize(source: Path, fp32: Path, dst: Path, quant: str, kind: str, model_dir: Path,
              options: dict[str, Any]) -> dict[str, Any]:
    """Quantize ``source`` (the fused graph where fusion applied, else ``fp32``, the export) into ``dst``."""
    preset = q.isa_preset(options.get("cpu_isa"))
    keep_fp = list(options.get("keep_fp") or [])
    if quant == "int8" and int8_method(kind, options) == "weight-only":
        info = q.quantize_weight_only_int8(source, dst, preset, keep_fp, table=kind == "causal-lm")
    elif quant == "int8":
        info = q.quantize_dynamic_int8(source, dst, preset, keep_fp)
    elif quant == "int8-static":
        info = _static(source, dst, kind, model_dir, preset, keep_fp, options)
    else:
        info = _int4(source, fp32, dst, kind, model_dir, preset, keep_fp, options)
    q.check_quantized(dst, quant)
    return info


def _int4(source: Path, fp32: Path, dst: Path, kind: str, model_dir: Path, preset: q.IsaPreset, keep_fp: list[str],
          options: dict[str, Any]) -> dict[str, Any]:
    """INT4; the weighted search first measures a decoder's activations on calibration text (or generated text,
    sampled from the ``fp32`` export)."""
    from edgeopt.exporters.onnx.int4.calibration import int4_calibration

    algorithm = int4_algorithm(options)
    calibration = None
    if algorithm in CALIBRATED_ALGORITHMS and kind == "causal-lm":
        calibration = int4_calibration(model_dir, fp32, options, grams=algorithm == "gptq")
    elif algorithm == "weighted" and "calibration_data" in options:
        raise ConfigError(f"--calibration-data is not used for an encoder's INT4 ({kind})",
                          "drop --calibration-data: an encoder's blocks are weighted by their own weights")
    if options.get("mix_size_bytes") is not None:
        from edgeopt.exporters.onnx.int4.sized import quantize_int4_sized

        if calibration is None:
            raise ConfigError(f"--size for ONNX INT4 chooses a decoder's MatMul widths; this model is a {kind}",
                              "drop --size and pick --quant int4 or int8")
        info = quantize_int4_sized(source, dst, model_dir, int(options["mix_size_bytes"]), preset, keep_fp,
                                   int(options.get("int4_block_size") or 32), options.get("int4_accuracy_level"),
                                   calibration.energy, calibration.chunks, algorithm=algorithm,
                                   smoothing=int4_smoothing(options))
        return {**info, "calibration": calibration.facts}
    info = q.quantize_int4(source, dst, preset, keep_fp, block_size=int(options.get("int4_block_size") or 32),
                           accuracy_level=options.get("int4_accuracy_level"),
                           mix=options.get("int4_mix") or "sensitive-int8", algorithm=algorithm,
                           energy=calibration.energy if calibration else None, table=kind == "causal-lm")
    return {**info, "calibration": calibration.facts} if calibration else info


def _static(fp32: Path, dst: Path, kind: str, model_dir: Path, preset: q.IsaPreset, keep_fp: list[str],
            options: dict[str, Any]) -> dict[str, Any]:
    from edgeopt.exporters.onnx import calibration as cal

    method = options.get("calibration_method") or "minmax"  # a known one (check_options)
    data, tokenizer_json = options.get("calibration_data"), model_dir / "tokenizer.json"
    if kind == "causal-lm":
        reader = cal.decoder_reader(fp32, cal.read_calibration_ids(data, tokenizer_json))
    else:
        from edgeopt.exporters.onnx.encoder import encoder_input_limit

        samples = cal.read_encoder_calibration(data, tokenizer_json, encoder_input_limit(model_dir))
        reader = cal.encoder_reader(fp32, samples)
    return q.quantize_static_int8(fp32, dst, preset, keep_fp, reader, method)


def _onnx_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for p in model_dir.iterdir() if p.name.startswith("model.onnx"))
