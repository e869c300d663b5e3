"""Peak resident memory of a server and every process it starts, sampled while a benchmark drives it.

A server that runs its models in child processes (llama-server's router mode spawns one llama-server per
loaded model) holds memory the parent's own RSS does not show, and a child that exits takes its peak with
it; so a background thread sums the RSS of the whole process tree every ``interval_s`` (50 ms by default).
Sampling can miss a peak that lasts less than an interval; each process's kernel high-water mark (VmHWM,
read at every sample) cannot, so the reported peak is the larger of the sampled tree sum and the largest
single process's VmHWM. For a one-process server (``edgeopt serve``) that is its exact peak.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil


def high_water_mark_bytes(pid: int) -> int:
    """The kernel's peak RSS of one process (VmHWM in /proc/PID/status), 0 where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass
class MemoryReport:
    peak_tree_rss_bytes: int  # the largest sampled sum of RSS over the process tree
    peak_process_hwm_bytes: int  # the largest VmHWM any single process of the tree reached
    samples: int
    processes_seen: int

    @property
    def peak_bytes(self) -> int:
        return max(self.peak_tree_rss_bytes, self.peak_process_hwm_bytes)

    def to_dict(self) -> dict[str, int]:
        return {"peak_bytes": self.peak_bytes, "peak_tree_rss_bytes": self.peak_tree_rss_bytes,
                "peak_process_hwm_bytes": self.peak_process_hwm_bytes, "samples": self.samples,
                "processes_seen": self.processes_seen}


@dataclass
class TreeMemorySampler:
    """``with TreeMemorySampler(pid) as sampler: ...`` then ``sampler.report()``; ``current_bytes()``
    reads the tree's RSS now (e.g. an idle server's fixed overhead before its first request)."""

    pid: int
    interval_s: float = 0.05
    _peak_tree: int = 0
    _peak_hwm: int = 0
    _samples: int = 0
    _seen: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def current_bytes(self) -> int:
        total = 0
        for process in self._tree():
            try:
                total += process.memory_info().rss
                self._seen.add(process.pid)
                self._peak_hwm = max(self._peak_hwm, high_water_mark_bytes(process.pid))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # exited between the listing and the read: its memory is gone
        return total

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _run(self) -> None:
        while not self._stop.is_set():
            self._peak_tree = max(self._peak_tree, self.current_bytes())
            self._samples += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> TreeMemorySampler:
        self._thread = threading.Thread(target=self._run, name=f"rss-sampler-{self.pid}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def report(self) -> MemoryReport:
        return MemoryReport(self._peak_tree, self._peak_hwm, self._samples, len(self._seen))
