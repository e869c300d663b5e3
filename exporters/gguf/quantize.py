"""Quantize an F16/F32/BF16 GGUF file with llama.cpp's own quantizer (through llama-cpp-python).

Using llama.cpp's quantizer rather than a reimplementation means the per-tensor type mixes
(``Q4_K_M`` keeping some tensors at Q6_K, shape fallbacks, ...) are exactly what every other
llama.cpp user gets. An importance matrix (exporters/gguf/imatrix_collect.py) is handed over in
memory, as llama-quantize --imatrix would after reading the file; the types that cannot work without
one are refused up front when there is none.
"""

from __future__ import annotations

import ctypes
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt.errors import ConfigError, ExportError
from edgeopt.exporters.gguf.llama_log import captured_llama_log
from edgeopt.exporters.gguf.quant_report import quantize_facts
from edgeopt.exporters.gguf.quant_types import FTYPE_IDS, NEEDS_IMATRIX
from edgeopt.progress import counted

if TYPE_CHECKING:
    from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix


def llama_ftype(name: str) -> int:
    """llama_ftype enum value of a quant name like ``Q4_K_M`` (case-insensitive)."""
    key = name.upper()
    if key not in FTYPE_IDS:
        raise ConfigError(f"unknown GGUF quant type {name!r}", f"valid: {', '.join(FTYPE_IDS)}")
    return FTYPE_IDS[key]


def check_quant(quant: str, has_imatrix: bool = True) -> int:
    """Refuse, before any work, a quant llama.cpp does not know or cannot make here; return its ftype."""
    ftype = llama_ftype(quant)
    if quant.upper() in NEEDS_IMATRIX and not has_imatrix:
        raise ConfigError(f"quant type {quant} needs an importance matrix, and none is computed for this export",
                          "drop --no-self-calibration (the model then writes its own calibration text), pass "
                          "--calibration-data FILE (text like what the model will see), or choose Q4_K_M, Q3_K_M or Q2_K")
    return ftype


def tensor_overrides(types: dict[str, str]) -> ctypes.Array:
    """llama.cpp's tensor type overrides (llama-quantize --tensor-type) for exact tensor names: a C array of
    (regex, ggml type) ended by a null pattern. The caller keeps it alive until the quantizer returns."""
    import gguf
    import llama_cpp

    entries = (llama_cpp.llama_model_tensor_override * (len(types) + 1))()
    for entry, (name, ttype) in zip(entries, sorted(types.items())):
        entry.pattern = ("^" + re.escape(name) + "$").encode()
        entry.type = int(gguf.GGMLQuantizationType[ttype])
    return entries


_TENSOR_COUNT = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]")  # llama-quant.cpp's "[  12/ 147] blk.0.attn_q.weight ..."


def _tensor_counter(update: Callable[[int, int], None]) -> Callable[[str], None]:
    def on_message(message: str) -> None:
        found = _TENSOR_COUNT.match(message)
        if found:
            update(int(found[1]), int(found[2]))
    return on_message


# llama-quant.cpp's line per tensor, whose type it keeps ("size = 0.035 MiB") or quantizes to ("size = 1.27 MiB ->
# 0.36 MiB (q4_K)"): "[  12/ 147]      blk.0.attn_q.weight - [  576,   576,     1,     1], type =    f16, ..."
_TENSOR_TYPE = re.compile(r"\[\s*\d+/\s*\d+\]\s+(?P<name>\S+)\s+-\s+\[[^\]]*\],\s+type\s*=\s*(?P<type>\w+),\s+"
                          r"size\s*=\s*[\d.]+\s+MiB(?:\s*->\s*[\d.]+\s+MiB\s+\((?P<new>\w+)\))?")


def _quantize_params(quant: str, threads: int, imatrix: ImportanceMatrix | None) -> tuple[Any, Any]:
    """llama.cpp's quantizer parameters for ``quant``, and the matrix buffers they point into (alive until the
    quantizer returns)."""
    ftype = check_quant(quant, imatrix is not None)
    import llama_cpp

    from edgeopt.exporters.gguf.imatrix_file import QuantizerImatrix

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = max(1, threads)
    weights = QuantizerImatrix(imatrix) if imatrix is not None else None
    if weights is not None:
        params.imatrix = weights.pointer()
    return params, weights


def recipe_types(src: Path, quant: str, threads: int = 2, imatrix: ImportanceMatrix | None = None) -> dict[str, str]:
    """{tensor: ggml type} llama.cpp's ``quant`` gives each tensor of ``src``, its mix rules and fallbacks
    included, found by its quantizer's dry run (no tensor quantized, no file written: a fraction of a second)."""
    import llama_cpp

    params, _weights = _quantize_params(quant, threads, imatrix)
    params.dry_run = True
    with captured_llama_log() as llama_log:
        status = llama_cpp.llama_model_quantize(str(src).encode(), b"", ctypes.byref(params))
    types = {m["name"]: (m["new"] or m["type"]).upper() for m in _TENSOR_TYPE.finditer(llama_log.text)}
    if status != 0 or not types:
        raise ExportError(f"llama.cpp's dry run of {quant} on {src} failed (status {status}): "
                          f"{llama_log.problems() or 'it logged no tensor'}",
                          "edgeopt optimize --verbose shows llama.cpp's full log")
    return types


def quantize_gguf(src: Path, dst: Path, quant: str, threads: int = 2, imatrix: ImportanceMatrix | None = None,
                  types: dict[str, str] | None = None) -> dict[str, Any]:
    """Write ``dst`` quantized to ``quant`` from the unquantized GGUF ``src``; return facts for the manifest.

    ``types`` ({tensor name: ggml type}) fixes those tensors' types and makes every other quantized tensor
    ``quant``'s base type (no mix rules): how a per-tensor mix (exporters/gguf/mix/build.py) is written. A type
    whose block does not divide a tensor's rows still falls back as llama.cpp decides."""
    import llama_cpp

    from edgeopt.runtimes.llama_cpp.model import init_backend

    params, _weights = _quantize_params(quant, threads, imatrix)
    # Routes llama.cpp's log (a line per tensor while quantizing) into Python logging, warnings only.
    init_backend()
    overrides = tensor_overrides(types) if types is not None else None  # alive until the call returns
    if overrides is not None:
        params.pure = True
        params.tt_overrides = ctypes.cast(overrides, ctypes.POINTER(type(overrides[0])))
    started = time.perf_counter()
    # a line or two per tensor: summarized, full with --verbose; its "[ 12/ 147]" counts drive the progress
    with counted(f"quantizing to {quant}") as update, captured_llama_log(_tensor_counter(update)) as llama_log:
        status = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if status != 0 or not dst.is_file():
        raise ExportError(f"llama.cpp failed to quantize {src} to {quant} (status {status}): "
                          f"{llama_log.problems() or 'it logged no warning or error'}",
                          "a checkpoint whose rows are not a multiple of 32 cannot be quantized; "
                          "edgeopt optimize --verbose shows llama.cpp's full log")
    return {"quantize_seconds": round(time.perf_counter() - started, 3), **quantize_facts(dst, llama_log)}
