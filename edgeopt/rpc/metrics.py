"""Watching the workers from the head (``edgeopt serve --workers``): /metrics and a heartbeat.

Both ask over the head's own RPC connection (a worker serves one connection, so nothing else can ask it
while the head holds it): GET_DEVICE_MEMORY, timed. The round trip therefore includes waiting behind a
step's compute already queued on that connection; on an idle server it is the network's.

The heartbeat asks every HEARTBEAT_S: llama.cpp only notices a dead worker when it next uses the
connection, so without it an idle head would find out on the next request, which would then fail
instead of getting the supervisor's 503. When the worker is gone, llama.cpp aborts the head here, and
the supervisor (edgeopt.rpc.supervisor) takes over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgeopt.runtimes.llama_cpp.rpc import RpcOffload, device_memory, rpc_devices


HEARTBEAT_S = 2.0


class WorkerWatch(Collector):
    def __init__(self, offload: RpcOffload, loaded: Callable[[], bool]) -> None:
        self._offload = offload
        self._loaded = loaded  # before the model is loaded, the head holds no connection to ask over

    def start_heartbeat(self) -> None:
        threading.Thread(target=self._heartbeat, name="edgeopt-worker-heartbeat", daemon=True).start()

    def _heartbeat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            if self._loaded():
                for device in rpc_devices(self._offload.library, self._offload.endpoints):
                    device_memory(device)

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
