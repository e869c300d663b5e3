"""The prune and distil passes' memory on this workstation, and the distillation settings that fit it.

Both run in torch, in float32 on a CPU (edgeopt.passes): pruning holds the model, scores its units on calibration
batches and compares the pruned model with the original (both held then); distillation trains the student with
AdamW beside the teacher: per student parameter 4 bytes of weight, 4 of gradient and 8 of AdamW's two moments, per
teacher parameter 4, then the activations autograd keeps for the backward pass, and the logits of a micro-batch
(student's, their gradient, teacher's and the loss's softmax temporaries: six arrays of batch x sequence x
vocabulary floats: at a 128k vocabulary and 8 x 256 tokens, 6 GiB).

When the distillation does not fit the memory the machine has free, the plan keeps its global batch and trades
memory for time as the practice goes: gradient checkpointing first (activations of one layer, not all), then
halving the micro-batch and doubling the accumulation, down to one sequence. What still does not fit is refused.
"""

from __future__ import annotations

from typing import Any

from edgeopt.planning.workshop.estimate import StepEstimate
from edgeopt.sources.model_spec import ModelSpec

MIB = 2**20
TORCH_PROCESS = 600 * MIB  # Python, torch and transformers imported (RssAnon + libraries)
DISTIL_BATCH, DISTIL_SEQUENCE = 8, 256  # edgeopt.passes.distil_train's defaults
PRUNE_BATCH, PRUNE_SEQUENCE = 4, 256  # edgeopt.passes.importance's calibration batches
LOGIT_ARRAYS = 6
PRUNE_SCORED_TOKENS = 16384


def plan_prune(before: ModelSpec, after: ModelSpec, gflops: float) -> StepEstimate:
    logits = PRUNE_BATCH * PRUNE_SEQUENCE * before.vocab_size * 4 * 3
    own = TORCH_PROCESS + 4 * (before.num_parameters + after.num_parameters) + logits + _activations(
        before, PRUNE_BATCH, PRUNE_SEQUENCE, checkpointing=True)
    seconds = 2 * before.num_parameters * PRUNE_SCORED_TOKENS / (gflops * 1e9)
    return StepEstimate("pass prune", own, own, seconds)


def fit_distil(student: ModelSpec, teacher: ModelSpec, params: dict[str, Any], available_bytes: int,
               gflops: float) -> tuple[dict[str, Any], StepEstimate]:
    """The distil pass's parameters with the settings that fit ``available_bytes`` (those the user set kept), and
    its estimate with them; the least memory it can take when nothing fits (the caller refuses it)."""
    batch = int(params.get("batch_size", DISTIL_BATCH))
    accumulation = int(params.get("grad_accum", 1))
    checkpointing = bool(params.get("grad_checkpointing", False))
    steps = int(params.get("steps", 200))

    def estimate() -> StepEstimate:
        own = _distil_bytes(student, teacher, batch, checkpointing)
        tokens = steps * batch * accumulation * DISTIL_SEQUENCE
        seconds = tokens * 6 * student.num_parameters  # forward and backward: 6 FLOPs a weight a token
        seconds = seconds * (1.33 if checkpointing else 1.0) / (gflops * 1e9)
        return StepEstimate("pass distil", own, own, seconds)

    while estimate().anonymous_bytes > available_bytes:
        if not checkpointing:
            checkpointing = True
        elif batch > 1:
            batch, accumulation = batch // 2, accumulation * 2
        else:
            break
    fitted = dict(params)
    if checkpointing:
        fitted["grad_checkpointing"] = True
    if batch != int(params.get("batch_size", DISTIL_BATCH)):
        fitted |= {"batch_size": batch, "grad_accum": accumulation}
    return fitted, estimate()


def _distil_bytes(student: ModelSpec, teacher: ModelSpec, batch: int, checkpointing: bool) -> int:
    logits = LOGIT_ARRAYS * batch * DISTIL_SEQUENCE * student.vocab_size * 4
    return (TORCH_PROCESS + 16 * student.num_parameters + 4 * teacher.num_parameters + logits
            + _activations(student, batch, DISTIL_SEQUENCE, checkpointing))


def _activations(spec: ModelSpec, batch: int, sequence: int, checkpointing: bool) -> int:
    """What autograd keeps for the backward pass, float32: per layer and token about 17 hidden-size vectors, 2
    feed-forward-size ones and the attention scores (heads x sequence); with checkpointing each layer's input
    and one layer's full set."""
    per_layer_token = 4 * (17 * spec.hidden_size + 2 * spec.intermediate_size + 2 * spec.num_heads * sequence)
    tokens = batch * sequence
    if checkpointing:
        return tokens * (spec.num_layers * 4 * spec.hidden_size + per_layer_token)
    return tokens * spec.num_layers * per_layer_token
