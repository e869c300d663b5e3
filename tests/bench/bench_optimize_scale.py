"""Benchmark: ``edgeopt optimize --format gguf --quant Q4_K_M`` at the sizes users ship, side by side with llama.cpp's
own pipeline built from the same llama.cpp (convert_hf_to_gguf.py to F16, llama-imatrix -c 512, llama-quantize, and
for the defaults llama-perplexity --kl-divergence), on a random-weight checkpoint of Llama 3.2 1B's or Llama 3.1
8B's shape with the real Llama 3 vocabulary (tests/bench/scale_checkpoints.py).

Each comparison prints wall time, peak RSS (``/usr/bin/time -f %M``'s measure: the largest process's
high-water mark) and peak anonymous memory (RssAnon of the process tree, sampled: memory-mapped model files are page
cache, for llama.cpp's tools as for edgeopt), and every step's share:

- ``calibration``: the same calibration text for both (the even sections of CPython's language reference,
  ``--words`` words), no evaluation (``--no-eval``);
- ``onnx`` (``--only onnx``): edgeopt's ONNX export alone (``--onnx-quant``, no evaluation) against its plan.
- ``mix`` (``--only mix``): ``--quant MIX`` (at Q4_K_M's size) against edgeopt's plain Q4_K_M of the same checkpoint,
  both with a matrix of self-written text and no evaluation.
- ``defaults``: edgeopt's defaults (an importance matrix from text the model writes itself, evaluation against the
  original on text it writes itself, ``--accept-quality-loss``: random weights fail the floor by design); llama.cpp
  given real text of the same token counts for its matrix and for ``llama-perplexity --kl-divergence``.

Run it alone (timed, heavy): ``.venv/bin/python tests/bench/bench_optimize_scale.py --shape 1b``; the 8B shape needs
~40 GB of free disk. CI runs the ``small`` shape (tests/bench/test_optimize_scale_bench.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GIB = 1 << 30


@dataclass
class Step:
    name: str
    seconds: float
    max_rss: int  # bytes: the step's largest process's high-water mark (what /usr/bin/time -f %M reports)
    peak_anon: int  # bytes: the largest sampled sum of RssAnon over the step's process tree


@dataclass
class Pipeline:
    name: str
    steps: list[Step] = field(default_factory=list)
    planned_peak: int = 0  # edgeopt's: the peak resident memory its plan states (0: llama.cpp states none)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def max_rss(self) -> int:
        return max(s.max_rss for s in self.steps)

    @property
    def peak_anon(self) -> int:
        return max(s.peak_anon for s in self.steps)

    def shares(self) -> str:
        return ", ".join(f"{s.name} {s.seconds:.0f}s ({s.seconds / self.seconds:.0%})" for s in self.steps)


def _tree_anon(pid: int) -> int:
    import psutil

    total = 0
    try:
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for process in processes:
        try:
            for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def timed(name: str, command: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> Step:
    """Run ``command``, sampling its tree's anonymous memory every 50 ms; its max RSS from the kernel (wait4)."""
    out = open(log, "ab") if log else subprocess.DEVNULL
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_anon(process.pid))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:] if log else ""
        raise RuntimeError(f"{name} failed ({process.returncode}): {' '.join(command)}\n{tail}")
    return Step(name, seconds, usage.ru_maxrss * 1024, peak[0])


def llama_cpp_pipeline(tools: Path, checkpoint: Path, work: Path, calibration: Path, evaluation: Path | None,
                       log: Path) -> Pipeline:
    from tests.exporters.reference_converter import reference_root

    root = reference_root()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(root)}
    f16, matrix, q4 = work / "llama-f16.gguf", work / "llama-imatrix.gguf", work / "llama-q4_k_m.gguf"
    threads = str(os.cpu_count() or 1)
    run = Pipeline("llama.cpp")
    run.steps.append(timed("convert", [sys.executable, str(root / "convert_hf_to_gguf.py"), str(checkpoint),
                                       "--outtype", "f16", "--outfile", str(f16)], env, log))
    run.steps.append(timed("imatrix", [str(tools / "llama-imatrix"), "-m", str(f16), "-f", str(calibration), "-c", "512",
                                       "-t", threads, "-o", str(matrix), "--no-ppl"], log=log))
    run.steps.append(timed("quantize", [str(tools / "llama-quantize"), "--imatrix", str(matrix), str(f16), str(q4),
                                        "Q4_K_M", threads], log=log))
    if evaluation is not None:
        base = work / "llama-base.kld"
        run.steps.append(timed("perplexity F16", [str(tools / "llama-perplexity"), "-m", str(f16), "-f", str(evaluation),
                                                  "-c", "512", "-t", threads, "--kl-divergence-base", str(base)], log=log))
        run.steps.append(timed("kl-divergence", [str(tools / "llama-perplexity"), "-m", str(q4), "-t", threads,
                                                 "--kl-divergence-base", str(base), "--kl-divergence"], log=log))
    for path in (f16, q4):
        path.unlink(missing_ok=True)
    return run


