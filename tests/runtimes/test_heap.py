"""The C heap's freed pages go back to the system (runtimes/heap.py): what a freed buffer held leaves RssAnon."""

from __future__ import annotations

import ctypes
import platform

import pytest

from edgeopt.runtimes.heap import return_freed_heap


def _anonymous_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's heap")
def test_freed_small_blocks_are_given_back() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    # 64 MiB in blocks below glibc's mmap threshold, so they come from the heap and stay there when freed
    blocks = [libc.malloc(64 * 1024) for _ in range(1024)]
    for block in blocks:
        ctypes.memset(block, 1, 64 * 1024)
    held = _anonymous_kib()
    for block in reversed(blocks[:-1]):  # the last stays: the heap's top is not free, so glibc cannot shrink it
        libc.free(block)
    assert return_freed_heap()
    assert _anonymous_kib() < held - 32 * 1024
    libc.free(blocks[-1])
