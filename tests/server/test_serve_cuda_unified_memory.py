"""``edgeopt serve --target jetson-orin-nano-8gb`` on a CUDA GPU: the KV cache is sized from the profile's
unified memory (8 GB less the OS's share, counted once), not from the 80 GB card the test runs on, and the
server's GPU memory never grows past that pool while 16 requests decode.

The model is shaped so memory, not sequences x context, bounds the cache: 128 KiB of bf16 KV per token
(32 layers x 8 KV heads x 128) beside ~0.1 GB of weights, so the profile's pool holds ~40k tokens while 16
sequences of 4096 would want 64k.
"""

from __future__ import annotations

import json
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from edgeopt.profiles import load_profile

from edgeopt.store.bundle import load_bundle
from edgeopt.server.startup.serve_process import launched_server
from edgeopt.server.startup.launcher import ServeOptions, serving_shape
from tests.fixtures.tiny_models import build_tiny_model
from tests.runtimes.torch_bundles import make_torch_bundle

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(600)]
TARGET = "jetson-orin-nano-8gb"
MIB = 2**20


@pytest.fixture(scope="module")
def wide_kv_bundle(tmp_path_factory, tiny_tokenizer_dir: Path) -> Path:
    model_dir = build_tiny_model(tmp_path_factory.mktemp("wide-kv") / "model", "llama-gqa", tiny_tokenizer_dir,
                                 hidden_size=256, num_layers=32, intermediate_size=512,
                                 config_overrides=dict(num_attention_heads=8, num_key_value_heads=8, head_dim=128))
    config = json.loads((model_dir / "config.json").read_text())
    config["max_position_embeddings"] = 4096  # random weights: the window is only a number for sizing
    (model_dir / "config.json").write_text(json.dumps(config))
    return make_torch_bundle(model_dir, tmp_path_factory.mktemp("wide-kv-bundle") / "b", quant="bf16")


def gpu_memory_used_bytes() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return int(out.splitlines()[0].strip()) * MIB


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_serve_for_a_jetson_sizes_kv_from_the_profile_and_stays_inside_it(wide_kv_bundle: Path) -> None:
    profile = load_profile(TARGET)
    assert profile.platform.memory_shared_with_accelerator
    shape = serving_shape(wide_kv_bundle, load_bundle(wide_kv_bundle), ServeOptions(target=TARGET))
    sizing = shape.sizing
    host = serving_shape(wide_kv_bundle, load_bundle(wide_kv_bundle), ServeOptions(target="host")).sizing
    assert sizing.usable_memory_bytes == profile.usable_memory_bytes  # the one pool, not the GPU's memory
    assert sizing.kv_capacity_tokens == sizing.kv_fit_tokens < host.kv_capacity_tokens  # memory bounds it
    baseline = gpu_memory_used_bytes()
    peak = [baseline]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], gpu_memory_used_bytes())

    with launched_server(wide_kv_bundle, extra_args=["--target", TARGET]) as server:
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            assert metric(server.base_url, "edgeopt_kv_cache_capacity_tokens") == sizing.kv_capacity_tokens

            def ask(i: int) -> int:
                body = {"model": "b", "prompt": f"request {i}: " + "word " * 200, "max_tokens": 64,
                        "temperature": 0, "ignore_eos": True}
                response = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=300)
                assert response.status_code == 200, response.text
                return response.json()["usage"]["completion_tokens"]

            with ThreadPoolExecutor(16) as pool:
                assert list(pool.map(ask, range(16))) == [64] * 16
            peak[0] = max(peak[0], gpu_memory_used_bytes())
        finally:
            done.set()
            watcher.join(timeout=5)
    grown = peak[0] - baseline
    print(f"GPU memory grown by {grown / MIB:.0f} MiB for a pool of {sizing.usable_memory_bytes / MIB:.0f} MiB "
          f"(KV {sizing.kv_capacity_tokens} tokens x {sizing.kv_bytes_per_token} B)")
    assert grown <= sizing.usable_memory_bytes, (grown, sizing.usable_memory_bytes)
