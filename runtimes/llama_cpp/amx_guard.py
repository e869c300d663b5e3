"""llama.cpp's AMX weight buffers stay off on CPUs that have AMX, for every model this process loads.

With them on, llama_decode crashes (SIGSEGV) on tiny Q8_0 files and on the real SmolLM2-135M-Instruct Q4_1
GGUF with the llama-cpp-python edgeopt pins, on an AMX-capable Xeon (seen in the test suite and in
llama-cpp-python's own high-level ``Llama``). With them off (``use_extra_bufts``) the same files decode;
CPUs without AMX (every edge board) keep llama.cpp's repacked weight layouts.

Our own loader sets the field; llama-cpp-python's high-level ``Llama`` (the GGUF scorer of ``optimize``'s
evaluation, and tests) has no argument for it and builds its parameters from
``llama_model_default_params``, so on an AMX CPU that function is wrapped to return them already off.
"""

from __future__ import annotations

import llama_cpp
import llama_cpp.llama_cpp as llama_cpp_bindings

_original_defaults = llama_cpp_bindings.llama_model_default_params


def cpu_has_amx() -> bool:
    """Whether this llama.cpp build drives Intel AMX on this CPU."""
    return b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


def guard_amx_buffers() -> None:
    """Make every later model load in this process (ours and ``Llama``'s) skip the AMX buffers, if any.
    Idempotent; a no-op on CPUs without AMX."""
    if llama_cpp_bindings.llama_model_default_params is not _original_defaults or not cpu_has_amx():
        return

    def defaults_without_amx_buffers() -> llama_cpp.llama_model_params:
        params = _original_defaults()
        params.use_extra_bufts = False
        return params

    # Both names: the package re-exports the bindings, and Llama reads the bindings module's.
    llama_cpp_bindings.llama_model_default_params = defaults_without_amx_buffers
    llama_cpp.llama_model_default_params = defaults_without_amx_buffers
