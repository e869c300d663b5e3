"""llama.cpp models a server of several models unloaded, kept loaded (without their contexts) so that a swap back
skips llama.cpp's model load.

That load is mostly the vocabulary's tables, built in C on one core: 1.1 s of CPU for Gemma 3's 262k tokens on a
2-core EPYC, most of the time a conversation waited for its first token after its model was swapped out (the
context, KV cache and engine take 0.1 s; the prefix cache comes back from the swap space). A kept model holds
what llama.cpp allocated for it, which is not its weights: those are memory-mapped from the file, and their
pages are dropped from the process when the model is kept (``madvise(MADV_DONTNEED)``: they stay in the page
cache, as for llama-server's router, and fault back in on the next pass). What it holds, measured as the growth
of the process's anonymous memory across the load (the vocabulary's tables, the weights llama.cpp repacks for
the CPU: ~50 MiB for Gemma 3), counts against the residency's budget (edgeopt.server.models.residency), which
frees kept models, oldest first, before it unloads any loaded one: a model is only kept in room the budget has.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import llama_cpp

log = logging.getLogger(__name__)

MADV_DONTNEED = 4  # Linux


class KeptModels:
    """Models kept by key (file identity and GPU layers), oldest first; each with the bytes it holds."""

    def __init__(self) -> None:
        self._models: OrderedDict[Hashable, tuple[Any, int, Path]] = OrderedDict()
        self._lock = threading.Lock()  # runtimes close and load in worker threads

    def keep(self, key: Hashable, model: Any, *, held_bytes: int, path: Path) -> None:
        path = Path(path).resolve()
        drop_mapped_pages(path)
        with self._lock:
            replaced = self._models.pop(key, None)
            self._models[key] = (model, held_bytes, path)
        if replaced is not None:  # the same file loaded twice: one copy is enough
            llama_cpp.llama_model_free(replaced[0])
        log.info("kept %s's llama.cpp model for a swap back (%.0f MiB)", path.name, held_bytes / 2**20)

    def take(self, key: Hashable) -> tuple[Any, int] | None:
        """(model, held bytes) kept under ``key``, handed over (no longer counted here); None when none is."""
        with self._lock:
            kept = self._models.pop(key, None)
        return None if kept is None else (kept[0], kept[1])

    def held_bytes(self, path: Path | None = None) -> int:
        """Bytes the kept models hold (``path``: only that file's, which its own load takes back)."""
        with self._lock:
            return sum(held for _, held, kept_path in self._models.values()
                       if path is None or kept_path == Path(path).resolve())

    def release_oldest(self, spare: Path | None = None) -> int:
        """Free the model kept longest, other than ``spare``'s (the file about to load); the bytes it held (0: none
        was freed)."""
        spare = Path(spare).resolve() if spare is not None else None
        with self._lock:
            key = next((k for k, (_, _, kept_path) in self._models.items() if kept_path != spare), None)
            if key is None:
                return 0
            model, held, path = self._models.pop(key)
        llama_cpp.llama_model_free(model)
        log.info("freed %s's kept llama.cpp model (%.0f MiB)", path.name, held / 2**20)
        return held

    def release_all(self) -> None:
        while self.release_oldest():
            pass


def anon_bytes() -> int | None:
    """This process's anonymous resident memory (Linux), None where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def drop_mapped_pages(path: Path) -> None:
    """Drop this process's pages of ``path``'s read-only mappings (the page cache keeps them). Best effort: where
    it cannot (not Linux), the pages stay until the kernel needs them."""
    try:
        with open("/proc/self/maps") as maps:
            lines = [line.split(maxsplit=5) for line in maps]
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    target = os.path.realpath(path)
    for fields in lines:
        if len(fields) == 6 and fields[5].strip() == target and "w" not in fields[1]:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            madvise(start, end - start, MADV_DONTNEED)
