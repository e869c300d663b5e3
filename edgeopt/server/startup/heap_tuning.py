"""glibc's heap, tuned for a loop that allocates the same few hundred kilobytes every token.

Each decode step makes arrays of a vocabulary row or more (a logits row of 49k-262k floats, its float64
copy, the probabilities a draw needs). glibc serves blocks over its mmap threshold (128 KiB, raised only as
far as the largest block freed so far) with fresh mappings, and gives memory at the top of the heap back
to the system once 128 KiB are free there; either way the next step's arrays start on untouched pages, and
the page faults cost more than the arithmetic. Measured on a 49k row (AMD EPYC): drawing one token at
temperature 0.7 took 0.53 ms as glibc ships, 0.14 ms with the thresholds below. The heap then keeps up to
TRIM_THRESHOLD of freed memory (and serves blocks under MMAP_THRESHOLD from itself), a bounded amount the
memory budget's overhead covers. Other C libraries (musl, macOS) are left as they are.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger("edgeopt.server")

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 * 2**20  # a 262k-token float64 logits row is 2 MiB: served from the heap
TRIM_THRESHOLD = 16 * 2**20


def keep_freed_heap() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:  # a glibc without it (never seen): nothing to tune
        return False
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not done:
        log.warning("glibc's mallopt refused the heap thresholds; sampling runs with its defaults")
    return done
