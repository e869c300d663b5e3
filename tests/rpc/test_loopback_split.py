"""A real model split across two `edgeopt worker`s on 127.0.0.1, each capped so that it fits neither alone
(nor the head: SmolLM2-135M Q4_1 is 94 MiB of weights, its tied output copied to the last worker):
the plan, the load agreeing with it, greedy output equal to one process, a worker SIGKILLed mid-stream,
restarted, one killed while idle, one frozen (SIGSTOP: no connection error at all), and a head started
with one missing. Every wait is bounded; ~60 s on 2 cores in all."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from edgeopt.server.startup.serve_process import free_port, launched_server
from edgeopt.demo.smollm2 import smollm2_gguf_path
from tests.rpc.workers import Worker, running_workers, workers_flag

HEAD_MEMORY_MIB = 165  # the head's runtime alone is ~125 MiB at 2 sequences: the weights do not fit beside it
CONTEXT, SEQUENCES = 512, 2
PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time, a small robot")
MAX_TOKENS = 24
DEATH_BOUND_S = 10.0  # a stream must end, and /health turn 503, this soon after its worker dies
RECOVERY_BOUND_S = 90.0


def split_args(workers: str) -> list[str]:
    # (speculation off here and in the one-process reference: greedy text is compared across the two, and a
    # drafted step moves the logits' last bits)
    return ["--workers", workers, "--memory", f"{HEAD_MEMORY_MIB}MiB", "--context", str(CONTEXT),
            "--max-concurrency", str(SEQUENCES), "--no-verify", "--speculative", "off"]


def completion(base_url: str, prompt: str, **extra: object) -> httpx.Response:
    body = {"model": "m", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, **extra}
    return httpx.post(base_url + "/v1/completions", json=body, timeout=60)


def greedy_texts(base_url: str) -> list[str]:
    model = httpx.get(base_url + "/v1/models", timeout=10).json()["data"][0]["id"]
    texts = []
    for prompt in PROMPTS:
        reply = httpx.post(base_url + "/v1/completions", timeout=60, json={
            "model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
        reply.raise_for_status()
        texts.append(reply.json()["choices"][0]["text"])
    return texts


def run_plan(workers: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "plan", str(smollm2_gguf_path()), "--workers",
                             workers, "--memory", str(HEAD_MEMORY_MIB), "--context", str(CONTEXT), "--concurrency",
                             str(SEQUENCES), "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_plan_says_only_the_split_fits_and_the_workers_agree_after_loading(tmp_path: Path) -> None:
    with running_workers(tmp_path) as workers:
        flag = workers_flag(workers)
        plan = run_plan(flag)["candidates"][0]
        assert plan["fits"] and not plan["fits_one_device"]
        for device in plan["devices"]:  # none of the three holds the model alone
            assert device["layers"] < 30
        probe = subprocess.run([sys.executable, "-m", "tests.rpc.split_probe", str(smollm2_gguf_path()), flag],
                               capture_output=True, text=True, timeout=180)
    assert probe.returncode == 0, probe.stderr[-2000:]
    measured = json.loads(probe.stdout.strip().splitlines()[-1])
    assert measured["planned"] == [device["total_bytes"] for device in plan["devices"][1:]]
    for planned, used in zip(measured["planned"], measured["used"]):
        assert abs(used - planned) <= 0.05 * used, f"planned {planned} bytes, the worker reports {used}"


def stream_until_cut(base_url: str, model: str, kill) -> tuple[int, float, list[str]]:  # noqa: ANN001 - a callable
    """Stream a long completion, call ``kill`` after the first chunks; (chunks read, seconds from kill to end,
    the data lines that came after the kill)."""
    body = {"model": model, "prompt": "Count: 1, 2, 3,", "max_tokens": 400, "temperature": 0, "stream": True,
            "ignore_eos": True}
    chunks, killed_at, after = 0, None, []
    with httpx.stream("POST", base_url + "/v1/completions", json=body, timeout=DEATH_BOUND_S) as reply:
        for line in reply.iter_lines():
            if killed_at is not None and line.startswith("data: "):
                after.append(line)
            if line.startswith("data: {"):
                chunks += 1
            if chunks == 3 and killed_at is None:
                kill()
                killed_at = time.monotonic()
    assert killed_at is not None, f"the stream ended after {chunks} chunks, before the worker was killed"
    return chunks, time.monotonic() - killed_at, after


def metric(text: str, name: str, worker: Worker) -> float:
    prefix = f'{name}{{worker="{worker.endpoint}"}} '
    return float(next(line for line in text.splitlines() if line.startswith(prefix))[len(prefix):])


def wait_for_health(base_url: str, status: int, bound_s: float) -> httpx.Response:
    deadline = time.monotonic() + bound_s
    while True:
        try:
            reply = httpx.get(base_url + "/health", timeout=2)
            if reply.status_code == status:
                return reply
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"/health did not answer {status} within {bound_s} s"
        time.sleep(0.2)


def test_split_serving_matches_one_process_survives_a_killed_worker_and_recovers(tmp_path: Path) -> None:
    gguf = smollm2_gguf_path()
    # A split keeps llama.cpp's flash attention (runtimes/llama_cpp/attention.py): the one-process load it must
    # equal runs the same kernel (plain attention ranks tokens alike but moves logits in their last bits).
    with launched_server(gguf, threads=1, extra_args=["--context", str(CONTEXT), "--no-verify",
                                                      "--flash-attention", "on", "--speculative", "off"]) as alone:
        expected = greedy_texts(alone.base_url)
    with running_workers(tmp_path) as workers, \
            launched_server(gguf, threads=1, extra_args=split_args(workers_flag(workers)),
                            log_path=tmp_path / "serve.log") as split:
        assert greedy_texts(split.base_url) == expected
        model = httpx.get(split.base_url + "/v1/models", timeout=10).json()["data"][0]["id"]
        metrics = httpx.get(split.base_url + "/metrics", timeout=10).text
        for worker in workers:
            assert metric(metrics, "edgeopt_worker_memory_bytes", worker) == 70 * 1024**2
            assert 0 < metric(metrics, "edgeopt_worker_memory_used_bytes", worker) < 70 * 1024**2
            assert 0 < metric(metrics, "edgeopt_worker_round_trip_seconds", worker) < 5

        victim = workers[1]
        whole: list[httpx.Response] = []  # a reply not streamed, in flight beside the stream when the worker dies
        beside = threading.Thread(target=lambda: whole.append(completion(
            split.base_url, PROMPTS[1], model=model, max_tokens=400, ignore_eos=True)), daemon=True)
        beside.start()
        chunks, seconds, after = stream_until_cut(split.base_url, model, victim.kill)
        beside.join(DEATH_BOUND_S)
        assert whole and whole[0].status_code == 500, whole
        assert f"worker {victim.endpoint} is down" in whole[0].json()["error"]["message"]
        assert seconds < DEATH_BOUND_S and chunks < 400
        assert after[-1] == "data: [DONE]", after[-3:]  # the stream ends in-band, not by a cut connection
        error = json.loads(after[-2][len("data: "):])["error"]
        assert error["type"] == "server_error" and f"worker {victim.endpoint} is down" in error["message"]
        health = wait_for_health(split.base_url, 503, DEATH_BOUND_S)
        assert str(victim.endpoint) in health.json()["error"]
        refused = completion(split.base_url, PROMPTS[0], model=model)
        assert refused.status_code == 503 and str(victim.endpoint) in refused.json()["error"]["message"]
        assert f"edgeopt worker --port {victim.endpoint.port}" in refused.json()["error"]["message"]

        victim.start()  # the same port, the same cap: the server reloads by itself
        wait_for_health(split.base_url, 200, RECOVERY_BOUND_S)
        assert greedy_texts(split.base_url) == expected

        workers[0].kill()  # while idle: the heartbeat finds out, not the next request
        assert str(workers[0].endpoint) in wait_for_health(split.base_url, 503, DEATH_BOUND_S).json()["error"]
        workers[0].start()
        wait_for_health(split.base_url, 200, RECOVERY_BOUND_S)
        assert split.process.poll() is None


def test_a_frozen_worker_counts_as_dead_after_the_worker_timeout_and_the_server_recovers(tmp_path: Path) -> None:
    timeout_s = 3
    with running_workers(tmp_path) as workers, \
            launched_server(smollm2_gguf_path(), threads=1, log_path=tmp_path / "serve.log",
                            extra_args=[*split_args(workers_flag(workers)), "--worker-timeout", str(timeout_s)]) as split:
        frozen = workers[1]
        frozen.freeze()  # no RST, no FIN: only the watchdog can tell
        health = wait_for_health(split.base_url, 503, timeout_s + DEATH_BOUND_S)
        assert str(frozen.endpoint) in health.json()["error"]
        assert str(workers[0].endpoint) not in health.json()["workers_down"]
        frozen.thaw()
        wait_for_health(split.base_url, 200, RECOVERY_BOUND_S)
        assert completion(split.base_url, PROMPTS[0], model=httpx.get(
            split.base_url + "/v1/models", timeout=10).json()["data"][0]["id"]).status_code == 200


def test_a_head_started_with_a_worker_missing_names_it_and_exits(tmp_path: Path) -> None:
    with running_workers(tmp_path, count=1) as (present,):
        missing = f"127.0.0.1:{free_port()}"
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "serve", str(smollm2_gguf_path()), "--port",
                                 str(free_port()), *split_args(f"{present.endpoint},{missing}")],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"worker {missing} is unreachable" in result.stderr
    assert "edgeopt worker --port" in result.stderr
    assert time.monotonic() - started < 30
