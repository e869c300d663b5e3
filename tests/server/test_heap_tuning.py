"""edgeopt/server/startup/heap_tuning.py: glibc's thresholds are raised where glibc is the C library."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from edgeopt.server.startup.heap_tuning import keep_freed_heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's")
def test_glibc_takes_the_thresholds() -> None:
    # In a child process: the thresholds are process-wide and this test process should keep glibc's own.
    code = "from edgeopt.server.startup.heap_tuning import keep_freed_heap; raise SystemExit(0 if keep_freed_heap() else 1)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_elsewhere_it_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "libc_ver", lambda: ("musl", "1.2"))
    assert keep_freed_heap() is False
