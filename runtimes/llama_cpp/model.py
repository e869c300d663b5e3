"""Load a GGUF with llama.cpp and read what the engine needs to size itself from the model."""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp

from edgeopt.errors import BackendError, BundleError
from edgeopt.sizing.budget import kv_elements_per_token
from edgeopt.runtimes.llama_cpp.amx_guard import guard_amx_buffers

if TYPE_CHECKING:
    from edgeopt.profiles import DeviceProfile
    from edgeopt.runtimes.llama_cpp.rpc import RpcOffload

log = logging.getLogger("llama_cpp")
_init_lock = threading.Lock()
_initialised = False
_GGML_LOG_LEVEL_WARN = 3
_GGML_LOG_LEVEL_ERROR = 4  # 5 is "continuation of the previous line": dropped with its INFO parent


# With a unified KV cache n_ctx is the pool shared by all sequences, so it exceeding the training
# context is expected; the per-sequence limit is enforced by the engine instead.
_EXPECTED_WARNINGS = ("possible training context overflow",)


@llama_cpp.llama_log_callback
def _log_to_python(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp is chatty at INFO (hundreds of lines per load); keep warnings and errors only.
    if level not in (_GGML_LOG_LEVEL_WARN, _GGML_LOG_LEVEL_ERROR) or not text:
        return
    message = text.decode("utf-8", errors="replace").rstrip()
    if any(expected in message for expected in _EXPECTED_WARNINGS):
        log.debug(message)
    else:
        log.log(logging.WARNING if level == _GGML_LOG_LEVEL_WARN else logging.ERROR, message)


def route_log_to_python() -> None:
    """Send llama.cpp's log to Python logging (warnings and errors): at start, and again after a
    capture (edgeopt.exporters.gguf.llama_log) borrowed the callback."""
    llama_cpp.llama_log_set(_log_to_python, ctypes.c_void_p(0))


def init_backend() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            route_log_to_python()
            llama_cpp.llama_backend_init()
            guard_amx_buffers()  # before any model load: the defaults below then come without them
            _initialised = True


@dataclass(frozen=True)
class ModelFacts:
    layers: int
    kv_heads: int
    head_dim_k: int
    head_dim_v: int
    context_train: int
    file_bytes: int

    @property
    def kv_elements_per_token(self) -> int:
        """As llama.cpp reads the file (K and V head sizes may differ): what sizing is checked against."""
        return kv_elements_per_token(self.layers, self.kv_heads, self.head_dim_k, self.head_dim_v)


def default_gpu_layers(profile: DeviceProfile) -> int:
    """-1 (every layer) where the profile's platform has a CUDA GPU and this build offloads, else 0."""
    return -1 if profile.platform.has_cuda and llama_cpp.llama_supports_gpu_offload() else 0


def load_model(path: Path, n_gpu_layers: int, offload: RpcOffload | None = None) -> llama_cpp.llama_model_p:
    """``offload``: layers split onto RPC workers (runtimes/llama_cpp/rpc.py); it sets n_gpu_layers itself."""
    if not path.is_file():
        raise BundleError(f"GGUF file {path} does not exist", "re-run edgeopt optimize --format gguf")
    init_backend()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    kept_alive = None
    if offload is not None:
        from edgeopt.runtimes.llama_cpp.rpc import OffloadParams

        kept_alive = OffloadParams(offload)
        kept_alive.apply(params)
    # The default load mode (AUTO) memory-maps the file wherever every device can, so the weights stay in
    # the page cache, shared with any other process. (This llama.cpp has no use_mmap field: setting one on
    # the ctypes struct, as this line once did, only added a Python attribute.)
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    del kept_alive  # llama.cpp copied the device list and split while loading
    if not model:
        raise BackendError(f"llama.cpp could not load {path}", "check that it is a GGUF this llama-cpp-python "
                           "supports (pip install -U llama-cpp-python) and not truncated")
    return model


def model_facts(model: llama_cpp.llama_model_p, path: Path) -> ModelFacts:
    heads = llama_cpp.llama_model_n_head(model)
    default_head_dim = llama_cpp.llama_model_n_embd(model) // max(heads, 1)
    arch = _meta(model, "general.architecture") or "llama"
    return ModelFacts(
        layers=llama_cpp.llama_model_n_layer(model),
        kv_heads=llama_cpp.llama_model_n_head_kv(model),
        head_dim_k=int(_meta(model, f"{arch}.attention.key_length") or default_head_dim),
        head_dim_v=int(_meta(model, f"{arch}.attention.value_length") or default_head_dim),
        context_train=llama_cpp.llama_model_n_ctx_train(model),
        file_bytes=path.stat().st_size,
    )


def _meta(model: llama_cpp.llama_model_p, key: str) -> str | None:
    buffer = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buffer, len(buffer))
    return buffer.value.decode() if n >= 0 else None
