"""The default llama.cpp thread count follows the load of other processes (issue 12 item 10).

Speed under a real co-located busy process is measured by tests/bench/bench_colocated_threads.py;
here: the rule, the governor's timing, its wiring into a real llama.cpp context, and the load meter
against a real busy process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeopt.profiles import load_profile
from edgeopt.profiles.host import OtherCpuLoad, usable_cpus
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp import load_gguf, max_default_threads
from edgeopt.runtimes.llama_cpp import threads as threads_module
from edgeopt.runtimes.llama_cpp.threads import ThreadGovernor, threads_for


class FixedLoad:
    """Stands in for OtherCpuLoad: other processes keep ``busy`` cores busy."""

    def __init__(self, busy: float) -> None:
        self.busy = busy
        self.reads = 0

    def read(self) -> float:
        self.reads += 1
        return self.busy


@pytest.mark.parametrize("cores,others,expected", [
    (2, 0.0, 2), (2, 0.2, 2), (2, 0.3, 1), (2, 1.0, 1), (2, 1.9, 1), (2, 5.0, 1),
    (4, 0.0, 4), (4, 1.0, 3), (4, 1.3, 2), (4, 2.1, 2), (4, 3.9, 1), (1, 0.0, 1), (1, 3.0, 1),
])
def test_threads_are_the_cores_others_leave_free(cores, others, expected):
    assert threads_for(cores, others) == expected


def test_the_governor_decides_at_creation_then_at_most_once_per_interval():
    applied: list[int] = []
    load = FixedLoad(1.0)
    governor = ThreadGovernor(applied.append, max_threads=4, load=load, interval_s=0.2, probe_s=0.0)
    assert applied == [3] and governor.threads == 3  # the first request already runs with 3
    for _ in range(100):
        governor.before_decode()
    assert load.reads == 1  # decodes within the interval cost a clock read, not a measurement
    load.busy = 0.0
    time.sleep(0.25)
    governor.before_decode()
    assert applied == [3, 4]
    time.sleep(0.25)
    governor.before_decode()
    assert applied == [3, 4]  # unchanged load: llama.cpp is not touched


@pytest.fixture
def gguf_path(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory("llama-gqa", "F16")


def test_the_default_sets_llama_cpp_threads_from_the_load_and_follows_it(gguf_path, monkeypatch):
    load = FixedLoad(busy=99.0)  # every core taken by others
    monkeypatch.setattr(threads_module, "OtherCpuLoad", lambda: load)
    runtime = load_gguf(gguf_path, kv_capacity_tokens=64, max_slots=1, n_gpu_layers=0)
    try:
        assert runtime.threads == 1  # what llama.cpp's context reports, not our bookkeeping
        load.busy = 0.0
        time.sleep(threads_module.INTERVAL_S)
        runtime.step([StepInput(0, [1, 2, 3], 0, True)])
        assert runtime.threads == max_default_threads(load_profile("host"))
    finally:
        runtime.close()


def test_an_explicit_thread_count_is_used_as_given(gguf_path, monkeypatch):
    load = FixedLoad(busy=99.0)
    monkeypatch.setattr(threads_module, "OtherCpuLoad", lambda: load)
    runtime = load_gguf(gguf_path, kv_capacity_tokens=64, max_slots=1, n_gpu_layers=0, threads=3)
    try:
        runtime.step([StepInput(0, [1, 2, 3], 0, True)])
        assert runtime.threads == 3 and load.reads == 0
    finally:
        runtime.close()


def test_the_default_never_asks_for_more_threads_than_this_machine_has():
    assert max_default_threads(load_profile("jetson-agx-orin-64gb")) <= (len(usable_cpus()) or os.cpu_count())


def test_the_meter_sees_a_real_busy_process_on_our_cores():
    cpu = usable_cpus()[0]
    spin = f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    hog = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)  # let it start spinning
        meter = OtherCpuLoad()
        time.sleep(0.5)
        assert meter.read() >= 0.6  # that core is busy nearly all the time, whatever else runs
    finally:
        hog.kill()
        hog.wait()
