"""llama.cpp's RPC devices in this process: the head's side of a model split across workers.

llama-cpp-python is built without GGML_RPC, so its libggml has no RPC backend. The RPC backend built from
the same llama.cpp sources (scripts/build_rpc_worker.sh: libggml-rpc.so) is loaded beside it: its only
dependency, libggml-base.so.0, is the one llama-cpp-python already loaded (same soname, same sources), and
``ggml_backend_register`` adds each worker's devices to llama-cpp-python's own registry, as llama-server's
``--rpc`` does (common/arg.cpp). Model loading then names those devices and the tensor split explicitly.

llama.cpp aborts the process when a worker cannot be reached (ggml-rpc.cpp: GGML_ABORT): callers check
every worker first (edgeopt.rpc.protocol.probe_workers) and the server runs supervised
(edgeopt.rpc.supervisor).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from edgeopt.errors import BackendError

_lock = threading.Lock()
_rpc_lib: ctypes.CDLL | None = None
_registered: dict[str, tuple[int, ...]] = {}  # endpoint -> its device pointers (registered once per process)
_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)  # ggml.h: ggml_abort_callback_t
_abort_handler: ctypes._CFuncPtr | None = None  # kept referenced: ggml holds only the C pointer


@dataclass(frozen=True)
class RpcOffload:
    """Where a split model's layers go: the workers' endpoints, in order, and llama.cpp's placement numbers
    (edgeopt.sizing.split.SplitPlan.offload)."""

    library: Path  # libggml-rpc.so of the same llama.cpp sources
    endpoints: tuple[str, ...]
    n_gpu_layers: int
    tensor_split: tuple[float, ...]  # one entry per worker device


def _loaded_by_llama_cpp(soname: str) -> ctypes.CDLL:
    """The copy of a ggml library that ``import llama_cpp`` loaded, wherever it came from (the wheel's lib/ or
    LLAMA_CPP_LIB_PATH: a CUDA build, say): asked for by its soname alone, the dynamic loader hands back the
    library already loaded under that soname. A path would name the wheel's copy, a second library whose
    state (the abort callback, registered backends) llama.cpp never reads when LLAMA_CPP_LIB_PATH is set."""
    return ctypes.CDLL(soname)


def _ggml() -> ctypes.CDLL:
    ggml = _loaded_by_llama_cpp("libggml.so.0")
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    ggml.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.POINTER(ctypes.c_size_t)]
    return ggml


def _load_rpc(library: Path) -> ctypes.CDLL:
    global _rpc_lib
    if _rpc_lib is None:
        # `import llama_cpp` loaded its libggml-base.so.0 already: libggml-rpc binds to that one (same soname).
        try:
            lib = ctypes.CDLL(str(library))
        except OSError as exc:
            raise BackendError(f"cannot load the RPC backend {library}: {exc}",
                               f"rebuild it for this llama-cpp-python: remove {library.parent.parent} and run "
                               "again (edgeopt builds it on first use)") from exc
        lib.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
        lib.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
        _rpc_lib = lib
    return _rpc_lib


def rpc_devices(library: Path, endpoints: tuple[str, ...]) -> tuple[int, ...]:
    """The device pointers of every worker, in order (connecting to each: check them first)."""
    with _lock:
        rpc, ggml = _load_rpc(library), _ggml()
        devices: list[int] = []
        for endpoint in endpoints:
            if endpoint not in _registered:
                reg = rpc.ggml_backend_rpc_add_server(endpoint.encode())
                if not reg:
                    raise BackendError(f"worker {endpoint} offers no device", "restart it with `edgeopt worker`")
                ggml.ggml_backend_register(reg)
                _registered[endpoint] = tuple(ggml.ggml_backend_reg_dev_get(reg, i)
                                              for i in range(ggml.ggml_backend_reg_dev_count(reg)))
            devices += _registered[endpoint]
        return tuple(devices)


def device_memory(device: int) -> tuple[int, int]:
    """(free, total) bytes a device reports; for a worker, asked over the head's own connection."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _ggml().ggml_backend_dev_memory(ctypes.c_void_p(device), ctypes.byref(free), ctypes.byref(total))
    return free.value, total.value


class OffloadParams:
    """The arrays llama_model_params points at, kept alive for the length of the load."""

    def __init__(self, offload: RpcOffload) -> None:
        self.devices = rpc_devices(offload.library, offload.endpoints)
        if len(self.devices) != len(offload.tensor_split):
            raise BackendError(f"the workers offer {len(self.devices)} devices; the plan split over "
                               f"{len(offload.tensor_split)}", "run one device per worker (edgeopt worker)")
        self.device_array = (ctypes.c_void_p * (len(self.devices) + 1))(*self.devices, None)
        split = list(offload.tensor_split) + [0.0] * (llama_cpp.LLAMA_MAX_DEVICES - len(offload.tensor_split))
        self.split_array = (ctypes.c_float * len(split))(*split)
        self.n_gpu_layers = offload.n_gpu_layers

    def apply(self, params: llama_cpp.llama_model_params) -> None:
        params.devices = ctypes.cast(self.device_array, ctypes.c_void_p)
        params.tensor_split = ctypes.cast(self.split_array, ctypes.POINTER(ctypes.c_float))
        params.n_gpu_layers = self.n_gpu_layers
        params.split_mode = llama_cpp.LLAMA_SPLIT_MODE_LAYER


def set_abort_handler(handler: Callable[[str], None]) -> None:
    """Run ``handler(message)`` when ggml is about to abort the process (ggml.c: ``ggml_abort`` calls the
    callback, then ``abort()`` once it returns). It runs on the aborting thread, which for a broken worker
    connection is the RPC dispatcher's: the rest of the process keeps running until it returns."""
    global _abort_handler

    def on_abort(message: bytes | None) -> None:
        handler((message or b"").decode("utf-8", "replace"))

    base = _loaded_by_llama_cpp("libggml-base.so.0")  # a callback set in another copy would never be called
    base.ggml_set_abort_callback.argtypes = [_ABORT_CALLBACK]
    base.ggml_set_abort_callback.restype = ctypes.c_void_p
    with _lock:
        _abort_handler = _ABORT_CALLBACK(on_abort)
        base.ggml_set_abort_callback(_abort_handler)
