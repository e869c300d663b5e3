"""Load a torch bundle: pick the device (the profile's platform decides) and dtype, load the checkpoint and
tokenizer, size the slots."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt.errors import BundleError, ConfigError
from edgeopt.profiles import DeviceProfile, load_profile
from edgeopt.profiles.platform import Accelerator, AcceleratorKind, torch_device_name
from edgeopt.runtimes.base import RuntimeInfo
from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer, eos_token_ids

if TYPE_CHECKING:
    from edgeopt.store.bundle import Manifest

AUTO = "auto"  # the device and dtype options' "let the platform and the checkpoint decide"
DRIVES = frozenset({AcceleratorKind.CUDA_GPU})  # the accelerators torch runs on here
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
DEFAULT_CONTEXT = 4096
DEFAULT_SLOTS = 16


@dataclass(frozen=True)
class TorchDevice:
    """Where a torch bundle runs, as the platform decided: its accelerator, or None for the CPU."""

    placement: Accelerator | None

    @property
    def on_cpu(self) -> bool:
        return self.placement is None

    @property
    def name(self) -> str:
        """torch's name for it, what ``model.to`` and tensors take."""
        return torch_device_name(self.placement)


def pick_device(requested: str, profile: DeviceProfile | None = None) -> TorchDevice:
    """The device ``requested`` (``auto``, ``cpu``, ``cuda``) names on ``profile``'s platform (default: this
    machine's). ``auto`` takes the CUDA GPU when torch sees it too; on a platform with an accelerator torch
    cannot drive (an NPU) it refuses rather than pick the CPU unnoticed."""
    import torch

    profile = profile or load_profile("host")
    if requested == AUTO:
        profile.platform.refuse_unsupported("torch", profile.name, DRIVES, cpu_option="device='cpu'")
    placement = profile.platform.placement(requested)
    if placement is not None and not torch.cuda.is_available():
        if requested == AUTO:  # a CPU build of torch on a machine with a GPU: the CPU, as it always was
            return TorchDevice(None)
        raise ConfigError("device 'cuda' was requested but torch sees no CUDA device",
                          "install a CUDA build of torch, or serve with device=cpu")
    return TorchDevice(placement)


def serving_device(requested: str = AUTO, profile: DeviceProfile | None = None) -> TorchDevice:
    """The device a torch bundle runs on: EDGEOPT_TORCH_DEVICE when set, else ``requested``. The runtime and
    the bundle's scorer both ask here, so evaluation measures the device the server will use."""
    return pick_device(os.environ.get("EDGEOPT_TORCH_DEVICE", requested), profile)


def pick_dtype(requested: str, checkpoint_dtype: str, device: TorchDevice) -> str:
    """The checkpoint's dtype on CUDA; on CPU fp16 is upcast to fp32 (CPU fp16 kernels are slow or missing)."""
    if requested != AUTO:
        if requested not in DTYPES:
            raise ConfigError(f"torch dtype {requested!r} is not supported", f"valid: auto, {', '.join(DTYPES)}")
        return DTYPES[requested]
    if device.on_cpu and checkpoint_dtype == "float16":
        return "float32"
    return checkpoint_dtype if checkpoint_dtype in DTYPES.values() else "float32"


def read_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.is_file():
        raise BundleError(f"{path} is missing: the bundle's model directory is not a Hugging Face checkpoint",
                          "re-run edgeopt optimize --format torch")
    return json.loads(path.read_text())


def _json_if_present(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def checkpoint_dtype(config: dict[str, Any]) -> str:
    """The dtype the checkpoint was saved in (transformers >= 5 writes ``dtype``, older ``torch_dtype``)."""
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")


def load_checkpoint(bundle_dir: Path, manifest: Manifest, device: TorchDevice, dtype: str, threads: int | None,
                    attn_implementation: str = "sdpa") -> tuple[Any, Any, dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM

    from edgeopt.sources.model_spec import reference_attention

    if threads:
        torch.set_num_threads(int(threads))
    model_dir = bundle_dir / manifest.model_file
    config = read_config(model_dir)
    torch_dtype = getattr(torch, pick_dtype(dtype, checkpoint_dtype(config), device))
    # A soft-capped model (Gemma 2) computes correctly only in eager attention; SDPA drops the cap.
    attn_implementation = reference_attention(model_dir).get("attn_implementation", attn_implementation)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype,
                                                     attn_implementation=attn_implementation)
    except (OSError, ValueError) as exc:
        raise BundleError(f"cannot load the checkpoint in {model_dir}: {exc}",
                          "re-run edgeopt optimize --format torch") from exc
    model.to(device.name).eval()
    tokenizer = BundleTokenizer(bundle_dir / manifest.tokenizer_dir / "tokenizer.json")
    return model, tokenizer, config


def runtime_info(model_dir: Path, config: dict[str, Any], tokenizer: BundleTokenizer,
                 kv_capacity_tokens: int | None, max_slots: int | None, context_length: int | None) -> RuntimeInfo:
    model_max = int(config.get("max_position_embeddings") or DEFAULT_CONTEXT)
    context = min(context_length or DEFAULT_CONTEXT, model_max)
    slots = max_slots or DEFAULT_SLOTS
    capacity = kv_capacity_tokens or slots * context
    if context < 2 or slots < 1 or capacity < 1:
        raise ConfigError(f"torch runtime sizing context_length={context}, max_slots={slots}, "
                          f"kv_capacity_tokens={capacity} is invalid", "pass positive values")
    bos = config.get("bos_token_id")
    # The engine prepends nothing itself: add_bos says whether encode(add_special=True) already does.
    adds_bos = bool(bos is not None and tokenizer.encode("", add_special=True)[:1] == [bos])
    return RuntimeInfo(vocab_size=int(config["vocab_size"]), kv_capacity_tokens=capacity, max_slots=slots,
                       context_length=context,
                       eos_token_ids=eos_token_ids(config, _json_if_present(model_dir / "generation_config.json"),
                                                   _json_if_present(tokenizer.directory / "tokenizer_config.json"),
                                                   tokenizer),
                       bos_token_id=bos if isinstance(bos, int) else None, add_bos=adds_bos)
