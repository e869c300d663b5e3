"""The GGUF export's steps on this workstation: conversion to an unquantized file, the importance matrix (of text
the model writes itself, measured as it writes it, or of --calibration-data), quantization, evaluation. Each step's
memory is what it holds at its peak:

- the process itself (Python, numpy, llama.cpp's library and the model's vocabulary tables: ``PROCESS``,
  ``VOCAB_BYTES_PER_TOKEN``);
- conversion (exporters/gguf/writer.py): one tensor at a time, the largest (a 128k embedding) held as float32 read
  from the checkpoint, its F16 copy and the overflow check's mask: 7 bytes an element;
- the llama.cpp steps map the unquantized file whole (page cache: ``mapped_bytes``) and hold their KV cache, their
  compute buffer (activations of a 512-token batch) and the logits rows they ask for (4 bytes x vocabulary each,
  twice: llama.cpp's output buffer and the copy read from it);
- quantization reads each tensor into float32 and writes its quantized blocks (llama-quantize's own buffers);
- evaluation maps one file at a time (the unquantized reference, then the bundle's; the reference's logits wait on
  disk, edgeopt.measuring.reference_logits) and holds a window's logits three times over.

Seconds are the arithmetic (2 FLOPs a weight a token) at the rate numpy's BLAS reaches here now, times what
llama.cpp's kernels reach of it; both constants come from runs of SmolLM2-135M and a Llama 3.2 1B shape on a
2-core AMD EPYC (tests/bench/bench_optimize_scale.py prints plan and measurement side by side).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.formats.gguf.quants import MIX
from edgeopt.measuring.eval_text import GENERATED_TOKENS_PER_PROMPT, SEED_PROMPTS
from edgeopt.planning.checkpoint import weight_bytes
from edgeopt.planning.workshop.estimate import StepEstimate, WorkshopPlan
from edgeopt.sizing.layout import stream_cells
from edgeopt.sources.model_spec import ModelSpec

MIB = 2**20

PROCESS = 60 * MIB  # Python, numpy, edgeopt and llama.cpp's library, anonymous (RssAnon right before the first step)
LIBRARIES = 40 * MIB  # the shared libraries mapped (RssFile beside the model files)
VOCAB_BYTES_PER_TOKEN = 1024  # llama.cpp's token tables and merges, the tokenizer's scan: per vocabulary entry
CONVERT_BYTES_PER_ELEMENT = 7  # float32 read + F16 written + the overflow mask, of the largest tensor
QUANTIZE_BYTES_PER_ELEMENT = 5  # the largest tensor in float32 and its quantized blocks
QUANTIZE_BYTES_PER_ELEMENT_LATE = 2.5  # what stays beside the whole mapped file at the quantizer's end
BATCH_TOKENS = 512  # llama.cpp's batch for calibration chunks and prompts (the compute buffer's size)
EVAL_WINDOW = 256  # edgeopt.evaluation.causal_lm's window
# the evaluation text the original writes: its continuations and ~8 tokens of each seed prompt
EVAL_TOKENS = len(SEED_PROMPTS) * (GENERATED_TOKENS_PER_PROMPT + 8)
SELF_CALIBRATION_SEQUENCES, SELF_CALIBRATION_LENGTH = 32, 128  # exporters/gguf/self_calibration.py, decoded together
CALIBRATION_CHUNKS = 32  # exporters/gguf/calibration.py's most chunks of --calibration-data
BYTES_PER_CALIBRATION_TOKEN = 4.2  # English text a BPE vocabulary cuts (a chunk count from a file's size)

# The estimates above sit 0.5-3% over the peaks measured on the reference machine (SmolLM2-135M 605 MiB, the 1B
# shape 3.06 GiB); another CPU's kernels repack and buffer differently, another libc allocates differently. The
# plan states 6% more, so that it holds elsewhere and stays within 1.2x the peak here.
MARGIN = 1.06

# What llama.cpp's kernels reach of numpy's float32 matmul rate (edgeopt.profiles.workstation), by kind of pass,
# measured on the 1B shape (numpy 109 GFLOPS there): 512-token chunks through F16 weights 106 GFLOPS, windows of 256
# with their logits copied out 78, 4-8 sequences decoded a token a step 47 (the weights read once a step for few rows),
# 32 sequences 1.7 times that.
PREFILL_EFFICIENCY = 1.0
SCORING_EFFICIENCY = 0.7
DECODE_EFFICIENCY = 0.43
DECODE_32_EFFICIENCY = 0.73
# --size (exporters/gguf/mix/): groups per tensor role (bands of layers), the calibration chunks every group, the
# reference and the written mix's competitors (two llama.cpp recipes; the mix itself is scored after its
# quantization) are scored on, the unquantized model's distributions kept for each.
MIX_BANDS, MIX_SCORED_CHUNKS, MIX_MEASURED_FILES = 3, 2, 2
MIX_LOGITS_COPIES = 5  # a chunk's logits while it is scored, beside the kept distributions
MIX_GROUP_SCORERS = 2  # groups scored side by side (exporters/gguf/mix/costs.py's group_workers)
MIX_ERROR_PARAMS_PER_SECOND = 8.7e6  # every palette type on an eighth of the rows, the probe type whole (SmolLM2)
CONVERT_PARAMS_PER_SECOND = 70e6  # reading, casting and writing (numpy's memory-bound loops)
QUANTIZE_PARAMS_PER_SECOND = 12e6  # llama.cpp's search for each block's scales (Q4_K_M with a matrix)


@dataclass(frozen=True)
class GgufSteps:
    """Which steps the export runs: from its options and optimize's flags."""

    quant: str
    uses_matrix: bool  # the quant weighs rounding by an importance matrix
    calibration_text_bytes: int | None  # --calibration-data's size; None: the model writes its own
    self_calibration: bool  # without --calibration-data: text the model writes (else no matrix)
    evaluate: bool