def edgeopt_pipeline(checkpoint: Path, work: Path, calibration: Path | None, log: Path, fmt: str = "gguf",
                     quant: str = "Q4_K_M", evaluate: bool = True) -> Pipeline:
    out = work / "edgeopt-bundle"
    command = [sys.executable, "-m", "edgeopt.cli.app", "optimize", str(checkpoint), "--format", fmt, "--quant",
               quant, "--target", "jetson-agx-orin-64gb", "-o", str(out), "--force"]
    if calibration:
        command += ["--calibration-data", str(calibration)]
    command += ["--accept-quality-loss"] if evaluate else ["--no-eval"]
    cache = work / "edgeopt-cache"
    env = {**os.environ, "EDGEOPT_CACHE": str(cache)}
    run = Pipeline("edgeopt", planned_peak=planned_peak(checkpoint, out, calibration, fmt, quant, evaluate))
    shutil.rmtree(cache, ignore_errors=True)  # nothing reused from an earlier run
    run.steps.append(timed("optimize", command, env, log))
    shutil.rmtree(cache, ignore_errors=True)  # its F16 intermediate (16 GB at 8B) would crowd llama.cpp's off the disk
    return run


def planned_peak(checkpoint: Path, out: Path, calibration: Path | None, fmt: str, quant: str, evaluate: bool) -> int:
    """The peak resident memory edgeopt's own plan states for the run (edgeopt.planning.workshop)."""
    from edgeopt.optimize.export_options import export_options
    from edgeopt.optimize.options import OptimizeOptions, resolve

    opts = OptimizeOptions(model=str(checkpoint), target="jetson-agx-orin-64gb", format=fmt, quant=quant,
                           output=out, dry_run=True, evaluate=evaluate,
                           export_options=export_options(calibration_data=calibration))
    workshop = resolve(opts).workshop
    assert workshop is not None
    return workshop.peak_resident_bytes


def texts(work: Path, words: int, checkpoint: Path, tokens: int,
          calibration_tokens: int | None = None) -> tuple[Path, Path]:
    """(calibration text of ``words`` words, cut to about ``calibration_tokens`` tokens of the model's tokenizer
    when given; evaluation text of about ``tokens`` tokens)."""
    from tests.fixtures.english_texts import calibration_text, evaluation_text

    calibration = work / "calibration.txt"
    kept, count = [], 0
    for line in calibration_text().splitlines(keepends=True):
        kept.append(line)
        count += len(line.split())
        if count >= words:
            break
    text = "".join(kept)
    calibration.write_text(text if calibration_tokens is None else _cut(text, checkpoint, calibration_tokens))
    evaluation = work / "evaluation.txt"
    evaluation.write_text(_cut(evaluation_text(), checkpoint, tokens))
    return calibration, evaluation


def _cut(text: str, checkpoint: Path, tokens: int) -> str:
    """The start of ``text`` that holds at least ``tokens`` tokens (a few over), or all of it. Cut in proportion to
    the characters first, then lengthened until the count is reached: tokens are not spread evenly over a text (a
    proportional cut gave llama-imatrix 7 chunks of 512 where 8 were meant)."""
    from edgeopt.exporters.input_energy import tokenize_text

    def count(part: str) -> int:
        return len(tokenize_text(checkpoint, part)[0])

    if tokens <= 0:
        return ""  # no text asked for (the calibration-only comparison evaluates nothing)
    total = count(text)
    if total <= tokens:
        return text
    cut = int(len(text) * tokens / total)
    while cut < len(text) and count(text[:cut]) < tokens + 8:  # the whole text may hold fewer than 8 over
        cut = min(len(text), int(cut * 1.02) + 1)
    return text[:cut]


def compare(label: str, ours: Pipeline, theirs: Pipeline) -> list[str]:
    return [f"## {label}",
            f"{'':10s} {'wall s':>8s} {'peak RSS GiB':>13s} {'peak anon GiB':>14s}",
            *(f"{p.name:10s} {p.seconds:8.1f} {p.max_rss / GIB:13.2f} {p.peak_anon / GIB:14.2f}" for p in (ours, theirs)),
            f"{'ratio':10s} {ours.seconds / theirs.seconds:8.2f} {ours.max_rss / theirs.max_rss:13.2f} "
            f"{ours.peak_anon / max(1, theirs.peak_anon):14.2f}",
            f"steps: {ours.name}: {ours.shares()}", f"steps: {theirs.name}: {theirs.shares()}", plan_line(ours)]


