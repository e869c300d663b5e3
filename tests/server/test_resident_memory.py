"""The plan users can hold edgeopt to: `edgeopt plan BUNDLE` states the resident memory `edgeopt serve` with
the same flags reaches, and serve reaches it, neither more nor much less.

Each case serves a real model on a profile (a memory and a shape), drives it to its full concurrency with
prompts that fill its context, samples the server's resident set size every 50 ms, and checks
measured peak <= planned <= 1.10 x measured peak. The two profiles give llama.cpp its two layouts: a roomy
memory (a stream per sequence and a stream per cached prefix) and a tight one (one unified pool). ONNX Runtime
has one layout: SmolLM2's INT8 export is served in a roomy memory, and an embedding bundle (all-MiniLM-L6-v2
INT8) is driven with batches of its longest inputs. The ONNX exports are built once per machine
(tests/fixtures/real_onnx_bundles.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from functools import cache
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from edgeopt.bench.loadgen import run_load
from edgeopt.byte_sizes import parse_size
from edgeopt.store.bundle import read_manifest
from edgeopt.planning.bundle import embedding_input_tokens, plan_bundle
from edgeopt.profiles import load_profile
from edgeopt.server.startup.serve_process import launched_server
from tests.conftest import DEMO_CACHE_ROOT
from tests.fixtures.demo_gguf import optimize_demo_gguf
from tests.fixtures.real_onnx_bundles import cached_onnx_bundle, minilm_dir
from tests.server.gguf_bundle import smollm2_bundle

MIB = 2**20
SEQUENCES, CONTEXT, OUTPUT_TOKENS = 4, 512, 32
# (memory, the layout serve picks there): per model, a roomy memory and one tight enough for a unified pool.
PROFILES = {"smollm2-q4_1": {"roomy": ("1GiB", "streams"), "tight": ("300MiB", "unified")},
            "demo-q8_0": {"roomy": ("1GiB", "streams"), "tight": ("120MiB", "unified")},
            "smollm2-onnx-int8": {"roomy": ("2GiB", None)}}
# The ONNX export of SmolLM2 takes 3-11 minutes to build from nothing (CI has no cache): a slow case.
SLOW_MODELS = {"smollm2-onnx-int8"}
CASES = [pytest.param(model, profile, marks=[pytest.mark.slow] if model in SLOW_MODELS else [])
         for model, profiles in PROFILES.items() for profile in profiles]
EMBEDDING_REQUESTS, EMBEDDING_INPUTS = 4, 16  # concurrent requests of inputs as long as the model accepts


@dataclass(frozen=True)
class Measured:
    planned_bytes: int
    peak_bytes: int
    layout: str | None


def sample_peak(pid: int, stop: threading.Event, samples: list[int]) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        samples.append(process.memory_info().rss)
        time.sleep(0.05)


def peak_of(pid: int, samples: list[int]) -> int:
    """The highest resident set seen: the samples, or the kernel's high-water mark (VmHWM), which also holds
    what loading the model reached before the first sample."""
    status = Path(f"/proc/{pid}/status")
    marks = [int(line.split()[1]) * 1024 for line in status.read_text().splitlines() if line.startswith("VmHWM")] \
        if status.is_file() else []
    return max(samples + marks)


def serve_at_full_load(bundle: Path, memory: str, log: Path) -> Measured:
    plan = plan_bundle(bundle, load_profile("host"), CONTEXT, SEQUENCES, parse_size(memory, "--memory"))
    [candidate] = plan.candidates
    assert candidate.fits and candidate.resident is not None
    args = ["--memory", memory, "--max-concurrency", str(SEQUENCES), "--context", str(CONTEXT), "--no-verify"]
    with launched_server(bundle, threads=2, extra_args=args, log_path=log) as server:
        stop, samples = threading.Event(), []
        sampler = threading.Thread(target=sample_peak, args=(server.process.pid, stop, samples))
        sampler.start()
        try:
            model = httpx.get(f"{server.base_url}/v1/models").json()["data"][0]["id"]
            # Every sequence at once, each prompt filling its context but for the reply (one word ~ one token).
            result = asyncio.run(run_load(server.base_url, model, SEQUENCES, SEQUENCES,
                                          CONTEXT - OUTPUT_TOKENS - 64, OUTPUT_TOKENS))
            time.sleep(0.2)
            metrics = httpx.get(f"{server.base_url}/metrics").text
        finally:
            stop.set()
            sampler.join()
        peak = peak_of(server.process.pid, samples)
        assert not result.errors, result.errors[:2]
    # serve's /metrics states the cells by purpose the plan stated, and the plan's figure itself
    resident = candidate.resident
    assert f'edgeopt_kv_cells{{purpose="live"}} {float(resident.kv_live_cells)}' in metrics
    assert f'edgeopt_kv_cells{{purpose="prefix"}} {float(resident.kv_prefix_cells)}' in metrics
    [stated] = [float(line.split()[1]) for line in metrics.splitlines() if line.startswith("edgeopt_planned_resident_bytes ")]
    assert stated == resident.total_bytes  # plan and serve state one figure
    return Measured(candidate.resident.total_bytes, peak, candidate.kv_layout)


def embed_at_full_load(bundle: Path, memory: str, log: Path) -> Measured:
    """Concurrent requests of inputs as long as the model accepts: the embedding server's largest batches."""
    plan = plan_bundle(bundle, load_profile("host"), memory_bytes=parse_size(memory, "--memory"))
    [candidate] = plan.candidates
    assert candidate.fits and candidate.resident is not None
    limit = embedding_input_tokens(bundle, read_manifest(bundle))
    with launched_server(bundle, threads=2, extra_args=["--memory", memory, "--no-verify"], log_path=log) as server:
        stop, samples = threading.Event(), []
        sampler = threading.Thread(target=sample_peak, args=(server.process.pid, stop, samples))
        sampler.start()
        try:
            model = httpx.get(f"{server.base_url}/v1/models").json()["data"][0]["id"]
            longest = " ".join(["word"] * (limit - 2))  # one token a word, beside [CLS] and [SEP]

            async def send_all() -> list[httpx.Response]:
                async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:
                    body = {"model": model, "input": [longest] * EMBEDDING_INPUTS}
                    return await asyncio.gather(*[client.post("/v1/embeddings", json=body)
                                                  for _ in range(EMBEDDING_REQUESTS)])

            responses = asyncio.run(send_all())
            time.sleep(0.2)
        finally:
            stop.set()
            sampler.join()
        peak = peak_of(server.process.pid, samples)
    assert all(r.status_code == 200 for r in responses), [r.text[:200] for r in responses]
    assert responses[0].json()["usage"]["prompt_tokens"] == EMBEDDING_INPUTS * limit
    return Measured(candidate.resident.total_bytes, peak, None)


