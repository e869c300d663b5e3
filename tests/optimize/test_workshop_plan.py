"""The optimize's own plan (edgeopt.planning.workshop): stated before any work, refused with the fix when a step
cannot fit the memory the workstation has free, and held to a measurement: the real SmolLM2-135M-Instruct's
default optimize (self-written calibration text, importance matrix, Q4_K_M, evaluation) peaks at or below the
planned resident memory, and the plan is at most 1.2x that peak (the 1B shape: tests/bench/bench_optimize_scale.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.optimize.options import OptimizeOptions, resolve
from edgeopt.planning import WorkshopPlan
from edgeopt.profiles.workstation import Workstation

GIB = 2**30


def _plan(model: Path, tmp_path: Path, **flags: object) -> WorkshopPlan:
    opts = OptimizeOptions(model=str(model), target="jetson-orin-nano-8gb", format="gguf", quant="Q4_K_M",
                           output=tmp_path / "bundle", dry_run=True, **flags)
    workshop = resolve(opts).workshop
    assert workshop is not None
    return workshop


def test_the_plan_names_each_step_the_flags_ask_for(smollm2_checkpoint: Path, tmp_path: Path) -> None:
    defaults = [step.name for step in _plan(smollm2_checkpoint, tmp_path).steps]
    assert defaults == ["conversion to GGUF F16", "calibration text and matrix", "quantization to Q4_K_M",
                        "evaluation"]
    text = tmp_path / "calibration.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 400)
    given = _plan(smollm2_checkpoint, tmp_path, export_options={"calibration_data": str(text)})
    assert [step.name for step in given.steps] == ["conversion to GGUF F16", "importance matrix",
                                                   "quantization to Q4_K_M", "evaluation"]
    bare = _plan(smollm2_checkpoint, tmp_path, evaluate=False, export_options={"self_calibration": False})
    assert [step.name for step in bare.steps] == ["conversion to GGUF F16", "quantization to Q4_K_M"]
    assert bare.peak_resident_bytes < _plan(smollm2_checkpoint, tmp_path).peak_resident_bytes
    assert all(step.seconds > 0 and step.resident_bytes >= step.anonymous_bytes > 0 for step in bare.steps)


def test_the_size_budgeted_mix_plans_its_measurements(smollm2_checkpoint: Path, tmp_path: Path) -> None:
    """--size measures every tensor's errors and every group's KL before the mix is quantized: a step of its own,
    whose memory is the scoring's (the unquantized distributions kept, a chunk's logits while one is scored)."""
    opts = OptimizeOptions(model=str(smollm2_checkpoint), target="jetson-orin-nano-8gb", format="gguf", quant="MIX",
                           output=tmp_path / "bundle", dry_run=True)
    mix = resolve(opts).workshop
    assert mix is not None and not mix.not_planned
    names = [step.name for step in mix.steps]
    assert names == ["conversion to GGUF F16", "calibration text and matrix", "measuring the mix",
                     "quantization to MIX", "evaluation"]
    measuring = mix.steps[2]
    plain = _plan(smollm2_checkpoint, tmp_path)
    assert measuring.seconds > 2 * plain.steps[2].seconds  # quantizations and forward passes: more than one quantization
    # the kept distributions and a chunk's logits beside the mapped unquantized file: SmolLM2's 49k vocabulary
    assert measuring.anonymous_bytes > plain.steps[1].anonymous_bytes


def test_a_workstation_without_the_memory_is_refused_before_any_work(smollm2_checkpoint: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import edgeopt.profiles.workstation as workstation

    monkeypatch.setattr(workstation, "measure_workstation",
                        lambda seconds=0.1: Workstation(available_bytes=100 * 2**20, gflops=10.0, cores=2, cpu="test"))
    opts = OptimizeOptions(model=str(smollm2_checkpoint), target="jetson-orin-nano-8gb", format="gguf",
                           quant="Q4_K_M", output=tmp_path / "bundle")
    with pytest.raises(ConfigError) as refused:
        resolve(opts)
    message = str(refused.value)
    assert "0.1 GiB free" in message and "evaluation" in message and "--no-eval" in message
    assert not (tmp_path / "bundle").exists()
    opts.dry_run = True  # a dry run shows the plan whatever the machine holds
    assert resolve(opts).workshop is not None


def _run_measuring_peak(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """(the child's peak resident set in bytes: its kernel high-water mark, VmHWM, read every 20 ms until it
    exits, what ``/usr/bin/time -f %M`` reports for a process started from a small shell; its output). Not wait4's
    ru_maxrss: Linux carries the forking process's high-water mark across exec into it, and pytest after a few
    hundred tests holds more than the child does (CI read 1.85 GiB for a 0.6 GiB run)."""
    from tests.bench.process_memory import TreeMemorySampler

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    with TreeMemorySampler(proc.pid, interval_s=0.02) as sampler:
        output, _ = proc.communicate()
    assert proc.returncode == 0, output[-3000:]
    return sampler.report().peak_process_hwm_bytes, output


def test_the_default_optimize_of_smollm2_peaks_within_its_plan(smollm2_checkpoint: Path, tmp_path: Path) -> None:
    planned = _plan(smollm2_checkpoint, tmp_path)
    env = {**os.environ, "EDGEOPT_CACHE": str(tmp_path / "cache"), "EDGEOPT_PROGRESS": "0"}
    peak, output = _run_measuring_peak(
        [sys.executable, "-m", "edgeopt.cli.app", "optimize", str(smollm2_checkpoint), "--target",
         "jetson-orin-nano-8gb", "--format", "gguf", "--quant", "Q4_K_M", "-o", str(tmp_path / "bundle")], env)
    assert "workshop: peak" in output  # stated before the work
    ratio = planned.peak_resident_bytes / peak
    assert 1.0 <= ratio <= 1.2, (f"planned {planned.peak_resident_bytes / GIB:.3f} GiB, measured {peak / GIB:.3f} GiB "
                                 f"({ratio:.2f}x)\n" + "\n".join(planned.lines()))
