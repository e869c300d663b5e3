"""Every weight's matrix-multiply input, read out of llama.cpp's graph while it runs token chunks through a GGUF.

What ``llama-imatrix`` does, from Python: the context's eval callback (``cb_eval``) is asked about each graph
node; for a ``MUL_MAT`` whose first source is a weight (``blk.N.*.weight``, the output matrix) it answers yes,
and once the node's inputs are computed it is called again and hands the second source (the activations,
float32, one row per token) to ``visit``. The model is memory-mapped, so an 8B's 16 GB of F16 weights are page
cache, not the process's own memory; only the graph's activations are.

The callback reads ``struct ggml_tensor`` through ctypes. Its layout has been stable across many llama.cpp
releases, and it is checked against llama.cpp's own ``ggml_get_name`` on the first node before anything is
trusted.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import llama_cpp
import numpy as np

from edgeopt.errors import BackendError
from edgeopt.progress import progress

_MAX_DIMS, _MAX_SRC, _MAX_OP_PARAMS, _MAX_NAME = 4, 10, 64, 64
_GGML_TYPE_F32 = 0
MIN_ROWS = 16  # llama-imatrix ignores smaller batches: a handful of tokens says little about a column


class _GgmlTensor(ctypes.Structure):
    """ggml.h's ``struct ggml_tensor`` (the fields read here and everything before them)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * _MAX_DIMS), ("nb", ctypes.c_size_t * _MAX_DIMS),
                ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * (_MAX_OP_PARAMS // 4)), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * _MAX_SRC), ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("name", ctypes.c_char * _MAX_NAME)]


def _ggml() -> ctypes.CDLL:
    ggml = ctypes.CDLL("libggml-base.so.0")  # the copy llama_cpp loaded (the loader answers by soname)
    ggml.ggml_op_name.argtypes = [ctypes.c_int]
    ggml.ggml_op_name.restype = ctypes.c_char_p
    ggml.ggml_get_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_get_name.restype = ctypes.c_char_p
    ggml.ggml_backend_buffer_is_host.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_buffer_is_host.restype = ctypes.c_bool
    ggml.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    return ggml


def _op_id(ggml: ctypes.CDLL, name: bytes) -> int:
    for op in range(512):  # GGML_OP_COUNT is ~100; ggml_op_name of an unknown id is never reached
        if ggml.ggml_op_name(op) == name:
            return op
    raise BackendError(f"this llama.cpp has no {name.decode()} operation", "pip install -U llama-cpp-python")


def weight_name(tensor_name: bytes) -> str:
    """``CUDA0#blk.0.attn_k.weight#0`` -> ``blk.0.attn_k.weight`` (the scheduler names copies so)."""
    name = tensor_name.decode(errors="replace")
    parts = name.split("#")
    return parts[1] if len(parts) > 1 else name


class MatmulInputTap:
    """The ``cb_eval`` callback: for each weight matmul that passes ``wants(weight name)``, ``visit(weight name,
    rows)``, where rows is a float32 array of shape (tokens, input columns), valid only during the call."""

    def __init__(self, wants: Callable[[str], bool], visit: Callable[[str, np.ndarray], None],
                 min_rows: int = MIN_ROWS) -> None:
        """``min_rows``: smaller batches are not shown (llama-imatrix's rule for calibration chunks; text being
        decoded, a few sequences a step, passes 1: each step then carries every sequence's newest token)."""
        self._min_rows = min_rows
        self._ggml = _ggml()
        self._mul_mat = _op_id(self._ggml, b"MUL_MAT")
        self._wants, self._visit = wants, visit
        self._checked = False
        self._computed_input = 0  # the input the last visited matmul read (its struct's address), still valid
        self.error: BaseException | None = None  # raised by run_chunks: an exception cannot cross the C frame
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def new_graph(self) -> None:
        """Before each decode: tensors of the next graph may sit at the addresses of this one's."""
        self._computed_input = 0

    def _on_node(self, address: int, ask: bool, _user_data: int) -> bool:
        try:
            return self._handle(address, ask)
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised after the decode
            self.error = self.error or exc
            return False

    def _handle(self, address: int, ask: bool) -> bool:
        node = _GgmlTensor.from_address(address)
        if not self._checked:
            if node.name != self._ggml.ggml_get_name(address):
                raise BackendError("this llama.cpp's ggml_tensor layout is not the one edgeopt reads",
                                   "install a llama-cpp-python release edgeopt supports (pyproject.toml)")
            self._checked = True
        if node.op != self._mul_mat or not node.src[0] or not node.src[1]:
            return False
        weight = _GgmlTensor.from_address(node.src[0])
        inputs = _GgmlTensor.from_address(node.src[1])
        name = weight_name(weight.name)
        if ask:
            wanted = (inputs.type == _GGML_TYPE_F32 and inputs.nb[0] == 4 and inputs.ne[1] >= self._min_rows
                      and weight.ne[2] == weight.ne[3] == 1 and self._wants(name))
            if wanted and node.src[1] == self._computed_input:
                # k and v read the input q read, up reads gate's: it is computed and still alive (this matmul has
                # yet to read it), so it is read now, without making the scheduler stop the graph here.
                self._visit(name, self._rows(node.src[1], inputs))
                return False
            return wanted
        self._visit(name, self._rows(node.src[1], inputs))
        self._computed_input = node.src[1]
        return True

    def _rows(self, address: int, inputs: _GgmlTensor) -> np.ndarray:
        """The activations as (tokens, columns); 3-D inputs (a batch of sequences) are flattened into tokens."""
        ne, nb = list(inputs.ne), list(inputs.nb)
        span = sum((n - 1) * s for n, s in zip(ne, nb)) + 4
        if self._ggml.ggml_backend_buffer_is_host(inputs.buffer):
            raw = (ctypes.c_char * span).from_address(inputs.data)
        else:  # an accelerator's buffer: copied to the host first, as llama-imatrix does
            raw = ctypes.create_string_buffer(span)
            self._ggml.ggml_backend_tensor_get(address, raw, 0, span)
        flat = np.frombuffer(raw, dtype=np.float32, count=span // 4)
        view = np.lib.stride_tricks.as_strided(flat, shape=(ne[3], ne[2], ne[1], ne[0]),
                                               strides=(nb[3], nb[2], nb[1], nb[0]), writeable=False)
        return view.reshape(-1, ne[0])


@contextmanager
def tapped_context(gguf: Path, tap: MatmulInputTap, chunk_tokens: int, threads: int) -> Iterator[object]:
    """A context over ``gguf`` (memory-mapped, on the CPU) with ``tap`` as its eval callback, one sequence of at
    most ``chunk_tokens`` tokens, a logits row for every token (so the output matrix sees every token too)."""
    from edgeopt.runtimes.llama_cpp.model import load_model

    model = load_model(Path(gguf), n_gpu_layers=0)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = params.n_outputs_max = chunk_tokens
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = threads
    params.no_perf = True
    params.cb_eval = tap.callback
    params.cb_eval_user_data = None
    ctx = llama_cpp.llama_init_from_model(model, params)
    try:
        if not ctx:
            raise BackendError(f"llama.cpp could not create a {chunk_tokens}-token context over {gguf}",
                               "free memory, or use shorter calibration chunks")
        yield ctx
    finally:
        if ctx:
            llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


def run_chunks(gguf: Path, chunks: list[list[int]], tap: MatmulInputTap, label: str,
               report: Callable[[str], None] = lambda _m: None) -> None:
    """Decode each chunk as an independent sequence through ``gguf`` with ``tap`` watching; threads follow the
    load (runtimes/llama_cpp/threads.py: a spinning thread beside a busy neighbour stalls every barrier)."""
    import os

    from edgeopt.runtimes.base import StepInput
    from edgeopt.runtimes.llama_cpp.batch import NumpyBatch
    from edgeopt.runtimes.llama_cpp.threads import ThreadGovernor

    size = max(len(c) for c in chunks)
    with tapped_context(gguf, tap, size, os.cpu_count() or 1) as ctx:
        governor = ThreadGovernor(lambda n: llama_cpp.llama_set_n_threads(ctx, n, n), os.cpu_count() or 1)
        llama_cpp.llama_set_n_threads(ctx, governor.threads, governor.threads)
        batch = NumpyBatch(size)
        for i, chunk in enumerate(progress(chunks, label)):
            governor.before_decode()
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
            batch.fill([StepInput(0, chunk, 0, want_logits=True, all_logits=True)])  # a logits row per token: the output matrix's too
            tap.new_graph()
            status = llama_cpp.llama_decode(ctx, batch.struct)
            if tap.error is not None:
                raise tap.error
            if status != 0:
                raise BackendError(f"llama.cpp failed to decode calibration chunk {i + 1} (status {status})",
                                   "check that the GGUF loads with llama.cpp and that memory is free")
            report(f"calibration: chunk {i + 1}/{len(chunks)}")
