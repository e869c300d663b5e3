"""CI's run of the optimize-at-scale benchmark (tests/bench/bench_optimize_scale.py) on its small shape: the real
Llama 3 vocabulary (128,256 tokens) on a tiny body, edgeopt and llama.cpp's own pipeline side by side, both
comparisons. Checks that the benchmark works end to end (both pipelines, every step timed, memory sampled), not
the ratios: those are measured at the 1B and 8B shapes on a quiet machine. Builds llama.cpp's tools once per
machine (scripts/build_llama_tools.sh, a few minutes)."""

from __future__ import annotations

import re
from pathlib import Path


def test_the_small_shape_runs_both_pipelines_side_by_side(tmp_path: Path):
    from tests.bench.bench_optimize_scale import main

    lines = main(["--shape", "small", "--words", "800", "--work", str(tmp_path)])
    text = "\n".join(lines)
    assert "## calibration text" in text and "## defaults" in text
    ratios = [line for line in lines if line.startswith("ratio")]
    assert len(ratios) == 2
    for line in ratios:
        wall, rss, anon = (float(v) for v in line.split()[1:])
        assert wall > 0 and rss > 0 and anon > 0
    steps = [line for line in lines if line.startswith("steps: llama.cpp")]
    assert "imatrix" in steps[0] and "quantize" in steps[0] and "kl-divergence" in steps[1]
    assert re.search(r"steps: edgeopt: optimize \d+s", text)
    assert len(re.findall(r"edgeopt's plan: peak \d+\.\d+ GiB, measured \d+\.\d+ GiB", text)) == 2


def test_the_small_shape_mix_runs_beside_the_plain_export(tmp_path: Path):
    """``--only mix``: the size-budgeted mix and the plain Q4_K_M of one checkpoint, each timed and sampled, the mix's
    plan stated beside its measured peak."""
    from tests.bench.bench_optimize_scale import main

    text = "\n".join(main(["--shape", "small", "--only", "mix", "--work", str(tmp_path)]))
    assert "## --quant MIX against the plain Q4_K_M export" in text
    wall, rss, anon = (float(v) for v in re.search(r"^ratio\s+(\S+)\s+(\S+)\s+(\S+)$", text, re.M).groups())
    assert wall > 1 and rss > 0 and anon > 0  # the mix measures before it quantizes: never quicker than the plain
    assert re.search(r"steps: MIX: optimize \d+s", text) and re.search(r"steps: Q4_K_M: optimize \d+s", text)
    assert re.search(r"edgeopt's plan: peak \d+\.\d+ GiB, measured \d+\.\d+ GiB", text)
