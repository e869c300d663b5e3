"""``edgeopt plan MODEL --devices N`` / ``--workers host:port,...``: one model across several boards.

Each gguf quantization is split over the devices by :func:`edgeopt.sizing.split.plan_split` (the code
``edgeopt serve --workers`` loads with): the head is the ``--target`` profile (or ``--memory``), the other
devices are N-1 more of that profile, or the running workers with the memory each advertises. A
checkpoint's layers are estimated from its config (equal layers, the embedding apart); a GGUF file's are
its own tensors. The recommendation follows the one-device rule (edgeopt.planning.recommend): the profile's
default quant when it fits across the devices, else the largest that does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.sources.gguf_model import gguf_metadata, gguf_model_spec
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.planning.checkpoint import format_candidates, weight_bytes
from edgeopt.planning.sources import CheckpointSource, GgufFileSource
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.budget import kv_bytes_per_token, memory_pool
from edgeopt.sizing.kv_types import kv_element_bytes
from edgeopt.sizing.shape import DEFAULT_CONTEXT
from edgeopt.sizing.split import LayerWeights, SplitPlan, plan_split
from edgeopt.sizing.split_shape import WorkerMemory, split_devices

FORMAT = "gguf"  # llama.cpp's RPC backend is the one that splits


@dataclass(frozen=True)
class SplitCandidate:
    quant: str
    weights_bytes: int  # the model file's (a tied output's copy on the last device is in the split, not here)
    split: SplitPlan

    def to_dict(self) -> dict[str, Any]:
        return {"quant": self.quant, "weights_bytes": self.weights_bytes, **self.split.to_dict()}


@dataclass(frozen=True)
class DevicesPlan:
    model: str
    target: str
    devices: int  # the head and the workers
    context: int
    concurrency: int
    kv_type: str
    candidates: list[SplitCandidate]
    recommended: SplitCandidate | None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "devices": self.devices, "context": self.context,
                "concurrency": self.concurrency, "kv_type": self.kv_type,
                "recommended": self.recommended.quant if self.recommended else None,
                "candidates": [candidate.to_dict() for candidate in self.candidates]}


def worker_memories(profile: DeviceProfile, devices: int | None, workers: list[WorkerMemory] | None,
                    memory_bytes: int | None) -> list[WorkerMemory]:
    if (devices is None) == (workers is None):
        raise ConfigError("plan across devices needs exactly one of --devices and --workers",
                          "pass --devices N (N boards of --target) or --workers host:port,...")
    if workers is not None:
        return workers
    if devices is None or devices < 2:
        raise ConfigError(f"--devices {devices} plans one device", "pass --devices 2 or more, or leave it out")
    each = memory_pool(profile, memory_bytes).bytes
    return [WorkerMemory(f"{profile.name} #{i + 2}", each) for i in range(devices - 1)]


def plan_across_devices(source: CheckpointSource | GgufFileSource, profile: DeviceProfile,
                        workers: list[WorkerMemory], context: int | None, concurrency: int,
                        memory_bytes: int | None = None, kv_type: str | None = None) -> DevicesPlan:
    """Split every gguf quant of a checkpoint (or the one GGUF file, whose tensors are read) over the head
    (``profile`` / ``memory_bytes``) and ``workers``, each with a KV cache of ``context`` x ``concurrency``."""
    if isinstance(source, GgufFileSource):
        spec = gguf_model_spec(gguf_metadata(source.path))
        gguf_file: Path | None = source.path
    else:
        spec, gguf_file = load_model_spec(source.model), None
    context = context or min(spec.max_position_embeddings, DEFAULT_CONTEXT)
    if context < 1 or concurrency < 1:
        raise ConfigError(f"context={context} and concurrency={concurrency} must both be >= 1", "pass positive values")
    entry = backends.backend(FORMAT)
    kv_type = kv_type or entry.serving.kv_cache_types[0]
    per_token = kv_bytes_per_token(spec.kv_elements_per_token, kv_element_bytes(kv_type))
    head_runtime = (entry.model_overhead_bytes(spec.vocab_size, spec.intermediate_size)
                    + concurrency * entry.logits_bytes_per_sequence(spec.vocab_size))
    devices = split_devices(entry, spec, memory_pool(profile, memory_bytes), head_runtime, workers)
    cells = context * concurrency
    candidates = []
    if gguf_file is not None:
        from edgeopt.sources.gguf_metadata import read_tensor_bytes

        layers = LayerWeights.from_tensor_bytes(read_tensor_bytes(gguf_file))
        quants: list[tuple[str, int, LayerWeights]] = [(gguf_file.name, gguf_file.stat().st_size, layers)]
    else:
        embedding = spec.vocab_size * spec.hidden_size
        quants = []
        for quant in format_candidates(spec, profile, FORMAT):
            size = weight_bytes(spec, FORMAT, quant)
            quants.append((quant, size, LayerWeights.estimated(size, spec.num_parameters, spec.num_layers, embedding,
                                                              spec.tie_word_embeddings)))
    for quant, size, layers in quants:
        candidates.append(SplitCandidate(quant, size, plan_split(layers, per_token, cells, devices)))
    return DevicesPlan(spec.source, profile.name, len(devices), context, concurrency, kv_type, candidates,
                       recommend_split(candidates, profile))


def recommend_split(candidates: list[SplitCandidate], profile: DeviceProfile) -> SplitCandidate | None:
    fitting = [c for c in candidates if c.split.fits]
    default = next((c for c in fitting if c.quant == profile.default_quant), None)
    if default is not None:
        return default
    return max(fitting, key=lambda c: c.weights_bytes) if fitting else None
