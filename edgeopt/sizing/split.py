"""Splitting one model's layers across devices: the head and llama.cpp RPC workers.

llama.cpp keeps the token embedding on the head, gives the first repeating layers to the head's CPU and
the rest, with the output layer, to the offload devices in order (llama-model.cpp: ``n_gpu_layers``
counts the offloaded layers *and* the output; ``tensor_split`` divides them). A tied output matrix is
the embedding again, copied to the device that holds the output. Each layer's KV lives with its layer.

So a device's memory is

    head    = embedding + its layers x (layer weights + KV per layer per cell x cells) + runtime
    worker  = its layers x (the same) + compute buffers (+ the output matrix and logits on the last)

and the split gives each device layers in proportion to how many it can hold, so every device is
filled to the same fraction. The plan is the sizing package's arithmetic, the same margin
(edgeopt.sizing.budget.after_margin) as one device; ``edgeopt plan --devices/--workers`` prints it and
``edgeopt serve --workers`` loads exactly it (:meth:`SplitPlan.offload`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from edgeopt.sizing.budget import MIB, after_margin

_LAYER_TENSOR = re.compile(r"^blk\.(\d+)\.")
LOGIT_BYTES = 4  # float32 logits of each batch token on the output device's compute buffer


@dataclass(frozen=True)
class LayerWeights:
    """Where a model's weight bytes sit, by llama.cpp's placement units."""

    layers: tuple[int, ...]  # bytes of each repeating layer, in order
    input_bytes: int  # token embedding (always on the head)
    output_bytes: int  # output norm and matrix, on the device that holds the output (a tied matrix: a copy)

    @property
    def total_bytes(self) -> int:
        return sum(self.layers) + self.input_bytes + self.output_bytes

    @classmethod
    def from_tensor_bytes(cls, tensor_bytes: dict[str, int]) -> LayerWeights:
        """From a GGUF's tensors (edgeopt.sources.gguf_metadata.read_tensor_bytes)."""
        per_layer: dict[int, int] = {}
        input_bytes = output_bytes = 0
        for name, size in tensor_bytes.items():
            match = _LAYER_TENSOR.match(name)
            if match:
                per_layer[int(match.group(1))] = per_layer.get(int(match.group(1)), 0) + size
            elif name.startswith("output"):
                output_bytes += size
            else:
                input_bytes += size
        if "output.weight" not in tensor_bytes:  # tied: llama.cpp duplicates the embedding as the output
            output_bytes += tensor_bytes.get("token_embd.weight", 0)
        return cls(tuple(per_layer[i] for i in sorted(per_layer)), input_bytes, output_bytes)

    @classmethod
    def estimated(cls, weights_bytes: int, parameters: int, layers: int, embedding_elements: int,
                  tied: bool) -> LayerWeights:
        """From a config alone (``edgeopt plan`` of a checkpoint): every parameter at the file's average width,
        the embedding and the output matrix (untied, or the tied copy) out of it, the rest in equal layers."""
        if layers < 1 or parameters < 1:
            raise ValueError(f"layers={layers}, parameters={parameters}")
        embedding = embedding_elements * weights_bytes // parameters
        layer = (weights_bytes - embedding * (1 if tied else 2)) // layers
        return cls((layer,) * layers, embedding, embedding)


@dataclass(frozen=True)
class Device:
    name: str  # "head" or a worker's host:port
    memory_bytes: int  # what it may use (the head's pool; what the worker advertises)
    compute_bytes: int  # runtime memory beside weights and KV on this device


@dataclass(frozen=True)
class DeviceShare:
    name: str
    first_layer: int
    layers: int
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    memory_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= after_margin(self.memory_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes, "fits": self.fits}


@dataclass(frozen=True)
class SplitPlan:
    shares: tuple[DeviceShare, ...]  # the head first, then each worker in --workers order
    kv_cells: int
    fits_one_device: bool  # whether the largest device alone holds the model and this KV

    @property
    def fits(self) -> bool:
        return all(share.fits for share in self.shares)

    def offload(self) -> tuple[int, tuple[float, ...]]:
        """llama.cpp's ``n_gpu_layers`` and ``tensor_split`` (one entry per worker device) that place exactly
        these shares. Boundaries sit half a layer before each split point, so float rounding in llama.cpp's
        ``upper_bound`` cannot move a layer across."""
        workers = self.shares[1:]
        counts = [share.layers for share in workers]
        counts[-1] += 1  # the output layer goes with the last worker
        weights = [float(count) for count in counts]
        if len(weights) > 1:
            weights[0] -= 0.5
            weights[-1] += 0.5
        return sum(counts), tuple(weights)

    def to_dict(self) -> dict[str, Any]:
        return {"kv_cells": self.kv_cells, "fits": self.fits, "fits_one_device": self.fits_one_device,
                "devices": [share.to_dict() for share in self.shares]}


