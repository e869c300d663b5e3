"""`edgeopt worker`: loopback by default, a network address only with --expose (and a warning saying why)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edgeopt.errors import ConfigError
from edgeopt.rpc.endpoints import parse_workers
from edgeopt.rpc.worker import EXPOSURE_WARNING, WorkerOptions, check_exposure, worker_command


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeopt.cli.app", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_a_network_address_without_expose_is_refused_before_anything_starts() -> None:
    result = run_cli("worker", "--host", "0.0.0.0", "--port", "50999")
    assert result.returncode == 1
    assert "--host 0.0.0.0" in result.stderr and "no authentication" in result.stderr
    assert "--expose" in result.stderr  # the fix names the flag


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_flag(host: str) -> None:
    check_exposure(host, expose=False)


def test_expose_allows_a_private_address_and_the_warning_says_why() -> None:
    check_exposure("192.168.1.20", expose=True)
    warning = EXPOSURE_WARNING.format(host="192.168.1.20", port=50052)
    assert "no authentication" in warning and "private network" in warning


def test_worker_command_passes_the_memory_cap_in_mib() -> None:
    command = worker_command(WorkerOptions(port=50100, memory_bytes=70 * 1024**2, threads=2))
    assert command[command.index("--mem") + 1] == "70"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    with pytest.raises(ConfigError, match="less than 1 MiB"):
        worker_command(WorkerOptions(memory_bytes=1000))


@pytest.mark.parametrize("text, problem", [("127.0.0.1", "not host:port"), ("a:b", "not host:port"),
                                            ("h:1,h:1", "twice"), (",", "names no worker"),
                                            ("h:70000", "not host:port")])
def test_bad_worker_lists_are_refused_naming_the_value(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_workers(text)
