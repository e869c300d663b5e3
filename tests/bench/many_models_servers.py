"""The two multi-model servers the many-models benchmark drives: llama-server in router mode and `edgeopt serve`
of several models, each with the questions the benchmark asks of it (which models are loaded now, how many
loads and unloads happened) answered from its own API or log.

llama-server's router (``--models-dir DIR --models-max 1``) names each GGUF in DIR by its file name without
``.gguf``, spawns one llama-server child per loaded model (the command line's other arguments are inherited),
and with one model allowed stops the loaded child before starting another. It has no metrics of its own for
this, so loads and unloads are counted from its log: a load is "spawning server instance with name=X", an
unload "instance name=X exited". edgeopt reports them on /metrics (``edgeopt_model_loads_total{model=...}``,
``edgeopt_model_unloads_total``, ``edgeopt_model_cache_restores_total``) and lists loaded models on /api/ps.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from edgeopt.server.startup.serve_process import LaunchedServer, free_port, stop, wait_until_healthy

LLAMA_LOAD = re.compile(r"spawning server instance with name=(\S+)")
LLAMA_UNLOAD = re.compile(r"instance name=(\S+) exited with status")
PROMETHEUS_SAMPLE = re.compile(r'^(edgeopt_model_\w+?)(?:_total)?\{[^}]*model="([^"]+)"[^}]*\}\s+([0-9.eE+-]+)$')
EDGEOPT_COUNTERS = {"edgeopt_model_loads": "loads", "edgeopt_model_unloads": "unloads",
                    "edgeopt_model_cache_restores": "cache_restores"}


@dataclass(frozen=True)
class Counts:
    loads: dict[str, int]
    unloads: dict[str, int]
    cache_restores: dict[str, int] | None  # None: the server has no such counter

    def to_dict(self) -> dict[str, object]:
        return {"loads": self.loads, "unloads": self.unloads, "cache_restores": self.cache_restores}


@dataclass(frozen=True)
class RunningServer:
    """A started server: where it listens, its process (the root of its process tree) and its log."""

    kind: str  # "llama-server" or "edgeopt"
    launched: LaunchedServer

    @property
    def url(self) -> str:
        return self.launched.base_url

    @property
    def pid(self) -> int:
        return self.launched.process.pid

    def loaded_models(self, client: httpx.Client) -> set[str]:
        try:
            return self._loaded_models(client)
        except httpx.RemoteProtocolError:  # the router closed a kept-alive connection as it was reused: ask again
            return self._loaded_models(client)

    def _loaded_models(self, client: httpx.Client) -> set[str]:
        if self.kind == "llama-server":
            data = client.get("/models").raise_for_status().json()["data"]
            return {m["id"] for m in data if (m.get("status") or {}).get("value") == "loaded"}
        running = client.get("/api/ps").raise_for_status().json()["models"]
        return {bare_name(m["name"]) for m in running}

    def counts(self, client: httpx.Client) -> Counts:
        if self.kind == "llama-server":
            log = self.launched.log_path.read_text(errors="replace")
            return Counts(tally(LLAMA_LOAD.findall(log)), tally(LLAMA_UNLOAD.findall(log)), None)
        return edgeopt_counts(client.get("/metrics").raise_for_status().text)


def bare_name(name: str) -> str:
    """Ollama lists models as name:tag; the benchmark's models are named without a tag (":latest")."""
    return name.removesuffix(":latest")


def tally(names: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return out


def edgeopt_counts(metrics_text: str) -> Counts:
    found: dict[str, dict[str, int]] = {}
    for line in metrics_text.splitlines():
        match = PROMETHEUS_SAMPLE.match(line.strip())
        if match and match.group(1) in EDGEOPT_COUNTERS:
            key = EDGEOPT_COUNTERS[match.group(1)]
            found.setdefault(key, {})[match.group(2)] = int(float(match.group(3)))
    if "loads" not in found and "unloads" not in found:
        raise RuntimeError("edgeopt's /metrics has no edgeopt_model_loads_total / edgeopt_model_unloads_total: "
                           "this edgeopt serves one model (multi-model serving, issue 42, not merged yet?)")
    return Counts(found.get("loads", {}), found.get("unloads", {}), found.get("cache_restores"))


@contextmanager
def start(kind: str, command: list[str], port: int, log_path: Path,
          startup_timeout_s: float = 300.0) -> Iterator[RunningServer]:
    """Run ``command`` (which listens on ``port``), wait for /health, yield it, always stop it (and so, for the
    router, its children: each exits when the router's pipe to it closes)."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    launched = LaunchedServer(f"http://127.0.0.1:{port}", log_path, process)
    try:
        wait_until_healthy(launched, startup_timeout_s)
        yield RunningServer(kind, launched)
    finally:
        stop(process)


def llama_router_command(binary: Path, models_dir: Path, port: int, threads: int, context: int, slots: int,
                         extra: Sequence[str] = ()) -> list[str]:
    return [str(binary), "--models-dir", str(models_dir), "--models-max", "1", "--host", "127.0.0.1",
            "--port", str(port), "-t", str(threads), "-tb", str(threads), "-c", str(context), "-np", str(slots),
            *extra]


def edgeopt_command(models: Sequence[Path], port: int, threads: int, context: int, slots: int, memory: str,
                    swap_space: str | None, extra: Sequence[str] = ()) -> list[str]:
    """``swap_space`` None leaves --swap-space out (a one-model server, which has nothing to swap)."""
    return [sys.executable, "-m", "edgeopt.cli.app", "serve", *map(str, models), "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning", "--threads", str(threads), "--context", str(context),
            "--max-concurrency", str(slots), "--memory", memory, "--no-verify",
            *(["--swap-space", swap_space] if swap_space else []), *extra]


__all__ = ["Counts", "RunningServer", "edgeopt_command", "free_port", "llama_router_command", "start"]