def plan_line(ours: Pipeline) -> str:
    return (f"edgeopt's plan: peak {ours.planned_peak / GIB:.2f} GiB, measured {ours.max_rss / GIB:.2f} GiB "
            f"(planned / measured {ours.planned_peak / ours.max_rss:.2f}; held when 1.00-1.20)")


def main(argv: list[str] | None = None) -> list[str]:
    from tests.bench.bench_quality_gguf import cpu_model, tool_dir
    from tests.bench.scale_checkpoints import make_checkpoint

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("small", "1b", "8b"), default="1b")
    parser.add_argument("--words", type=int, default=5300, help="calibration text for the first comparison")
    parser.add_argument("--work", type=Path, default=None, help="where checkpoints and files go (default: a temp dir)")
    parser.add_argument("--only", choices=("calibration", "defaults", "onnx", "mix"), default=None,
                        help="onnx: edgeopt's ONNX export alone (llama.cpp has none), against its plan; mix: --quant "
                             "MIX against edgeopt's plain Q4_K_M")
    parser.add_argument("--onnx-quant", choices=("int8", "int4"), default=None, help="with --only onnx (default int8)")
    args = parser.parse_args(argv)
    if args.onnx_quant is not None and args.only != "onnx":
        parser.error(f"--onnx-quant {args.onnx_quant} sets the ONNX export's quant: add --only onnx, or drop it")
    work = args.work or Path(tempfile.mkdtemp(prefix="optimize-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = make_checkpoint(args.shape, work / f"llama-{args.shape}")
    tools = tool_dir()
    log = work / "bench.log"
    lines = [f"# optimize at the {args.shape} shape: {cpu_model()}, {os.cpu_count()} cores"]
    if args.only in (None, "calibration"):
        calibration, _ = texts(work, args.words, checkpoint, 0)
        ours = edgeopt_pipeline(checkpoint, work, calibration, log, evaluate=False)
        lines += compare(f"calibration text ({args.words} words), no evaluation", ours,
                         llama_cpp_pipeline(tools, checkpoint, work, calibration, None, log))
    if args.only in (None, "defaults"):
        # edgeopt's defaults write 32 x 128 tokens of calibration text and evaluate on ~400 generated tokens;
        # llama.cpp is given real text of 4,096 tokens (llama-imatrix -c 512: 8 chunks) and, for
        # llama-perplexity, which needs two 512-token windows at least, ~1,100.
        from edgeopt.exporters.gguf.self_calibration import DEFAULT_CHUNKS, SEQUENCE_TOKENS

        calibration, evaluation = texts(work, 4000, checkpoint, 1100, DEFAULT_CHUNKS * SEQUENCE_TOKENS)
        ours = edgeopt_pipeline(checkpoint, work, None, log)
        lines += compare("defaults (matrix from self-written text, evaluation)", ours,
                         llama_cpp_pipeline(tools, checkpoint, work, calibration, evaluation, log))
    if args.only == "mix":
        # The size-budgeted mix (at Q4_K_M's size) against edgeopt's own plain Q4_K_M of the same checkpoint, both
        # with a matrix of self-written text and no evaluation (llama.cpp has no mix of its own).
        plain = edgeopt_pipeline(checkpoint, work, None, log, evaluate=False)
        mix = edgeopt_pipeline(checkpoint, work, None, log, quant="MIX", evaluate=False)
        lines += compare("--quant MIX against the plain Q4_K_M export (self-written matrix text, no evaluation)",
                         Pipeline("MIX", mix.steps, mix.planned_peak), Pipeline("Q4_K_M", plain.steps))
    if args.only == "onnx":
        quant = args.onnx_quant or "int8"
        ours = edgeopt_pipeline(checkpoint, work, None, log, fmt="onnx", quant=quant, evaluate=False)
        lines += [f"## onnx {quant}, no evaluation", f"{'':10s} {'wall s':>8s} {'peak RSS GiB':>13s} "
                  f"{'peak anon GiB':>14s}", f"{'edgeopt':10s} {ours.seconds:8.1f} {ours.max_rss / GIB:13.2f} "
                  f"{ours.peak_anon / GIB:14.2f}", plan_line(ours)]
    print("\n".join(lines), flush=True)
    return lines


if __name__ == "__main__":
    main()
