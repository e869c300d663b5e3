"""Watching the workers from the head (``edgeopt serve --workers``): /metrics and a heartbeat.

Both ask over the head's own RPC connection (a worker serves one connection, so nothing else can ask it
while the head holds it): GET_DEVICE_MEMORY, timed. The round trip therefore includes waiting behind a
step's compute already queued on that connection; on an idle server it is the network's.

The heartbeat asks every HEARTBEAT_S: llama.cpp only notices a dead worker when it next uses the
connection, so without it an idle head would find out on the next request, which would then fail
instead of getting the supervisor's 503. When the worker is gone, llama.cpp aborts the head here, and
the supervisor (edgeopt.rpc.supervisor) takes over.

A worker that stops answering without closing the connection (a board that lost power or network, a
frozen process) would block the heartbeat, and every step, forever: llama.cpp's RPC socket has no
timeout. So a watchdog aborts the head when a heartbeat has waited longer than ``timeout_s``
(``edgeopt serve --worker-timeout``); the heartbeat queues behind compute in flight, so the timeout must
exceed the longest step a worker can take.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgeopt.rpc.endpoints import Endpoint, parse_endpoint
from edgeopt.runtimes.llama_cpp.rpc import RpcOffload, device_memory, rpc_devices


log = logging.getLogger("edgeopt.rpc")
HEARTBEAT_S = 2.0
DEFAULT_WORKER_TIMEOUT_S = 60.0


class WorkerWatch(Collector):
    def __init__(self, offload: RpcOffload, loaded: Callable[[], bool],
                 timeout_s: float = DEFAULT_WORKER_TIMEOUT_S,
                 on_silent: Callable[[str, Sequence[Endpoint]], None] | None = None) -> None:
        self._offload = offload
        self._loaded = loaded  # before the model is loaded, the head holds no connection to ask over
        self._timeout_s = timeout_s
        self._on_silent = on_silent  # (why, the silent workers): edgeopt.rpc.lost_worker.LostWorker.head_lost
        self._waiting_since: float | None = None  # monotonic time the pending heartbeat was sent
        self._asking: str | None = None  # the worker the pending heartbeat waits on

    def start_heartbeat(self) -> None:
        threading.Thread(target=self._heartbeat, name="edgeopt-worker-heartbeat", daemon=True).start()
        threading.Thread(target=self._watchdog, name="edgeopt-worker-watchdog", daemon=True).start()

    def _heartbeat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            if self._loaded():
                self._waiting_since = time.monotonic()
                devices = rpc_devices(self._offload.library, self._offload.endpoints)
                for endpoint, device in zip(self._offload.endpoints, devices):
                    self._asking = endpoint
                    device_memory(device)
                self._waiting_since = None

    def _watchdog(self) -> None:
        while True:
            time.sleep(min(1.0, self._timeout_s / 4))
            since = self._waiting_since
            if since is not None and time.monotonic() - since > self._timeout_s:
                silent = self._asking or ", ".join(self._offload.endpoints)
                cause = (f"worker {silent} has not answered for {self._timeout_s:.0f} s (--worker-timeout): stopping "
                         "the head so that the supervisor answers 503 and reloads when it is back")
                if self._on_silent is not None:  # the requests in flight get their error first
                    self._on_silent(cause, [parse_endpoint(self._asking)] if self._asking else [])
                else:
                    log.critical("%s", cause)
                logging.shutdown()
                os.abort()  # as llama.cpp does on a broken connection: the supervisor takes over

    def collect(self) -> Iterator[Metric]:
        used = GaugeMetricFamily("edgeopt_worker_memory_used_bytes", "Memory the model uses on each RPC worker.",
                                 labels=["worker"])
        total = GaugeMetricFamily("edgeopt_worker_memory_bytes", "Memory each RPC worker offers (edgeopt worker "
                                  "--memory).", labels=["worker"])
        round_trip = GaugeMetricFamily("edgeopt_worker_round_trip_seconds", "One memory query to each worker over "
                                       "the head's connection, queued behind compute in flight.", labels=["worker"])
        if self._loaded():
            devices = rpc_devices(self._offload.library, self._offload.endpoints)
            for endpoint, device in zip(self._offload.endpoints, devices):
                started = time.perf_counter()
                free, capacity = device_memory(device)
                round_trip.add_metric([endpoint], time.perf_counter() - started)
                used.add_metric([endpoint], float(capacity - free))
                total.add_metric([endpoint], float(capacity))
        yield used
        yield total
        yield round_trip
