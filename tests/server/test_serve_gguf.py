"""``edgeopt serve`` of a real GGUF bundle in a subprocess: the openai client works end to end, the
process never imports torch/transformers/optimum, and its RSS stays within bundle + KV + 120 MB."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.server.startup.launcher import ServeOptions, serving_shape
from tests.server.gguf_bundle import make_gguf_bundle
from tests.server.live import free_port

pytestmark = pytest.mark.timeout(300)
MIB = 2**20
HEAVY = ("torch", "transformers", "optimum")

# Runs the real CLI entry point; on SIGUSR1 it records which heavy packages have been imported so far.
# (Not at exit: uvicorn re-raises SIGTERM after its graceful shutdown, so atexit hooks never run.)
WRAPPER = textwrap.dedent("""
    import json, signal, sys
    report = sys.argv.pop(1)
    signal.signal(signal.SIGUSR1, lambda *_: open(report, "w").write(json.dumps(sorted(
        m for m in sys.modules if m.split(".")[0] in {heavy!r}))))
    from edgeopt.cli.app import main
    sys.argv[0] = "edgeopt"
    main()
""").format(heavy=set(HEAVY))


@pytest.fixture(scope="module")
def gguf_bundle(tiny_gguf_factory, tiny_model_factory, tmp_path_factory) -> Path:
    return make_gguf_bundle(tiny_gguf_factory("llama-gqa", "Q8_0"), tiny_model_factory("llama-gqa"),
                            tmp_path_factory.mktemp("served") / "tiny-llama")


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"edgeopt serve exited early with code {proc.returncode}"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("edgeopt serve never became healthy")


def test_serve_gguf_bundle_end_to_end_without_torch(gguf_bundle: Path, tmp_path: Path):
    port = free_port()
    report = tmp_path / "modules.json"
    args = ["--port", str(port), "--memory", "1GiB", "--max-concurrency", "4", "--context", "256",
            "--threads", "2", "--api-key", "k", "--log-level", "warning", "--speculative", "auto"]
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER, str(report), "serve", str(gguf_bundle), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    manifest = load_bundle(gguf_bundle)
    options = ServeOptions(memory_bytes=2**30, max_concurrency=4, context=256)
    shape = serving_shape(gguf_bundle, manifest, options)
    sizing = shape.sizing
    served_layout = shape.kv_layout
    try:
        wait_healthy(url, proc)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=60)
        [model] = [m.id for m in client.models.list().data]
        assert model == "tiny-llama"
        chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "def f():"}],
                                              max_tokens=8, temperature=0)
        assert chat.usage.completion_tokens >= 1 and chat.choices[0].finish_reason in ("stop", "length")
        text = client.completions.create(model=model, prompt="import os\n", max_tokens=8, temperature=0)
        streamed = client.completions.create(model=model, prompt="import os\n", max_tokens=8, temperature=0,
                                             stream=True)
        assert "".join(c.choices[0].text for c in streamed) == text.choices[0].text
        # Issue 12 item 1 on real llama.cpp logits: this used to kill the engine thread for good.
        tiny = client.completions.create(model=model, prompt="import os\n", max_tokens=8, temperature=5e-324,
                                         extra_body={"min_p": 0.1})
        assert tiny.choices[0].text == text.choices[0].text  # temperature -> 0 is greedy
        assert httpx.get(f"{url}/health").status_code == 200
        # What the launcher chose is in /metrics: the bundle's KV type and the layout its budget allows.
        # With --speculative auto (n-gram lookup), a prompt the model's answer repeats drafts tokens.
        client.completions.create(model=model, prompt="def f():\n    return 1\n" * 6, max_tokens=40, temperature=0)
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer k"}).text
        drafted = re.search(r'edgeopt_speculative_drafted_tokens_total\{source="ngram"\} (\S+)', metrics)
        assert drafted and float(drafted.group(1)) > 0, metrics
        assert 'edgeopt_speculative_accepted_tokens_total{source="ngram"}' in metrics
        assert f'edgeopt_kv_cache_info{{kv_type="f16",layout="{served_layout}"}} 1.0' in metrics, metrics
        rss = psutil.Process(proc.pid).memory_info().rss
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0].decode(errors="replace")
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status says how it ended.
    assert proc.returncode in (0, -signal.SIGTERM), output[-2000:]
    assert json.loads(report.read_text()) == [], "serving a GGUF bundle imported heavy packages"

    bundle_bytes = sum(f["bytes"] for f in manifest.files.values())
    kv_bytes = sizing.kv_capacity_tokens * sizing.kv_bytes_per_token
    print(f"\nserve RSS {rss / MIB:.1f} MiB; bundle {bundle_bytes / MIB:.1f} MiB + KV {kv_bytes / MIB:.1f} MiB")
    assert rss <= bundle_bytes + kv_bytes + 120 * MIB


def test_serve_refuses_a_context_beyond_the_model(gguf_bundle: Path):
    result = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "serve", str(gguf_bundle), "--context", "999999",
                             "--memory", "1GiB"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "999999" in result.stderr and "training context" in result.stderr, result.stderr