@pytest.fixture(scope="module")
def real_bundles(smollm2_checkpoint: Path, demo_model_dir: Path, tmp_path_factory) -> dict[str, Callable[[], Path]]:
    """Each case's bundle, built when a case asks for it (a slow case's export is not built for the others)."""
    root = tmp_path_factory.mktemp("resident")
    return {"smollm2-q4_1": cache(lambda: smollm2_bundle(smollm2_checkpoint, root / "smollm2")),
            "demo-q8_0": cache(lambda: optimize_demo_gguf(demo_model_dir, root / "demo", kv_type="f16")),
            "smollm2-onnx-int8": cache(lambda: cached_onnx_bundle(smollm2_checkpoint, DEMO_CACHE_ROOT, "smollm2",
                                                                  "int8", context=CONTEXT))}


def check_plan(label: str, memory: str, measured: Measured) -> None:
    ratio = measured.planned_bytes / measured.peak_bytes
    print(f"\n{label} (--memory {memory}, {measured.layout}): planned {measured.planned_bytes / MIB:.1f} MiB, "
          f"measured peak {measured.peak_bytes / MIB:.1f} MiB, planned/measured {ratio:.3f}")
    assert measured.peak_bytes <= measured.planned_bytes, "serve went past the memory its plan states"
    assert measured.planned_bytes <= 1.10 * measured.peak_bytes, "the plan states far more than serve reaches"


@pytest.mark.parametrize(("model", "profile"), CASES)
def test_serve_reaches_the_resident_memory_its_plan_states(model: str, profile: str, real_bundles, tmp_path: Path):
    memory, layout = PROFILES[model][profile]
    measured = serve_at_full_load(real_bundles[model](), memory, tmp_path / "serve.log")
    assert measured.layout == layout, "the profile no longer gives the layout it is here to measure"
    check_plan(f"{model} {profile}", memory, measured)


def test_an_embedding_server_reaches_the_resident_memory_its_plan_states(tmp_path: Path):
    bundle = cached_onnx_bundle(minilm_dir(), DEMO_CACHE_ROOT, "all-minilm-l6-v2", "int8")
    check_plan("all-MiniLM-L6-v2 onnx int8 embeddings", "1GiB", embed_at_full_load(bundle, "1GiB", tmp_path / "serve.log"))
