"""``--runtime torch``: serve a Hugging Face checkpoint bundle (written by ``--format torch``) with PyTorch.

Two paths, one entry point (:func:`load`):

* CPU (and any device without CUDA): :class:`~runtimes.torch.cpu_runtime.TorchRuntime` implements
  :class:`runtimes.base.Runtime`, so our engine schedules, samples and streams exactly as it does for
  llama.cpp and onnxruntime. This path is fully tested.
* CUDA: :mod:`runtimes.torch.paged` drives transformers' continuous batching with paged attention;
  see that module for how it plugs into the server.

This package may import torch and transformers; nothing on the serving path imports it unless the
bundle's runtime is ``torch``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError

KNOWN_OPTIONS = ("kv_capacity_tokens", "max_slots", "context_length", "threads", "device", "dtype")


def load(bundle_dir: Path, manifest: Any, **options: Any) -> Any:
    """Load the bundle's checkpoint; options: kv_capacity_tokens, max_slots, context_length, threads,
    device ("auto" | "cpu" | "cuda"), dtype ("auto" | "fp32" | "fp16" | "bf16")."""
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        raise ConfigError(f"the torch runtime does not take option(s) {unknown}", f"valid: {', '.join(KNOWN_OPTIONS)}")
    from runtimes.torch.loading import load_runtime_for_bundle

    return load_runtime_for_bundle(Path(bundle_dir), manifest, **{k: v for k, v in options.items() if v is not None})
