"""The ONNX export's steps on this workstation: optimum's export in float32, its check against torch, the fusions,
quantization and the quantized graph's check against the export. Every step holds float32 copies of the model:

- the export: torch's model (loaded in float32), the traced graph's weights and the written graph read back to
  store a tied head once (exporters/onnx/tied_embedding.py);
- the check against torch: torch's model and an onnxruntime session of the export;
- the fusions read the graph without its matrices, then check it in two sessions (exporters/onnx/fusion.py);
- quantization reads the float32 graph whole and writes the quantized one; INT4's weighted search first writes
  calibration text with the float32 export (onnxruntime decoding) and measures its activations;
- the quantized check runs the export and the quantized graph.

Each step's own memory is a multiple of the model's float32 size plus a multiple of its token table's (the tied head
stored once, the table quantized in blocks, copies of it read as arrays), fitted to the peaks (RssAnon, sampled, one
process as optimize runs them) of the Llama 3.2 1B shape and of that shape cut to 4 layers (the table then half the
model), 2 AMD EPYC cores: both within 6% of the stated figure. The rates are the 1B shape's times.
Nothing of it is mapped: onnxruntime and torch read the weights into their own memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.planning.workshop.estimate import StepEstimate, WorkshopPlan
from edgeopt.planning.workshop.gguf_path import LIBRARIES, MARGIN, PROCESS
from edgeopt.sources.model_spec import ModelSpec

MIB = 2**20
TORCH_PROCESS = 400 * MIB  # torch, transformers and optimum imported

# Peak own memory of each step: (float32 copies of the model, float32 copies of the token table), measured peaks of
# 11.63/9.64/10.75/10.47/7.20 GiB at 1B (4.6 GiB float32, 0.98 of it the table).
EXPORT = (1.97, 2.13)
CHECK = (2.0, 0.0)
FUSIONS = (2.01, 1.06)
QUANTIZE = (1.32, 4.0)
QUANTIZED_CHECK = (1.34, 0.58)

# Parameters a second on 2 cores (the 1B shape: export 275 s, check 23 s, fusions and their check 63 s, INT8 35 s).
EXPORT_PARAMS_PER_SECOND = 4.5e6
CHECK_PARAMS_PER_SECOND = 54e6
FUSION_PARAMS_PER_SECOND = 20e6
QUANTIZE_INT8_PARAMS_PER_SECOND = 35e6
INT4_SEARCH_PARAMS_PER_SECOND = 0.8e6  # the weighted search's candidate scales (4-layer cut: 780 s, beside a CI run)
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
    fp32, table = 4 * spec.num_parameters, 4 * spec.vocab_size * spec.hidden_size
    process = PROCESS + TORCH_PROCESS

    def step(name: str, copies: tuple[float, float], seconds: float) -> StepEstimate:
        own = int((process + copies[0] * fp32 + copies[1] * table) * MARGIN)
        return StepEstimate(name, own + LIBRARIES, own, seconds)

    params = spec.num_parameters
    plan = [step("ONNX export in float32", EXPORT, params / EXPORT_PARAMS_PER_SECOND),
            step("check against torch", CHECK, params / CHECK_PARAMS_PER_SECOND)]
    if steps.quant in FUSED_QUANTS:
        plan.append(step("fusions", FUSIONS, params / FUSION_PARAMS_PER_SECOND))
    if steps.quant != "fp32":
        seconds = params / QUANTIZE_INT8_PARAMS_PER_SECOND
        if steps.quant == "int4":
            seconds = params / INT4_SEARCH_PARAMS_PER_SECOND
            if steps.calibrated:  # a pass over the text, and the text written first where none was given
                flops = INT4_CALIBRATION_TOKENS * 2 * params
                seconds += flops / (gflops * 1e9 * ORT_PREFILL_EFFICIENCY)
                if steps.writes_text:
                    seconds += flops / (gflops * 1e9 * ORT_DECODE_EFFICIENCY)
        plan.append(step(f"quantization to {steps.quant}", QUANTIZE, seconds))
        plan.append(step("check against the export", QUANTIZED_CHECK, params / CHECK_PARAMS_PER_SECOND))
    return WorkshopPlan(tuple(plan))
