"""edgeopt.sizing.split: layers per device, and llama.cpp placing exactly those layers from the plan's numbers."""

from __future__ import annotations

import bisect

import numpy as np
import pytest

from edgeopt.sizing.budget import MIB, after_margin
from edgeopt.sizing.split import Device, LayerWeights, SplitPlan, largest_fitting_cells, plan_split


def llama_cpp_placement(n_layers: int, n_gpu_layers: int, tensor_split: tuple[float, ...]) -> list[int]:
    """llama-model.cpp's assignment (float32, as there): -1 for the head's CPU, else the offload device index,
    for each repeating layer and then the output layer."""
    splits = np.cumsum(np.array(tensor_split, dtype=np.float32), dtype=np.float32)
    splits = (splits / splits[-1]).astype(np.float32)
    start = max(n_layers + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layers + 1)
    placement = []
    for il in range(n_layers + 1):
        if il < start or il - start >= act:
            placement.append(-1)
        else:
            placement.append(bisect.bisect_right(list(splits), float(np.float32(il - start) / np.float32(act))))
    return placement


def uniform(layers: int = 30, layer_mib: int = 2, embedding_mib: int = 30) -> LayerWeights:
    return LayerWeights((layer_mib * MIB,) * layers, embedding_mib * MIB, embedding_mib * MIB)


@pytest.mark.parametrize("memories", [(150, 70, 70), (400, 60, 90, 60), (120, 300), (100, 40, 40, 40, 40, 40)])
def test_llama_cpp_places_exactly_the_planned_layers(memories: tuple[int, ...]) -> None:
    weights = uniform()
    devices = [Device("head", memories[0] * MIB, 40 * MIB)] + [Device(f"w{i}", m * MIB, 2 * MIB)
                                                               for i, m in enumerate(memories[1:])]
    plan = plan_split(weights, 20_000, 256, devices)
    n_gpu_layers, tensor_split = plan.offload()
    placement = llama_cpp_placement(len(weights.layers), n_gpu_layers, tensor_split)
    expected = [-1] * plan.shares[0].layers
    for index, share in enumerate(plan.shares[1:]):
        expected += [index] * share.layers
    assert placement[:-1] == expected
    assert placement[-1] == len(devices) - 2  # the output layer on the last worker


def test_layers_follow_each_devices_room_and_every_device_fits() -> None:
    weights = uniform()
    devices = [Device("head", 150 * MIB, 110 * MIB), Device("a", 70 * MIB, 2 * MIB), Device("b", 70 * MIB, 2 * MIB)]
    plan = plan_split(weights, 24_000, 1024, devices)
    assert plan.fits and not plan.fits_one_device
    assert sum(share.layers for share in plan.shares) == 30
    assert plan.shares[1].layers > plan.shares[2].layers  # b also holds the output matrix
    for share in plan.shares:
        assert share.total_bytes <= after_margin(share.memory_bytes)
    assert plan.shares[2].weights_bytes == plan.shares[2].layers * 2 * MIB + 30 * MIB


def test_a_model_too_big_for_all_devices_says_which_one_overflows() -> None:
    devices = [Device("head", 60 * MIB, 40 * MIB), Device("a", 40 * MIB, 2 * MIB)]
    plan = plan_split(uniform(), 24_000, 512, devices)
    assert not plan.fits
    assert [share.fits for share in plan.shares].count(False) >= 1
    assert sum(share.layers for share in plan.shares) == 30  # still a whole split, for the report


def test_largest_fitting_cells_is_the_boundary() -> None:
    weights = uniform()
    devices = [Device("head", 150 * MIB, 100 * MIB), Device("a", 70 * MIB, 2 * MIB), Device("b", 70 * MIB, 2 * MIB)]
    cells = largest_fitting_cells(weights, 24_000, 1 << 20, devices)
    assert 0 < cells < 1 << 20
    assert plan_split(weights, 24_000, cells, devices).fits
    assert not plan_split(weights, 24_000, cells + 1, devices).fits


def test_tensor_bytes_group_by_layer_and_a_tied_output_is_a_copy_of_the_embedding() -> None:
    tensors = {"token_embd.weight": 100, "blk.0.attn_q.weight": 10, "blk.0.ffn_up.weight": 5,
               "blk.1.attn_q.weight": 12, "output_norm.weight": 1}
    tied = LayerWeights.from_tensor_bytes(tensors)
    assert tied == LayerWeights((15, 12), 100, 101)
    untied = LayerWeights.from_tensor_bytes({**tensors, "output.weight": 80})
    assert untied.output_bytes == 81


def test_a_config_estimate_keeps_the_files_bytes() -> None:
    weights = LayerWeights.estimated(weights_bytes=4000 * MIB, parameters=7_000_000_000, layers=32,
                                     embedding_elements=32000 * 4096, tied=False)
    assert abs(sum(weights.layers) + weights.input_bytes + weights.output_bytes - 4000 * MIB) < 32
    assert isinstance(plan_split(weights, 1, 1, [Device("h", 1, 0), Device("w", 1, 0)]), SplitPlan)


@pytest.mark.parametrize(("asked", "expected"), [("auto", "unified"), ("streams", "streams"), ("unified", "unified")])
def test_a_split_model_shares_cached_prefixes_by_tags_unless_streams_are_asked_for(asked: str, expected: str) -> None:
    """auto is unified for a split: the streams layout would copy whole streams over RPC (split_kv_layout)."""
    from edgeopt.demo.smollm2 import smollm2_gguf_path
    from edgeopt.sources.model_source import open_model_source
    from edgeopt.sizing.shape import ShapeRequest
    from edgeopt.sizing.split_shape import WorkerMemory, split_serving_shape

    source = open_model_source(smollm2_gguf_path(), verify=False)
    workers = [WorkerMemory("a", 1024 * MIB), WorkerMemory("b", 1024 * MIB)]  # streams would fit: auto's own choice
    shape, _ = split_serving_shape(source.bundle_dir, source.manifest,
                                   ShapeRequest(context=512, max_sequences=4, kv_layout=asked), workers, 1024 * MIB)
    assert shape.kv_layout == expected
