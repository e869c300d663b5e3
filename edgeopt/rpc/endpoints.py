"""``host:port`` worker addresses as the CLI takes them (``--workers 127.0.0.1:50052,10.0.0.2:50052``)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from edgeopt.errors import ConfigError

DEFAULT_WORKER_PORT = 50052  # llama.cpp's rpc-server default, so `--rpc host:50052` habits carry over


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ConfigError(f"worker address {text!r} is not host:port", "write e.g. 192.168.1.20:50052")
    return Endpoint(host, int(port_text))


def parse_workers(text: str) -> tuple[Endpoint, ...]:
    """A comma-separated list; each address once (llama.cpp would share one connection between duplicates
    and count the device twice)."""
    endpoints = tuple(parse_endpoint(part) for part in text.split(",") if part.strip())
    if not endpoints:
        raise ConfigError(f"--workers {text!r} names no worker", "write host:port[,host:port...]")
    seen: set[Endpoint] = set()
    for endpoint in endpoints:
        if endpoint in seen:
            raise ConfigError(f"--workers names {endpoint} twice", "list each worker once")
        seen.add(endpoint)
    return endpoints


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
