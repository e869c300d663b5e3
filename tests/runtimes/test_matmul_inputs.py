"""Reading each weight's matmul input out of llama.cpp's graph (runtimes/llama_cpp/matmul_inputs.py): every weight
once per chunk with a row per token, inputs shared by several weights (q/k/v, gate/up) handed over identically,
and an error raised inside the callback surfaces after the decode instead of vanishing in C."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from edgeopt.exporters.gguf.writer import convert_checkpoint
from edgeopt.runtimes.llama_cpp.matmul_inputs import MatmulInputTap, run_chunks, weight_name


@pytest.fixture(scope="module")
def f16(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tap") / "f16.gguf"
    convert_checkpoint(tiny_llama_dir, path, "F16")
    return path


def test_every_weight_once_per_chunk_and_shared_inputs_alike(f16: Path):
    seen: dict[str, list[np.ndarray]] = defaultdict(list)
    tap = MatmulInputTap(lambda name: name.startswith("blk."), lambda name, rows: seen[name].append(rows.copy()))
    chunks = [list(range(1, 41)), list(range(50, 82))]
    run_chunks(f16, chunks, tap, "test")
    assert {name.split(".", 2)[2] for name in seen} == {"attn_q.weight", "attn_k.weight", "attn_v.weight",
                                                         "attn_output.weight", "ffn_gate.weight", "ffn_up.weight",
                                                         "ffn_down.weight"}
    for rows in seen.values():
        assert [r.shape[0] for r in rows] == [40, 32] and all(np.isfinite(r).all() for r in rows)
    for chunk in range(2):
        np.testing.assert_array_equal(seen["blk.0.attn_k.weight"][chunk], seen["blk.0.attn_q.weight"][chunk])
        np.testing.assert_array_equal(seen["blk.1.ffn_up.weight"][chunk], seen["blk.1.ffn_gate.weight"][chunk])
        assert not np.array_equal(seen["blk.0.attn_q.weight"][chunk], seen["blk.1.attn_q.weight"][chunk])


def test_an_error_in_the_callback_is_raised_after_the_decode(f16: Path):
    def visit(_name: str, _rows: np.ndarray) -> None:
        raise ValueError("broken visitor")

    with pytest.raises(ValueError, match="broken visitor"):
        run_chunks(f16, [list(range(1, 33))], MatmulInputTap(lambda name: True, visit), "test")


def test_scheduler_copies_are_named_by_their_weight():
    assert weight_name(b"CUDA0#blk.0.attn_k.weight#0") == "blk.0.attn_k.weight"
    assert weight_name(b"blk.3.ffn_down.weight") == "blk.3.ffn_down.weight"
