"""llama.cpp's quantization log is summarized, not printed: a successful ``edgeopt optimize`` of a model
whose rows need fallbacks (576 columns, SmolLM2's width: not a multiple of the k-quants' 256) prints a
screenful at most, the manifest records the per-tensor type mix and why tensors fell back, and
``--verbose`` shows llama.cpp's own lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgeopt.demo.corpus import stdlib_text
from edgeopt.exporters.gguf.quant_report import summary_lines, tensor_role
from tests.fixtures.tiny_models import build_tiny_model

MAX_LINES = 30
REASON = "rows of 576 not divisible by 256"


@pytest.fixture(scope="module")
def wide_rows_model(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """SmolLM2-135M's layer shape (hidden 576, 9 query / 3 KV heads of 64), two layers, tiny vocabulary."""
    return build_tiny_model(tmp_path_factory.mktemp("wide-rows"), "llama-gqa", tiny_tokenizer_dir, hidden_size=576,
                            num_layers=2, intermediate_size=1536,
                            config_overrides=dict(num_attention_heads=9, num_key_value_heads=3))


def optimize(model: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EDGEOPT_CACHE": str(cache), "EDGEOPT_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "optimize", str(model), "--target", "raspberry-pi",
                           "--format", "gguf", "--quant", "Q4_K_M", "-o", str(out), *extra],
                          capture_output=True, text=True, env=env, timeout=600)


def test_optimize_summarizes_fallbacks_in_a_screenful(wide_rows_model: Path, tmp_path: Path):
    eval_text = tmp_path / "eval.txt"  # a short text: evaluating on generated text would take a minute
    eval_text.write_text(stdlib_text(1500))
    # random weights: 4 bits cost more than the quality floor allows, which is beside the point here
    proc = optimize(wide_rows_model, tmp_path / "bundle", tmp_path / "cache", "--eval-data", str(eval_text),
                    "--accept-quality-loss")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    assert len(lines) <= MAX_LINES, "\n".join(lines)
    assert not any("ncols" in line or "falling back" in line for line in lines)
    assert any(line.startswith("quality: ") for line in lines)  # evaluated too: a whole, successful optimize
    assert any(line.startswith("quantize: ") and REASON in line and "Q4_K -> Q5_0" in line for line in lines)

    export = json.loads((tmp_path / "bundle" / "manifest.json").read_text())["export"]
    mix = export["tensor_types"]
    assert mix["attn_q.weight"] == {"Q5_0": 2}  # 576-wide rows: Q4_K cannot hold them
    assert mix["attn_norm.weight"] == {"F32": 2}
    assert set(mix) >= {"token_embd.weight", "output.weight", "ffn_down.weight", "ffn_up.weight"}
    fallbacks = export["quantize_fallbacks"]
    assert {f["reason"] for f in fallbacks} == {REASON}
    # Q4_K_M asks for no Q5_0: every Q5_0 tensor in the file is a fallback the log reported
    assert sum(f["tensors"] for f in fallbacks if f["used"] == "Q5_0") == sum(
        n for types in mix.values() for t, n in types.items() if t == "Q5_0")


def test_verbose_shows_llama_cpp_log(wide_rows_model: Path, tmp_path: Path):
    proc = optimize(wide_rows_model, tmp_path / "bundle", tmp_path / "cache", "--no-eval", "--verbose")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    llama_lines = [line for line in proc.stderr.splitlines() if line.startswith("llama.cpp: ")]
    assert any("falling back" in line or "not divisible by 256" in line for line in llama_lines), proc.stderr
    assert len(llama_lines) > MAX_LINES  # the full log: far more than the summary


def test_summary_lines_group_fallbacks_by_reason():
    details = {"tensor_types": {"attn_q.weight": {"Q5_0": 30}, "ffn_down.weight": {"Q4_K": 16, "Q6_K": 14},
                                "attn_norm.weight": {"F32": 30}},
               "quantize_fallbacks": [{"wanted": "Q4_K", "used": "Q5_0", "reason": REASON, "tensors": 30}]}
    assert summary_lines(details) == [
        "quantize: 90 tensors: 30 Q5_0, 30 F32, 16 Q4_K, 14 Q6_K",
        f"quantize: 30 tensors fell back ({REASON}): 30 Q4_K -> Q5_0",
    ]
    assert summary_lines({"gguf_bytes": 1}) == []  # an unquantized export says nothing more


def test_tensor_role_drops_the_block_number():
    assert tensor_role("blk.12.attn_q.weight") == "attn_q.weight"
    assert tensor_role("token_embd.weight") == "token_embd.weight"
