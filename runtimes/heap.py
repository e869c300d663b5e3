"""The C heap's freed pages, given back to the system.

glibc keeps what C code frees (llama.cpp's and ONNX Runtime's buffers, a model's tables) in its heaps; it trims the
main heap's top only, and a worker thread's heap never. A process that frees a model to load the next (a server's
swap, the mix's 22 groups scored one file after another) would otherwise keep the freed model resident under the next.
"""

from __future__ import annotations

import ctypes
import platform


def return_freed_heap() -> bool:
    """Give the heap's free pages back to the system (glibc's malloc_trim); False where there is no glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except AttributeError:  # a glibc without it (never seen)
        return False
    trim(0)
    return True
