"""What names a file's contents cheaply, for caches kept per file version in one process: its resolved path,
size and modification time (a file rewritten in place gets a new stamp; hashing it would cost a full read)."""

from __future__ import annotations

from pathlib import Path


def file_stamp(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns
