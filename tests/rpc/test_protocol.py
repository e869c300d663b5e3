"""The head's own questions to a worker (edgeopt.rpc.protocol), against fakes that speak ggml-rpc's wire format
and a real worker: what llama.cpp would abort the process on becomes an error naming the worker."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path

import pytest

from edgeopt.errors import WorkerError
from edgeopt.rpc.binaries import head_protocol_version
from edgeopt.rpc.endpoints import Endpoint
from edgeopt.rpc.protocol import CMD_HELLO, CONN_CAPS_BYTES, ProtocolVersion, probe_worker
from edgeopt.server.startup.serve_process import free_port
from tests.rpc.workers import running_workers

HEAD = ProtocolVersion(7, 0, 0)


def fake_worker(answer: bytes | None, old_hello_answer: bytes | None = None,
                connections: int = 1) -> tuple[Endpoint, threading.Thread]:
    """A server of ``connections`` connections, one at a time, that answers HELLO with ``answer`` (None: closes
    instead); a HELLO in the pre-4 form (empty payload) gets ``old_hello_answer``."""
    listener = socket.create_server(("127.0.0.1", 0))
    endpoint = Endpoint("127.0.0.1", listener.getsockname()[1])

    def serve() -> None:
        with listener:
            listener.settimeout(60)  # `edgeopt serve` may take ~10 s to reach its probe on a loaded 2-core host
            for _ in range(connections):
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    command, size = struct.unpack("<BQ", conn.recv(9, socket.MSG_WAITALL))
                    payload = conn.recv(size, socket.MSG_WAITALL) if size else b""
                    reply = answer if size == CONN_CAPS_BYTES else old_hello_answer
                    if command == CMD_HELLO and reply is not None and len(payload) == size:
                        conn.sendall(struct.pack("<Q", len(reply)) + reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return endpoint, thread


def test_another_major_version_is_refused_with_both_versions() -> None:
    endpoint, thread = fake_worker(bytes([6, 1, 0, 0]) + bytes(CONN_CAPS_BYTES))
    with pytest.raises(WorkerError) as caught:
        probe_worker(endpoint, HEAD)
    assert str(endpoint) in caught.value.message
    assert "6.1.0" in caught.value.message and "7.0.0" in caught.value.message
    thread.join(5)


def test_a_worker_speaking_the_pre_4_hello_is_still_named_with_its_version() -> None:
    endpoint, thread = fake_worker(None, old_hello_answer=bytes([3, 0, 0]), connections=2)
    with pytest.raises(WorkerError, match=r"speaks RPC protocol 3\.0\.0; this head speaks 7\.0\.0"):
        probe_worker(endpoint, HEAD)
    thread.join(5)


def test_a_newer_minor_version_is_refused_as_llama_cpp_would() -> None:
    assert HEAD.serves(ProtocolVersion(7, 0, 3))
    assert not HEAD.serves(ProtocolVersion(7, 1, 0))


def test_an_unreachable_worker_is_named_with_the_command_that_starts_it() -> None:
    endpoint = Endpoint("127.0.0.1", free_port())  # nothing listens there
    with pytest.raises(WorkerError) as caught:
        probe_worker(endpoint, HEAD, timeout_s=2)
    assert f"worker {endpoint} is unreachable" in caught.value.message
    assert f"edgeopt worker --port {endpoint.port}" in caught.value.hint


def test_a_real_worker_reports_its_version_and_its_memory_cap(tmp_path: Path) -> None:
    with running_workers(tmp_path, count=1, memory_mib=64) as (worker,):
        info = probe_worker(worker.endpoint, head_protocol_version())
        again = probe_worker(worker.endpoint, head_protocol_version())  # the worker takes the next connection
    assert info.version == head_protocol_version()
    assert info.total_bytes == again.total_bytes == 64 * 1024**2
    assert info.free_bytes == info.total_bytes  # nothing allocated yet


def test_serve_refuses_a_worker_of_another_version_before_loading_anything() -> None:
    import subprocess
    import sys

    from edgeopt.demo.smollm2 import smollm2_gguf_path

    endpoint, thread = fake_worker(bytes([6, 1, 0, 0]) + bytes(CONN_CAPS_BYTES))
    result = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "serve", str(smollm2_gguf_path()), "--port",
                             str(free_port()), "--workers", str(endpoint), "--no-verify"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"worker {endpoint} speaks RPC protocol 6.1.0; this head speaks {head_protocol_version()}" in result.stderr
    thread.join(5)
