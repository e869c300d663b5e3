"""The quality floor: a bundle whose evaluation says it is broken is refused unless the loss is accepted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgeopt import backends
from edgeopt.cli.app import main
from edgeopt.errors import ConfigError
from edgeopt.optimize.pipeline import OptimizeOptions, resolve
from edgeopt.evaluation.quality_floor import judge, kl_ceiling, nominal_bits, remedies

# Figures of issue 35 (SmolLM2-135M-Instruct, edgeopt's evaluation against the original checkpoint).
GGUF_Q8_0 = {"kl_divergence": 0.0058, "top1_agreement": 0.949}
GGUF_Q4_K_M = {"kl_divergence": 0.080, "top1_agreement": 0.872}
ONNX_DYNAMIC_INT8 = {"kl_divergence": 0.63, "top1_agreement": 0.613}


@pytest.mark.parametrize("fmt,quant,bits", [("gguf", "Q4_K_M", 4), ("gguf", "IQ2_M", 2), ("gguf", "Q8_0", 8),
                                            ("onnx", "int8-static", 8), ("onnx", "int4", 4), ("gguf", "F16", 16),
                                            ("torch", "bf16", 16), ("onnx", "fp32", 32), ("gguf", "MIX", None),
                                            ("onnx", "custom", None)])
def test_the_bit_width_is_the_formats_quant_tables(fmt: str, quant: str, bits: int | None) -> None:
    assert nominal_bits(fmt, quant) == bits


def test_the_gguf_table_declares_the_width_each_llama_cpp_name_states() -> None:
    """The widths once read from the names (the floor's behaviour is unchanged for every built-in quant)."""
    for quant in backends.backend("gguf").quants.quants:
        stated = re.search(r"\d+", quant.name)
        assert quant.weight_bits == (int(stated.group()) if stated else None), quant


def test_kl_ceilings_are_five_times_the_anchor_of_the_same_width() -> None:
    assert kl_ceiling("gguf", "Q8_0") == pytest.approx(5 * 0.0058)
    assert kl_ceiling("onnx", "int4") == pytest.approx(5 * 0.080)
    assert kl_ceiling("gguf", "Q4_K_M") < kl_ceiling("gguf", "Q3_K_M") < kl_ceiling("gguf", "Q2_K")
    assert kl_ceiling("gguf", "F16") is None and kl_ceiling("onnx", "fp32") is None
    assert kl_ceiling("onnx", "custom") is None


def test_llama_cpp_quantization_passes_and_the_dynamic_int8_of_issue_35_does_not() -> None:
    assert judge(GGUF_Q8_0, "gguf", "Q8_0").passed and judge(GGUF_Q4_K_M, "gguf", "Q4_K_M").passed
    verdict = judge(ONNX_DYNAMIC_INT8, "onnx", "int8")
    assert not verdict.passed and len(verdict.failures) == 2  # top-1 under 80% and KL over 5x Q8_0's
    assert judge({"perplexity": 20.0}, "onnx", "int8") is None  # no original to compare with: nothing to judge


def test_what_loses_less_is_the_quant_tables() -> None:
    assert remedies("onnx", "int8", pruned=False) == ["use --int8-method weight-only (blocks of 32) instead of dynamic"]
    assert remedies("gguf", "Q3_K_M", pruned=False) == ["use a quant with more bits (e.g. Q5_K_M, Q6_K, Q8_0)"]
    assert remedies("gguf", "MIX", pruned=False) == remedies("torch", "fp16", pruned=False) == [
        "use a higher-precision quant"]


def test_accepting_without_an_evaluation_is_refused(tiny_llama_dir: Path) -> None:
    with pytest.raises(ConfigError, match="--accept-quality-loss with --no-eval"):
        resolve(OptimizeOptions(model=str(tiny_llama_dir), format="gguf", quant="Q8_0", evaluate=False,
                                accept_quality_loss=True, dry_run=True))


def run_main(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """The real entry point, with its error formatting: (exit code, stderr + stdout)."""
    monkeypatch.setattr("sys.argv", ["edgeopt", *args])
    with pytest.raises(SystemExit) as exc:
        main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.err + out.out


def test_a_bundle_under_the_floor_is_refused_then_written_with_the_flag(smollm2_checkpoint: Path,
                                                                         english_texts: tuple[Path, Path],
                                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """SmolLM2-135M-Instruct at Q2_K really is broken: llama.cpp falls back to Q4_0 for the 576-wide rows and
    keeps Q2_K/Q3_K elsewhere, and the model then agrees with its original on about two tokens in three."""
    text = tmp_path / "eval.txt"
    text.write_text(english_texts[1].read_text(encoding="utf-8")[:2500], encoding="utf-8")
    # A short calibration text for Q2_K's importance matrix: the model writing its own (the default) takes a
    # minute more, and the verdict is the same (top-1 agreement 72.5% with this text, 71.8% with its own).
    calibration = tmp_path / "calibration.txt"
    calibration.write_text(english_texts[0].read_text(encoding="utf-8")[:8000], encoding="utf-8")
    out = tmp_path / "bundle"
    args = ["optimize", str(smollm2_checkpoint), "--format", "gguf", "--quant", "Q2_K", "-o", str(out),
            "--eval-data", str(text), "--calibration-data", str(calibration)]
    code, output = run_main(args, capsys, monkeypatch)
    assert code != 0
    assert "under the quality floor" in output and "top-1 agreement" in output and "KL" in output
    assert "--accept-quality-loss" in output and "Q8_0" in output  # the options that help
    assert not out.exists() and not list(tmp_path.glob(".bundle*"))  # nothing published, no staging left

    code, output = run_main([*args, "--accept-quality-loss"], capsys, monkeypatch)
    assert code == 0, output
    assert "UNDER the floor" in output
    floor = json.loads((out / "manifest.json").read_text())["metrics"]["quality_floor"]
    assert floor["accepted_below_floor"] is True and not floor["passed"]
    assert floor["min_top1_agreement"] == 0.80 and floor["failures"][0].startswith("top-1 agreement")
