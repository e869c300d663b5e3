"""What edgeopt asks a llama.cpp RPC worker itself, before llama.cpp connects to it.

llama.cpp's RPC client aborts the whole process when a worker is unreachable or speaks another protocol
version (ggml-rpc.cpp: GGML_ABORT in rpc_dispatcher::start), so the head asks first, over a connection of
its own, and turns each failure into an error that names the worker. The wire format is ggml-rpc's:

    request : | command (1 byte) | size (u64 little-endian) | payload (size bytes) |
    response: | size (u64) | payload |

HELLO (14) must come first on every connection; its payload grew in protocol 4 (connection capabilities,
24 bytes), and a server that expects the other form closes the connection, so a closed HELLO is retried in
the older form before the worker is called silent. A worker serves one connection at a time: the probe
closes its own before llama.cpp connects, and cannot reach a worker a head is already using.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from edgeopt.errors import WorkerError
from edgeopt.rpc.endpoints import Endpoint

CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_BYTES = 24  # transport.h RPC_CONN_CAPS_SIZE, since protocol 4
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ProtocolVersion:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def serves(self, server: ProtocolVersion) -> bool:
        """llama.cpp's client rule (negotiate_hello): same major, the server's minor no newer than ours."""
        return server.major == self.major and server.minor <= self.minor


@dataclass(frozen=True)
class DeviceMemory:
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class WorkerInfo:
    endpoint: Endpoint
    version: ProtocolVersion
    devices: tuple[DeviceMemory, ...]
    round_trip_s: float  # one DEVICE_COUNT request and its answer

    @property
    def free_bytes(self) -> int:
        return sum(device.free_bytes for device in self.devices)

    @property
    def total_bytes(self) -> int:
        return sum(device.total_bytes for device in self.devices)


class _Closed(Exception):
    """The worker closed the connection (or sent less than a message)."""


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise _Closed
        data += chunk
    return bytes(data)


def _request(sock: socket.socket, command: int, payload: bytes, response_size: int) -> bytes:
    sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if size != response_size:
        raise _Closed
    return _recv_exact(sock, size)


def _connect(endpoint: Endpoint, timeout_s: float) -> socket.socket:
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    except OSError as exc:
        raise WorkerError(f"worker {endpoint} is unreachable: {exc.strerror or exc}",
                          f"start it there with `edgeopt worker --port {endpoint.port}`, or fix the address") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _hello(endpoint: Endpoint, timeout_s: float) -> tuple[socket.socket, ProtocolVersion]:
    """A connection past HELLO and the server's version; the pre-4 form of HELLO when the current one is refused."""
    for payload, response_size in ((bytes(CONN_CAPS_BYTES), 4 + CONN_CAPS_BYTES), (b"", 3)):
        sock = _connect(endpoint, timeout_s)
        try:
            answer = _request(sock, CMD_HELLO, payload, response_size)
            return sock, ProtocolVersion(answer[0], answer[1], answer[2])
        except (_Closed, OSError):
            sock.close()
    raise WorkerError(f"{endpoint} accepts connections but does not answer llama.cpp's RPC HELLO within {timeout_s:g} s",
                      "a worker serves one head at a time: stop the other head using it, or check that the port is "
                      "an `edgeopt worker` (llama.cpp rpc-server), not another service")


def probe_worker(endpoint: Endpoint, expected: ProtocolVersion, timeout_s: float = PROBE_TIMEOUT_S) -> WorkerInfo:
    """Connect, check the protocol version, read each device's memory, close. Raises WorkerError naming
    ``endpoint`` when it is unreachable, silent, or speaks a version ``expected`` cannot."""
    sock, version = _hello(endpoint, timeout_s)
    with sock:
        if not expected.serves(version):
            raise WorkerError(
                f"worker {endpoint} speaks RPC protocol {version}; this head speaks {expected}",
                "install the head's llama-cpp-python version on the worker (pip show llama-cpp-python, on both): "
                "`edgeopt worker` builds its RPC server for the installed version on first use")
        try:
            started = time.perf_counter()
            (count,) = struct.unpack("<I", _request(sock, CMD_DEVICE_COUNT, b"", 4))
            round_trip = time.perf_counter() - started
            devices = []
            for index in range(count):
                free, total = struct.unpack("<QQ", _request(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", index), 16))
                devices.append(DeviceMemory(free, total))
        except (_Closed, OSError) as exc:
            raise WorkerError(f"worker {endpoint} closed the connection while reporting its devices",
                              "look at the worker's log; restart it with `edgeopt worker`") from exc
    return WorkerInfo(endpoint, version, tuple(devices), round_trip)


def probe_workers(endpoints: tuple[Endpoint, ...], expected: ProtocolVersion,
                  timeout_s: float = PROBE_TIMEOUT_S) -> tuple[WorkerInfo, ...]:
    return tuple(probe_worker(endpoint, expected, timeout_s) for endpoint in endpoints)


def answers(endpoint: Endpoint, timeout_s: float = 1.0) -> bool:
    """Whether a worker accepts connections at all (a dead worker's port refuses them)."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return True
    except OSError:
        return False
