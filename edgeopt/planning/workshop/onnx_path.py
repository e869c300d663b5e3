"""The ONNX export's steps on this workstation: optimum's export in float32, its check against torch, the fusions,
quantization and the quantized graph's check against the export. Every step holds float32 copies of the model:

- the export: torch's model (loaded in float32), the traced graph's weights and the written graph read back to
  store a tied head once (exporters/onnx/tied_embedding.py);
- the check against torch: torch's model and an onnxruntime session of the export;
- the fusions read the graph without its matrices, then check it in two sessions (exporters/onnx/fusion.py);
- quantization reads the float32 graph whole and writes the quantized one; INT4's weighted search first writes
  calibration text with the float32 export (onnxruntime decoding) and measures its activations;
- the quantized check runs the export and the quantized graph.

The multiples of the float32 size are the peaks (RssAnon, sampled) of each step on a 506M-parameter Llama 3.2 1B
shape cut to 4 layers, 2 AMD EPYC cores, and the rates its times (tests/bench/bench_optimize_scale.py --format onnx
prints plan and measurement side by side on the 1B shape). Nothing of it is mapped: onnxruntime and torch read the
weights into their own memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.planning.workshop.estimate import StepEstimate, WorkshopPlan
from edgeopt.planning.workshop.gguf_path import LIBRARIES, MARGIN, PROCESS
from edgeopt.sources.model_spec import ModelSpec

MIB = 2**20
TORCH_PROCESS = 400 * MIB  # torch, transformers and optimum imported

# Peak own memory of each step, in float32 sizes of the model (parameters x 4 bytes).
EXPORT_FP32_COPIES = 3.4
CHECK_FP32_COPIES = 2.3
FUSION_FP32_COPIES = 2.8
QUANTIZE_FP32_COPIES = 3.2
QUANTIZED_CHECK_FP32_COPIES = 2.0

# Parameters a second on 2 cores (the export traces and writes; the checks run a 64-token probe).
EXPORT_PARAMS_PER_SECOND = 3.5e6
CHECK_PARAMS_PER_SECOND = 30e6
QUANTIZE_INT8_PARAMS_PER_SECOND = 25e6
INT4_SEARCH_PARAMS_PER_SECOND = 0.8e6  # the weighted search's candidate scales for each block
ORT_DECODE_EFFICIENCY = 0.25  # of numpy's matmul rate: onnxruntime's float32 decode of 8 sequences
ORT_PREFILL_EFFICIENCY = 0.5  # its float32 pass over 512-token chunks
INT4_CALIBRATION_TOKENS = 8 * 512  # exporters/generated_text.py's default chunks
FUSED_QUANTS = ("int8", "int4")  # decoders are fused before weight-only INT8 and INT4 (exporters/onnx/exporter.py)


@dataclass(frozen=True)
class OnnxSteps:
    quant: str
    calibrated: bool  # INT4's weighted search or GPTQ: activations measured on calibration text first
    writes_text: bool  # no --calibration-data: the float32 export writes that text itself


def plan_onnx_export(spec: ModelSpec, steps: OnnxSteps, gflops: float) -> WorkshopPlan:
    fp32 = 4 * spec.num_parameters
    process = PROCESS + TORCH_PROCESS

    def step(name: str, copies: float, seconds: float) -> StepEstimate:
        own = int((process + copies * fp32) * MARGIN)
        return StepEstimate(name, own + LIBRARIES, own, seconds)

    plan = [step("ONNX export in float32", EXPORT_FP32_COPIES, spec.num_parameters / EXPORT_PARAMS_PER_SECOND),
            step("check against torch", CHECK_FP32_COPIES, spec.num_parameters / CHECK_PARAMS_PER_SECOND)]
    if steps.quant in FUSED_QUANTS:
        plan.append(step("fusions", FUSION_FP32_COPIES, spec.num_parameters / CHECK_PARAMS_PER_SECOND))
    if steps.quant != "fp32":
        seconds = spec.num_parameters / QUANTIZE_INT8_PARAMS_PER_SECOND
        if steps.quant == "int4":
            seconds = spec.num_parameters / INT4_SEARCH_PARAMS_PER_SECOND
            if steps.calibrated:  # a pass over the text, and the text written first where none was given
                flops = INT4_CALIBRATION_TOKENS * 2 * spec.num_parameters
                seconds += flops / (gflops * 1e9 * ORT_PREFILL_EFFICIENCY)
                if steps.writes_text:
                    seconds += flops / (gflops * 1e9 * ORT_DECODE_EFFICIENCY)
        plan.append(step(f"quantization to {steps.quant}", QUANTIZE_FP32_COPIES, seconds))
        plan.append(step("check against the export", QUANTIZED_CHECK_FP32_COPIES,
                         spec.num_parameters / CHECK_PARAMS_PER_SECOND))
    return WorkshopPlan(tuple(plan))
