"""The many-models benchmark's own parts, without a model: the process-tree memory sampler against a child that
allocates a known amount, the counters read from llama-server's log and edgeopt's /metrics, the conversation
order, and the budget that must hold two of three models."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from edgeopt.sizing.budget import SAFETY_MARGIN
from tests.bench.bench_many_models import catalog_needs, default_budget
from tests.bench.chat_mix import conversations
from tests.bench.many_models_servers import LLAMA_LOAD, LLAMA_UNLOAD, edgeopt_counts, tally
from tests.bench.process_memory import TreeMemorySampler

pytestmark = pytest.mark.timeout(60)
MIB = 2**20

# A shell whose child (a grandchild of the test) touches 64 MiB, holds it until told on stdin, frees it (munmap)
# and stays up idle.
ALLOCATE = ("import sys, time; b = bytearray(64 * 2**20); print('held', flush=True); sys.stdin.readline(); "
            "del b; print('freed', flush=True); time.sleep(60)")


def test_sampler_sees_a_grandchilds_peak_after_it_is_freed() -> None:
    parent = subprocess.Popen(["/bin/sh", "-c", f'"{sys.executable}" -c "{ALLOCATE}"; true'],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        sampler = TreeMemorySampler(parent.pid, interval_s=0.02)
        with sampler:
            assert parent.stdout.readline().strip() == "held"
            seen = sampler.report().samples
            while sampler.report().samples < seen + 3:  # a few samples while the 64 MiB are held
                time.sleep(0.02)
            parent.stdin.write("go\n")
            parent.stdin.flush()
            assert parent.stdout.readline().strip() == "freed"
        report = sampler.report()
        assert report.peak_tree_rss_bytes >= 64 * MIB and report.peak_process_hwm_bytes >= 64 * MIB
        assert report.processes_seen == 2
        assert sampler.current_bytes() < report.peak_bytes - 32 * MIB  # freed: the peak is a peak, not the now
    finally:
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()


def test_llama_router_log_lines_count_loads_and_unloads() -> None:
    log = ("0.05.699.798 I srv          load: spawning server instance with name=a-q4 on port 39081\n"
           "0.45.251.384 I srv           run: instance name=a-q4 exited with status 0\n"
           "0.45.251.497 I srv          load: spawning server instance with name=b-q8 on port 48321\n"
           "1.19.940.590 I srv          load: spawning server instance with name=a-q4 on port 47521\n"
           "1.19.943.585 I srv           run: instance name=b-q8 exited with status 0\n")
    assert tally(LLAMA_LOAD.findall(log)) == {"a-q4": 2, "b-q8": 1}
    assert tally(LLAMA_UNLOAD.findall(log)) == {"a-q4": 1, "b-q8": 1}


def test_edgeopt_counters_are_read_per_model_and_their_absence_is_an_error() -> None:
    text = ("# HELP edgeopt_model_loads_total Models loaded.\n# TYPE edgeopt_model_loads_total counter\n"
            'edgeopt_model_loads_total{model="a"} 3.0\nedgeopt_model_loads_total{model="b"} 2.0\n'
            'edgeopt_model_unloads_total{model="a"} 2.0\nedgeopt_model_cache_restores_total{model="a"} 2.0\n'
            'edgeopt_model_loads_created{model="a"} 1.7e9\nedgeopt_requests_running 0.0\n')
    counts = edgeopt_counts(text)
    assert counts.loads == {"a": 3, "b": 2} and counts.unloads == {"a": 2} and counts.cache_restores == {"a": 2}
    with pytest.raises(RuntimeError, match="edgeopt_model_loads_total"):
        edgeopt_counts("edgeopt_requests_running 0.0\n")


def test_conversations_alternate_models_and_refuse_more_than_the_topics() -> None:
    chats = conversations(("a", "b"), per_model=2)
    assert [c.model for c in chats] == ["a", "b", "a", "b"]
    assert len({c.messages[0]["content"] for c in chats}) == 4  # no shared system prompt across conversations
    with pytest.raises(ValueError, match="at most 2 conversations per model"):
        conversations(("a", "b"), per_model=3)


def test_budget_holds_embedding_and_either_chat_but_not_the_other_chat_even_at_its_least() -> None:
    log = ("2026-11-27 14:00:00 INFO edgeopt.server: 3 models on a budget of 61000 MiB for models (+78 MiB for "
           "the process); idle models unload after 5m\n"
           "2026-11-27 14:00:00 INFO edgeopt.server: chat-q4 (causal-lm, llama_cpp): 318 MiB, at least 183 MiB\n"
           "2026-11-27 14:00:00 INFO edgeopt.server: chat-q8 (causal-lm, llama_cpp): 362 MiB, at least 227 MiB\n"
           "2026-11-27 14:00:00 INFO edgeopt.server: minilm (embedding, onnxruntime): 256 MiB, at least 256 MiB\n")
    needs, models_budget, process = catalog_needs(log)
    assert needs["chat-q8"] == (362 * MIB, 227 * MIB) and needs["minilm"] == (256 * MIB, 256 * MIB)
    assert models_budget == 61000 * MIB and process == 78 * MIB
    memory = default_budget(needs, ("chat-q4", "chat-q8"), "minilm", process)
    room = memory * (1 - SAFETY_MARGIN) - process  # what the server leaves for models out of --memory
    assert (256 + 362) * MIB <= room < (256 + 318 + 227) * MIB
    with pytest.raises(SystemExit, match="pass --memory"):
        default_budget({**needs, "chat-q4": (1000 * MIB, 50 * MIB)},  # q8 + its least fits where q4 alone does
                       ("chat-q4", "chat-q8"), "minilm", process)
    with pytest.raises(SystemExit, match="pass --memory"):
        catalog_needs("INFO uvicorn: started\n")