def plan_gguf_export(spec: ModelSpec, steps: GgufSteps, gflops: float) -> WorkshopPlan:
    unquantized = weight_bytes(spec, "gguf", "F16")
    quantized = weight_bytes(spec, "gguf", steps.quant)
    process = PROCESS + VOCAB_BYTES_PER_TOKEN * spec.vocab_size
    largest = max(t.numel for t in spec.tensors())
    flops_per_token = 2 * _matmul_parameters(spec)
    rate = gflops * 1e9

    def mapping(name: str, own: int, mapped: int, seconds: float) -> StepEstimate:
        """A step that holds ``own`` bytes beside ``mapped`` bytes of files, all of it at once."""
        return StepEstimate(name, own + LIBRARIES + mapped, own, seconds)

    plan = [mapping("conversion to GGUF F16", process + CONVERT_BYTES_PER_ELEMENT * largest, 0,
                    spec.num_parameters / CONVERT_PARAMS_PER_SECOND)]
    if steps.uses_matrix and steps.calibration_text_bytes is None and steps.self_calibration:
        # the matrix is measured as the text is written (exporters/gguf/calibration.py): no pass of its own
        sequences, length = SELF_CALIBRATION_SEQUENCES, min(SELF_CALIBRATION_LENGTH, spec.max_position_embeddings)
        plan.append(mapping("calibration text and matrix",
                            process + _llama_buffers(spec, sequences, sequences * stream_cells(length)), unquantized,
                            sequences * length * flops_per_token / (rate * DECODE_32_EFFICIENCY)))
    matrix_tokens = _matrix_tokens(steps)
    if matrix_tokens:
        plan.append(mapping("importance matrix", process + _llama_buffers(spec, BATCH_TOKENS, BATCH_TOKENS),
                            unquantized, matrix_tokens * flops_per_token / (rate * PREFILL_EFFICIENCY)))
    if steps.quant == MIX:
        plan.append(_mix_step(spec, steps, process, unquantized, flops_per_token, rate))
    # llama.cpp's quantizer holds its float32 copy of the largest tensor (and its blocks) while few of the file's
    # pages are read yet; by the last tensors it has read them all and holds little beside them.
    plan.append(StepEstimate(f"quantization to {steps.quant}",
                             process + LIBRARIES + unquantized + QUANTIZE_BYTES_PER_ELEMENT_LATE * largest,
                             process + QUANTIZE_BYTES_PER_ELEMENT * largest,
                             spec.num_parameters / QUANTIZE_PARAMS_PER_SECOND))
    if steps.evaluate:
        # The reference (mapped) and then the bundle's model, whose weights llama.cpp repacks for its CPU kernels
        # (its own memory); a window's logits four times: llama.cpp's output, llama-cpp-python's copy, the row
        # array scored, the stored reference's read back.
        window = _llama_buffers(spec, 0, EVAL_WINDOW, kv_bytes=4) + 4 * EVAL_WINDOW * spec.vocab_size * 4
        # The text written (the reference keeps its logits as it writes), then the bundle's model scoring it.
        seconds = (EVAL_TOKENS * flops_per_token / (rate * DECODE_EFFICIENCY)
                   + EVAL_TOKENS * flops_per_token / (rate * SCORING_EFFICIENCY))
        reference, candidate = process + window, process + window + quantized
        plan.append(StepEstimate("evaluation", max(reference + LIBRARIES + unquantized, candidate + LIBRARIES),
                                 max(reference, candidate), seconds))
    return WorkshopPlan(tuple(StepEstimate(step.name, int(step.resident_bytes * MARGIN),
                                           int(step.anonymous_bytes * MARGIN), step.seconds) for step in plan))


