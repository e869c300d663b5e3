"""SmolLM3 (``SmolLM3ForCausalLM``) as llama.cpp's ``smollm3`` architecture.

The Llama layout, but some layers attend without rotary embeddings (NoPE). transformers reads which
from ``no_rope_layers`` (1 = rope, 0 = none); llama.cpp reads nothing: its smollm3 graph skips rope
on every 4th layer (layer i with (i + 1) % 4 == 0), which is the pattern SmolLM3 ships with. A
checkpoint with another pattern (a different ``no_rope_layer_interval``, or layers removed) cannot be
expressed in GGUF and is refused, naming the layers that differ.
"""

from __future__ import annotations

from edgeopt.errors import ExportError
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.exporters.gguf.architectures.extras import ArchExtras, Config

LLAMA_CPP_NOPE_INTERVAL = 4  # hard-coded in llama.cpp's smollm3 graph (n_no_rope_layer_step)


def llama_cpp_rope_layers(num_layers: int) -> list[int]:
    """1 where llama.cpp's smollm3 graph applies rope, 0 where it does not."""
    return [int((i + 1) % LLAMA_CPP_NOPE_INTERVAL != 0) for i in range(num_layers)]


def rope_layers(spec: ModelSpec, config: Config) -> list[int]:
    """The checkpoint's own pattern, as transformers derives it."""
    if config.get("no_rope_layers") is not None:
        return [int(bool(v)) for v in config["no_rope_layers"]]
    interval = int(config.get("no_rope_layer_interval", LLAMA_CPP_NOPE_INTERVAL))
    return [int((i + 1) % interval != 0) for i in range(spec.num_layers)]


def check(spec: ModelSpec, config: Config) -> None:
    ours, theirs = rope_layers(spec, config), llama_cpp_rope_layers(spec.num_layers)
    if ours != theirs:
        differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
        raise ExportError(
            f"{spec.source}: SmolLM3 layers without rope are {[i for i, v in enumerate(ours) if not v]}, but "
            f"llama.cpp's smollm3 graph fixes them at every {LLAMA_CPP_NOPE_INTERVAL}th layer "
            f"({[i for i, v in enumerate(theirs) if not v]}); layers {differ} would compute differently",
            "export with --format onnx (which follows no_rope_layers), or keep SmolLM3's layer pattern "
            "(do not remove layers)")
    if config.get("use_sliding_window") and config.get("sliding_window"):
        raise ExportError(f"{spec.source}: SmolLM3 with use_sliding_window is not supported by llama.cpp's "
                          "smollm3 graph (it attends to the whole context)", "export with --format onnx")


EXTRAS = ArchExtras(rope_pairs_interleaved=True, check=check)
