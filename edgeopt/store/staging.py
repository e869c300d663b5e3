"""Hidden work directories beside their destination, and removal of those a killed run left behind.

A bundle or a cache entry is built in a hidden sibling directory and published with one rename. A
run killed with SIGKILL cannot remove that directory, so each one is paired with a lock file that its
run holds (``flock``) for as long as it lives: the kernel drops the lock when the process dies,
however it dies. The next run removes every work directory whose lock it can take (a dead run's)
and never one whose lock is held (a live run's), which a pid check cannot promise once pids are
reused or the directory is shared between containers. The pid in the name is only for humans.

Work directories are created like ``mkdir`` creates them (mode 0777 minus the umask), not 0700 like
``tempfile.mkdtemp``: the bundle that a rename publishes keeps that mode.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("edgeopt.store.staging")
LOCK_SUFFIX = ".lock"
# <prefix><pid>-<8 hex>.lock: the part after the caller's prefix that only this module writes.
_LOCK_NAME = re.compile(r"\d+-[0-9a-f]{8}" + re.escape(LOCK_SUFFIX) + "$")


@contextmanager
def work_dir(parent: Path, prefix: str, create: bool = True) -> Iterator[Path]:
    """Yield ``parent/<prefix><pid>-<random>``, locked to this process until the block exits.

    ``create=False`` yields a free name instead (for renaming something into it). Whatever is still
    at that path when the block exits is removed; rename it elsewhere to keep it. Abandoned work
    directories with the same prefix are removed first.
    """
    parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(parent, prefix)
    path, lock_fd = _locked_name(parent, prefix)
    try:
        if create:
            path.mkdir()  # mode 0o777 & ~umask, like mkdir(1)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        _lock_path(path).unlink(missing_ok=True)  # unlink before unlocking: a cleaner never sees it free
        os.close(lock_fd)


def remove_abandoned(parent: Path, prefix: str) -> list[Path]:
    """Remove the work directories under ``parent`` named ``prefix...`` whose run is gone; return them."""
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix) and _LOCK_NAME.search(n[len(prefix):])]
    except OSError:
        return removed
    for name in names:
        lock = parent / name
        fd = _try_lock(lock)
        if fd is None:
            continue  # a live run holds it (or it vanished meanwhile)
        try:
            target = lock.with_name(name[: -len(LOCK_SUFFIX)])
            shutil.rmtree(target, ignore_errors=True)
            lock.unlink(missing_ok=True)
            removed.append(target)
            log.info("removed %s, left behind by a run that was killed", target)
        finally:
            os.close(fd)
    return removed


def _locked_name(parent: Path, prefix: str) -> tuple[Path, int]:
    """A fresh name and the descriptor holding its lock file's lock."""
    while True:
        path = parent / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
        lock = _lock_path(path)
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        # Between open and flock a cleaner may have taken the lock and unlinked the file; then our lock
        # guards nothing, so start again with a new name.
        if _same_file(fd, lock):
            return path, fd
        os.close(fd)


def _try_lock(lock: Path) -> int | None:
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a live run (or locks unsupported here: then never delete)
        os.close(fd)
        return None
    if not _same_file(fd, lock):  # another cleaner removed it between our open and our lock
        os.close(fd)
        return None
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk, held = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + LOCK_SUFFIX)
