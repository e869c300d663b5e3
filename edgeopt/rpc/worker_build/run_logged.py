"""One step of the worker's build (cmake's configure, ninja's compile): its output goes to the build log, not the
terminal, while a bar counts ninja's ``[done/total]`` lines; the caller shows the log's tail when it fails."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import BinaryIO

from edgeopt.progress import counted

NINJA_STATUS_FORMAT = "[%f/%t] "  # ninja's default, set anyway: a user's NINJA_STATUS would hide the count
NINJA_STATUS = re.compile(rb"^\[(\d+)/(\d+)\] ")
BUILD_PRIORITY = 10  # nice: the board may be serving while its worker builds (scripts built with `nice -n 10` too)


def _lower_priority() -> None:
    os.nice(BUILD_PRIORITY)


def run_logged(command: list[str], log: BinaryIO, env: dict[str, str], description: str,
               background: bool = False) -> int:
    """Run ``command``, appending its output (stderr too) to ``log``; its exit status. ``background``: at a lower
    CPU priority."""
    log.write(f"$ {subprocess.list2cmdline(command)}\n".encode())
    log.flush()
    with counted(description) as update:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**env, "NINJA_STATUS": NINJA_STATUS_FORMAT},
                                   preexec_fn=_lower_priority if background else None)
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                log.write(line)
                status = NINJA_STATUS.match(line)
                if status:
                    update(int(status[1]), int(status[2]))
        return process.wait()


def log_tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
