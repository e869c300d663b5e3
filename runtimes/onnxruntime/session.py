"""Create ONNX Runtime sessions: execution providers and thread counts chosen from the device profile.

CPU is always available. CUDA (and TensorRT before it) are used when the profile's platform has a CUDA
GPU *and* the installed onnxruntime build carries those providers; asking explicitly for a
provider the build lacks is an error rather than a silent fallback, so a Jetson never ends up
decoding on its CPU without anyone noticing. For the same reason a platform with an accelerator no
provider here drives (an NPU) is refused unless the caller names the providers (``providers=["cpu"]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import BackendError, ConfigError
from edgeopt.profiles import DeviceProfile
from edgeopt.profiles.host import usable_cpu_count
from edgeopt.profiles.platform import AcceleratorKind
from edgeopt.runtimes.heap import return_freed_heap

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
DRIVES = frozenset({AcceleratorKind.CUDA_GPU})  # the accelerators the providers chosen for a profile drive
PROVIDER_ALIASES = {"cpu": CPU, "cuda": CUDA, "tensorrt": TENSORRT, "trt": TENSORRT}


def resolve_providers(requested: list[str] | None, profile: DeviceProfile | None) -> list[str]:
    """The provider list for a session, best first, always ending with CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if requested:
        names = [PROVIDER_ALIASES.get(p.lower(), p) for p in requested]
        missing = [n for n in names if n not in available]
        if missing:
            raise BackendError(f"execution provider(s) {missing} are not in this onnxruntime build",
                               f"available: {', '.join(available)}; install onnxruntime-gpu for CUDA/TensorRT")
        return names + ([CPU] if CPU not in names else [])
    if profile is not None:
        profile.platform.refuse_unsupported("onnxruntime", profile.name, DRIVES, cpu_option="providers=['cpu']")
    wants_gpu = profile is not None and profile.platform.has_cuda
    chosen = [p for p in (TENSORRT, CUDA) if wants_gpu and p in available]
    return chosen + [CPU]


def resolve_threads(threads: int | None, profile: DeviceProfile | None) -> int:
    """Intra-op threads: the explicit value, else the profile's big cores (all where they are alike), else this
    machine's."""
    if threads is not None:
        if threads < 1:
            raise ConfigError(f"threads={threads} must be >= 1", "pass --threads N with N >= 1")
        return threads
    if profile is not None and profile.platform.cpu.compute_threads:
        return profile.platform.cpu.compute_threads
    return usable_cpu_count()


def create_session(model_path: Path, threads: int, providers: list[str]) -> Any:
    """An InferenceSession with full graph optimization; a bad file becomes a BackendError."""
    import onnxruntime as ort

    if not model_path.is_file():
        raise BackendError(f"ONNX model {model_path} does not exist", "re-run edgeopt optimize --format onnx")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # warnings about unused initializers etc. are noise for users
    try:
        session = ort.InferenceSession(str(model_path), sess_options=opts, providers=providers)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise BackendError(f"onnxruntime could not load {model_path}: {exc}",
                           "check the bundle with edgeopt inspect, or re-export it") from exc
    # Building a session parses the whole model (a protobuf as large as the file) and the graph, then frees them:
    # SmolLM2-135M fp32 (a 514 MiB file) idled at 993 MiB in `edgeopt serve`, 809 MiB with this call, and peaked
    # 183 MiB lower under load (edgeopt/formats/onnx/memory.py).
    return_freed_heap()
    return session
