"""The last leg of ``make demo``: serve a bundle, send one chat request, print the answer, stop.

Run as ``python -m edgeopt.demo.serve_demo BUNDLE``. The server runs as a child process on a free
loopback port; it is stopped on every exit path (success, error, Ctrl-C), and its log is printed
when it fails to come up. Uses only the stdlib and httpx: no torch on the serving side.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from edgeopt.errors import BackendError

DEFAULT_QUESTION = "What does json.dumps do?"


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(bundle: Path, port: int, log_path: Path, threads: int) -> Iterator[subprocess.Popen]:
    """``edgeopt serve BUNDLE --port PORT`` as a child process, terminated (then killed) on exit."""
    command = [sys.executable, "-m", "edgeopt.cli", "serve", str(bundle), "--host", "127.0.0.1",
               "--port", str(port), "--threads", str(threads)]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until_healthy(base_url: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BackendError(f"the server exited with code {process.returncode} before /health answered",
                               "the server log follows")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base_url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(0.5)
    raise BackendError(f"{base_url}/health did not return 200 within {timeout_s:.0f}s",
                       "the model may be too large for this machine; see the server log")


def ask(base_url: str, question: str, max_tokens: int) -> str:
    """One non-streaming chat completion at temperature 0; returns the assistant's text."""
    models = httpx.get(f"{base_url}/v1/models", timeout=10.0).raise_for_status().json()["data"]
    body = {"model": models[0]["id"], "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0.0}
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=120.0)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--question", default=DEFAULT_QUESTION)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=2, help="runtime CPU threads for the server")
    args = parser.parse_args(argv)
    port = free_loopback_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = args.bundle.parent / "serve.log"
    with running_server(args.bundle, port, log_path, args.threads) as process:
        try:
            wait_until_healthy(base_url, process, args.startup_timeout)
            started = time.perf_counter()
            answer = ask(base_url, args.question, args.max_tokens)
        except (BackendError, httpx.HTTPError) as exc:
            print(f"demo failed: {exc}\n--- server log ({log_path}) ---", file=sys.stderr)
            print(log_path.read_text()[-4000:], file=sys.stderr)
            return 1
    print(f"user:      {args.question}")
    print(f"assistant: {answer.strip()}")
    print(f"({time.perf_counter() - started:.2f}s, server on {base_url}, log {log_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