def _capacity(device_room: int, layer_costs: tuple[int, ...], start: int) -> int:
    """Layers from ``start`` on that fit ``device_room``."""
    used = count = 0
    for cost in layer_costs[start:]:
        if used + cost > device_room:
            break
        used, count = used + cost, count + 1
    return count


def layer_counts(rooms: list[int], layer_costs: tuple[int, ...]) -> list[int]:
    """Layers per device, in proportion to how many each can hold; when all together hold fewer than the
    model has, each gets its proportional share anyway (the plan then says which device overflows)."""
    total_layers = len(layer_costs)
    capacities = [_capacity(max(room, 0), layer_costs, 0) for room in rooms]
    held = sum(capacities)
    weights = capacities if held >= total_layers else [max(room, 0) for room in rooms]
    if not sum(weights):  # no device has any room: an even split, for the report
        weights = [1] * len(rooms)
    exact = [total_layers * w / sum(weights) for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(rooms)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder:
        if sum(counts) == total_layers:
            break
        if held < total_layers or counts[i] < capacities[i]:
            counts[i] += 1
    for i in range(len(rooms)):  # any layer left (capacity-bound rounding): the first device with room
        while sum(counts) < total_layers and counts[i] < capacities[i]:
            counts[i] += 1
    return counts


def plan_split(weights: LayerWeights, kv_bytes_per_token: int, kv_cells: int, devices: list[Device]) -> SplitPlan:
    """Split ``weights`` and a KV cache of ``kv_cells`` cells over ``devices`` (the head first)."""
    if len(devices) < 2:
        raise ValueError("a split needs the head and at least one worker")
    n_layers = len(weights.layers)
    kv_per_layer = kv_bytes_per_token * kv_cells // max(n_layers, 1)
    costs = tuple(layer + kv_per_layer for layer in weights.layers)
    fixed = [device.compute_bytes for device in devices]
    fixed[0] += weights.input_bytes
    fixed[-1] += weights.output_bytes
    rooms = [after_margin(device.memory_bytes) - cost for device, cost in zip(devices, fixed)]
    counts = layer_counts(rooms, costs)
    shares, first = [], 0
    for device, count, extra in zip(devices, counts, fixed):
        layer_bytes = sum(weights.layers[first:first + count])
        carried = extra - device.compute_bytes
        shares.append(DeviceShare(device.name, first, count, layer_bytes + carried, kv_per_layer * count,
                                  device.compute_bytes, device.memory_bytes))
        first += count
    whole = weights.total_bytes + kv_per_layer * n_layers
    fits_one = any(whole + device.compute_bytes <= after_margin(device.memory_bytes) for device in devices)
    return SplitPlan(tuple(shares), kv_cells, fits_one)


def largest_fitting_cells(weights: LayerWeights, kv_bytes_per_token: int, wanted_cells: int,
                          devices: list[Device]) -> int:
    """The most KV cells (up to ``wanted_cells``) a split over ``devices`` holds; 0 when not even the weights fit."""
    low, high = 0, wanted_cells
    while low < high:
        middle = (low + high + 1) // 2
        if plan_split(weights, kv_bytes_per_token, middle, devices).fits:
            low = middle
        else:
            high = middle - 1
    return low


def _layer_range(share: DeviceShare) -> str:
    if share.layers == 0:
        return "no layers (0)"
    return f"layers {share.first_layer}-{share.first_layer + share.layers - 1} ({share.layers})"


def describe(plan: SplitPlan) -> list[str]:
    """One line per device, for logs and the CLI."""
    return [f"{share.name}: {_layer_range(share)}, weights {share.weights_bytes / MIB:.1f} MiB, "
            f"KV {share.kv_bytes / MIB:.1f} MiB, runtime {share.compute_bytes / MIB:.1f} MiB = "
            f"{share.total_bytes / MIB:.1f} of "
            f"{share.memory_bytes / MIB:.0f} MiB{'' if share.fits else ' (does not fit)'}"
            for share in plan.shares]
