"""Convert a Hugging Face checkpoint directory to an unquantized GGUF file (F32, F16 or BF16).

The file is written in a stream: all tensor descriptions go into the header first (their sizes
are known from the safetensors headers alone), then each tensor is read, reordered, cast, written
and dropped before the next is touched. Peak memory is a few copies of the largest tensor.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import ConfigError, ExportError
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.progress import progress
from edgeopt.exporters.gguf.architectures.extras import extras_for
from edgeopt.exporters.gguf.metadata import add_hyperparameters, llama3_rope_factors, rope_scaling
from edgeopt.exporters.gguf.model_name import gguf_model_name
from edgeopt.exporters.gguf.safetensors_reader import SafetensorsCheckpoint, f32_to_bf16
from edgeopt.exporters.gguf.tensor_names import plan_tensors
from edgeopt.exporters.gguf.vocab import add_vocab, load_vocab

UNQUANTIZED = ("F32", "F16", "BF16")


class F16OverflowError(ExportError):
    """A tensor holds a value F16 cannot (a bf16 or f32 checkpoint can)."""

_FTYPE_IDS = {"F32": 0, "F16": 1, "BF16": 32}  # llama_ftype values
F16_MAX = 65504.0


def _cast(values: np.ndarray, out_type: str) -> tuple[np.ndarray, Any]:
    """Array to write and its ggml type. 1-D tensors (norms, biases) always stay F32, as llama.cpp expects."""
    import gguf

    if values.ndim == 1 or out_type == "F32":
        return np.ascontiguousarray(values, dtype=np.float32), gguf.GGMLQuantizationType.F32
    if out_type == "F16":
        from edgeopt.runtimes.llama_cpp.float_casts import f32_to_f16

        out = f32_to_f16(values)
        # Bounds first (0.06 s a 100M elements): only a tensor reaching F16's largest magnitude, either sign, is
        # searched for an infinity the cast made (a checkpoint's own infinities stay what they were).
        if (not -F16_MAX <= values.min() <= values.max() <= F16_MAX
                and np.isinf(out).any() and not np.isinf(values).any()):
            raise F16OverflowError(f"a weight of magnitude {float(np.abs(values).max()):.4g} is past F16's range "
                                   "(65504)", "convert to BF16 (or F32), which hold it")
        return out, gguf.GGMLQuantizationType.F16
    return f32_to_bf16(values), gguf.GGMLQuantizationType.BF16


def _out_spec(shape: tuple[int, ...], out_type: str) -> tuple[np.dtype, int, Any]:
    import gguf

    n = int(np.prod(shape))
    if len(shape) == 1 or out_type == "F32":
        return np.dtype(np.float32), 4 * n, gguf.GGMLQuantizationType.F32
    if out_type == "F16":
        return np.dtype(np.float16), 2 * n, gguf.GGMLQuantizationType.F16
    return np.dtype(np.uint16), 2 * n, gguf.GGMLQuantizationType.BF16


def convert_checkpoint(model_dir: Path, out_path: Path, out_type: str = "F16") -> dict[str, Any]:
    """Write ``out_path`` from the checkpoint in ``model_dir``; return facts for the manifest."""
    import gguf

    if out_type not in UNQUANTIZED:
        raise ConfigError(f"convert_checkpoint writes {', '.join(UNQUANTIZED)}, not {out_type!r}",
                          "quantize the F16 output with edgeopt.exporters.gguf.quantize.quantize_gguf")
    started = time.perf_counter()
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    spec = load_model_spec(str(model_dir))
    extras = extras_for(spec.arch)
    checkpoint = SafetensorsCheckpoint(model_dir)
    plans = plan_tensors(spec, checkpoint.names(), config)
    for plan in plans:
        expected = next(t.shape for t in spec.tensors() if t.name == plan.hf_name)
        if checkpoint.shape(plan.hf_name) != expected:
            raise ExportError(f"tensor {plan.hf_name} has shape {checkpoint.shape(plan.hf_name)}, config implies {expected}",
                              "save the config that matches the (pruned) weights")
    vocab = load_vocab(model_dir, spec.vocab_size, config)
    if len(vocab.tokens) != spec.vocab_size:
        raise ExportError(f"tokenizer has {len(vocab.tokens)} tokens but the embedding has {spec.vocab_size} rows",
                          "resize the model's embeddings to the tokenizer (model.resize_token_embeddings)")

    writer = gguf.GGUFWriter(str(out_path), spec.arch)
    add_hyperparameters(writer, spec, config, gguf_model_name(model_dir))
    writer.add_file_type(_FTYPE_IDS[out_type])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_vocab(writer, vocab)

    extra: list[tuple[str, np.ndarray]] = []
    scaling = rope_scaling(config)
    if scaling is not None and scaling["rope_type"] == "llama3":
        extra.append(("rope_freqs.weight", llama3_rope_factors(scaling, spec)))
    extra += extras.extra_tensors(spec, config)
    for name, values in extra:
        writer.add_tensor_info(name, values.shape, values.dtype, values.nbytes)
    for plan in plans:
        dtype, nbytes, raw = _out_spec(checkpoint.shape(plan.hf_name), out_type)
        writer.add_tensor_info(plan.gguf_name, checkpoint.shape(plan.hf_name), dtype, nbytes, raw_dtype=raw)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, values in extra:
        writer.write_tensor_data(values)
    for plan in progress(plans, f"converting to GGUF {out_type}"):
        with checkpoint.open_f32(plan.hf_name) as values:
            if plan.transform is not None:
                values = plan.transform(values)
            data, _ = _cast(values, out_type)
        writer.write_tensor_data(data)
        del data, values
    writer.close()
    return {"gguf_arch": spec.arch, "tokenizer_model": vocab.model, "tokenizer_pre": vocab.pre,
            "n_tensors": len(plans) + len(extra), "convert_seconds": round(time.perf_counter() - started, 3)}
