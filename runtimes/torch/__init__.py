"""``--runtime torch``: serve a Hugging Face checkpoint bundle (written by ``--format torch``) with PyTorch.

Two paths, one entry point (:func:`load`):

* CPU (and any device without CUDA): :class:`~edgeopt.runtimes.torch.cpu_runtime.TorchRuntime` implements
  :class:`edgeopt.runtimes.base.Runtime`, so our engine schedules, samples and streams exactly as it does for
  llama.cpp and onnxruntime. This path is fully tested.
* CUDA: :mod:`edgeopt.runtimes.torch.paged` drives transformers' continuous batching with paged attention;
  see that module for how it plugs into the server.

This package may import torch and transformers; nothing on the serving path imports it unless the
bundle's runtime is ``torch``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import Runtime

if TYPE_CHECKING:
    from edgeopt.profiles import DeviceProfile
    from edgeopt.store.bundle import Manifest

KNOWN_OPTIONS = ("kv_capacity_tokens", "max_slots", "context_length", "threads", "device", "dtype", "cuda_graphs",
                 "profile")
NO_PREFIX_CACHE_OPTIONS = ("cache_slots",)  # accepted for every runtime; torch keeps no prefix cache


def load(bundle_dir: Path, manifest: Manifest, **options: Any) -> Runtime:
    """Load the bundle's checkpoint; options: kv_capacity_tokens, max_slots, context_length, threads,
    device ("auto" | "cpu" | "cuda"), dtype ("auto" | "fp32" | "fp16" | "bf16"), cuda_graphs (CUDA only: True /
    False captures the paged steps as CUDA graphs or not; unset, transformers decides), profile (the DeviceProfile
    whose platform ``auto`` picks from; default this machine's: one with an NPU is refused unless device="cpu")."""
    options = {k: v for k, v in options.items() if k not in NO_PREFIX_CACHE_OPTIONS}
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        raise ConfigError(f"the torch runtime does not take option(s) {unknown}", f"valid: {', '.join(KNOWN_OPTIONS)}")
    return _load(Path(bundle_dir), manifest, **{k: v for k, v in options.items() if v is not None})


def _load(bundle_dir: Path, manifest: Manifest, *, device: str = "auto", dtype: str = "auto",
          threads: int | None = None, kv_capacity_tokens: int | None = None, max_slots: int | None = None,
          context_length: int | None = None, cuda_graphs: bool | None = None,
          profile: DeviceProfile | None = None) -> Runtime:
    from edgeopt.runtimes.torch.loading import load_checkpoint, runtime_info, serving_device

    chosen = serving_device(device, profile)
    if not chosen.on_cpu:
        from edgeopt.runtimes.torch.paged import load_paged_runtime

        return load_paged_runtime(bundle_dir, manifest, dtype=dtype, kv_capacity_tokens=kv_capacity_tokens,
                                  max_slots=max_slots, context_length=context_length, device=chosen,
                                  cuda_graphs=cuda_graphs)
    if cuda_graphs is not None:
        raise ConfigError(f"cuda_graphs={cuda_graphs} applies to the CUDA paged engine, but this bundle runs on "
                          f"{chosen.name}", "leave cuda_graphs unset, or serve on a CUDA GPU")
    from edgeopt.runtimes.torch.cpu_runtime import TorchRuntime

    model, tokenizer, config = load_checkpoint(bundle_dir, manifest, chosen, dtype, threads)
    info = runtime_info(bundle_dir / manifest.model_file, config, tokenizer, kv_capacity_tokens, max_slots,
                        context_length)
    return TorchRuntime(model, tokenizer, info)
