"""``edgeopt serve FILE.gguf``: a GGUF that edgeopt did not write is served from its own metadata (shape,
context, chat template, llama.cpp's tokenizer), and what it answers is llama.cpp's own greedy output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from typer.testing import CliRunner

from edgeopt.cli.app import app
from edgeopt.sources.model_source import open_model_source
from tests.fixtures.llama_greedy import llama_cpp_greedy
from edgeopt.demo.smollm2 import smollm2_gguf_path as smollm2_gguf
from tests.server.gguf_file_server import serve_path_live
from tests.server.live import free_port
from tests.server.test_serve_gguf import WRAPPER, wait_healthy

pytestmark = pytest.mark.timeout(300)
MESSAGES = [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "def main():"}]


def test_a_gguf_from_llamas_converter_chats_with_its_template_and_llama_cpps_greedy_output(
        reference_gguf: Path, qwen2_checkpoint: Path):
    from transformers import AutoTokenizer

    hf_ids = AutoTokenizer.from_pretrained(qwen2_checkpoint).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    live = serve_path_live(reference_gguf)
    try:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="x", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["tiny-ref"]
        reply = client.chat.completions.create(model="tiny-ref", messages=MESSAGES, max_tokens=24, temperature=0)
        expected = llama_cpp_greedy(reference_gguf, list(hf_ids), 24)
        # The template rendered from the GGUF's metadata gives transformers' prompt, token for token ...
        assert reply.usage.prompt_tokens == len(hf_ids)
        # ... and the answer is llama.cpp's own greedy continuation of exactly those ids.
        assert reply.usage.completion_tokens == len(expected) or reply.choices[0].finish_reason == "stop"
        assert len(expected) >= 8, "a reply this short would prove little"
        assert reply.choices[0].message.content == live.state.served.tokenizer.decode(expected)
    finally:
        live.stop()


def test_the_real_smollm2_gguf_is_served_straight_from_its_package_without_torch(tmp_path: Path):
    gguf = smollm2_gguf()
    port = free_port()
    report = tmp_path / "modules.json"
    args = ["--port", str(port), "--memory", "1GiB", "--context", "1024", "--threads", "2", "--log-level", "warning"]
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER, str(report), "serve", str(gguf), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    question = [{"role": "user", "content": "Name the largest ocean on Earth."}]
    try:
        wait_healthy(url, proc)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
        [model] = [m.id for m in client.models.list().data]
        assert model == gguf.stem
        reply = client.chat.completions.create(model=model, messages=question, max_tokens=30, temperature=0)
        assert "Pacific" in reply.choices[0].message.content
        proc.send_signal(signal.SIGUSR1)
        for _ in range(200):
            if report.exists():
                break
            import time
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0].decode(errors="replace")
    assert proc.returncode in (0, -signal.SIGTERM), output[-2000:]
    assert json.loads(report.read_text()) == [], "serving a GGUF file imported heavy packages"


def test_import_inspect_and_plan_of_a_gguf_file(reference_gguf: Path, qwen2_checkpoint: Path, tmp_path: Path):
    runner = CliRunner()
    bundle = tmp_path / "imported"
    result = runner.invoke(app, ["import", str(reference_gguf), "-o", str(bundle)])
    assert result.exit_code == 0, result.output
    source = open_model_source(bundle)  # verifies every file's sha256
    manifest = source.manifest
    assert not source.is_file and source.names[0] == "imported"
    assert set(manifest.files) == {"model.gguf"}
    assert manifest.source_revision == "sha256:" + manifest.files["model.gguf"]["sha256"]
    assert manifest.chat_template == json.loads((qwen2_checkpoint / "tokenizer_config.json").read_text())["chat_template"]
    config = json.loads((qwen2_checkpoint / "config.json").read_text())
    assert manifest.kv.context_length == config["max_position_embeddings"]
    for target in (reference_gguf, bundle):
        shown = runner.invoke(app, ["inspect", str(target)])
        assert shown.exit_code == 0, shown.output
        assert "quality    absent" in shown.output
    planned = runner.invoke(app, ["plan", str(reference_gguf), "--memory", "256", "--json"])
    assert planned.exit_code == 0, planned.output
    [candidate] = json.loads(planned.output)["candidates"]
    assert candidate["quant"] == "F32" and candidate["weight_bytes"] == reference_gguf.stat().st_size
    # The plan's KV/token is the one serving sizes with (from the same metadata).
    assert candidate["kv_bytes_per_token"] == manifest.kv.kv_elements_per_token * 2  # f16 KV


def test_a_file_that_is_not_gguf_is_refused_with_the_fix(tmp_path: Path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a model at all")
    result = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "serve", str(bogus), "--memory", "1GiB"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "model.gguf" in result.stderr and "fix:" in result.stderr, result.stderr