def _mix_step(spec: ModelSpec, steps: GgufSteps, process: int, unquantized: int, flops_per_token: int,
              rate: float) -> StepEstimate:
    """--size's measurements (exporters/gguf/mix/): every tensor's rounding errors, a forward pass per group on a
    spliced file, llama.cpp's recipes that compete quantized and scored; the mix's own quantization is the next
    step. The peak is the scoring: the unquantized model's distributions kept for every scored token, and a chunk's
    logits several times over while one is scored (llama.cpp's output, llama-cpp-python's copy, the rows read,
    their log-softmax and its exponential) in each of the scorers side by side, beside the mapped unquantized file
    or, where they are larger, the two groups' files scored side by side (Q8_0 but for the group's tensors). The
    chunks are the calibration text's: the self-written sequences, or 512-token chunks of --calibration-data."""
    chunk = min(SELF_CALIBRATION_LENGTH, spec.max_position_embeddings) if steps.calibration_text_bytes is None \
        else BATCH_TOKENS
    matrices = [t for t in spec.tensors() if len(t.shape) == 2]
    roles = {t.name.split(".", 3)[-1] for t in matrices if t.layer is not None}
    # a group per role and band, and one per matrix outside the layers (the embeddings; the output when untied)
    groups = len(roles) * min(MIX_BANDS, spec.num_layers) + sum(t.layer is None for t in matrices)
    chunk_logits = chunk * spec.vocab_size * 4
    own = (process + MIX_SCORED_CHUNKS * chunk_logits
           + MIX_GROUP_SCORERS * (_llama_buffers(spec, chunk, chunk, kv_bytes=4) + MIX_LOGITS_COPIES * chunk_logits))
    scored_tokens = chunk * MIX_SCORED_CHUNKS * (groups + 2 + MIX_MEASURED_FILES)  # and the reference, twice
    seconds = (spec.num_parameters / MIX_ERROR_PARAMS_PER_SECOND
               + MIX_MEASURED_FILES * spec.num_parameters / QUANTIZE_PARAMS_PER_SECOND
               + scored_tokens * flops_per_token / (rate * SCORING_EFFICIENCY))
    mapped = max(unquantized, MIX_GROUP_SCORERS * weight_bytes(spec, "gguf", "Q8_0"))  # the groups' files side by side
    return StepEstimate("measuring the mix", own + LIBRARIES + mapped, own, seconds)


def _matrix_tokens(steps: GgufSteps) -> int:
    if not steps.uses_matrix:
        return 0
    if steps.calibration_text_bytes is None:
        return 0
    chunks = min(CALIBRATION_CHUNKS, max(1, int(steps.calibration_text_bytes / BYTES_PER_CALIBRATION_TOKEN)
                                         // BATCH_TOKENS))
    return chunks * BATCH_TOKENS


def _matmul_parameters(spec: ModelSpec) -> int:
    """Weights a token multiplies: every block's and the output matrix (the tied embedding's too); the
    embedding itself is a row lookup."""
    blocks = sum(t.numel for t in spec.tensors() if t.layer is not None)
    return blocks + spec.vocab_size * spec.hidden_size


def _llama_buffers(spec: ModelSpec, rows: int, kv_tokens: int, kv_bytes: int = 2) -> int:
    """A llama.cpp context's own memory: the KV cache, the compute buffer of a 512-token batch, and ``rows``
    logits rows twice (its output buffer and the copy read from it)."""
    kv = kv_tokens * spec.kv_elements_per_token * kv_bytes
    compute = BATCH_TOKENS * (4 * spec.hidden_size + 2 * spec.intermediate_size) * 4
    return kv + compute + 2 * rows * spec.vocab_size * 4
