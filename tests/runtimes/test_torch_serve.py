"""A torch bundle served by the real launcher, engine and FastAPI app: greedy output equals transformers'
``generate``, alone and with concurrent requests batched together."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.server.app import create_app
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, model_names, serving_shape
from edgeopt.server.state import ServerSettings
from tests.runtimes.torch_bundles import make_torch_bundle
from tests.server.live import start_live_server

pytestmark = pytest.mark.timeout(300)
PROMPTS = ["import os\n", "def main():\n    ", "class Parser:\n", "# compute the sum of"]


@pytest.fixture(scope="module")
def served(tiny_llama_dir: Path, tmp_path_factory):
    bundle = make_torch_bundle(tiny_llama_dir, tmp_path_factory.mktemp("serve") / "tiny-torch")
    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=2**31, max_concurrency=4, context=256, threads=2)  # > torch overhead
    shape = serving_shape(bundle, manifest, options)
    sizing = shape.sizing
    settings = ServerSettings(model_names=model_names(bundle, manifest), memory_budget_bytes=sizing.usable_memory_bytes)
    app = create_app(settings, loader=lambda: load_served_model(bundle, manifest, shape, options))
    live = start_live_server(app, timeout_s=120)
    yield live
    live.stop()


def transformers_greedy(model_dir: Path, prompt_ids: list[int], max_tokens: int, eos_id: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_tokens, do_sample=False,
                             eos_token_id=eos_id, pad_token_id=eos_id)
    generated = out[0, len(prompt_ids):].tolist()
    return generated[:generated.index(eos_id)] if eos_id in generated else generated


def expected_text(live, model_dir: Path, prompt: str, max_tokens: int) -> str:
    served_model = live.state.served
    tokenizer = served_model.tokenizer
    eos = next(iter(served_model.runtime.info.eos_token_ids))
    ids = transformers_greedy(model_dir, tokenizer.encode(prompt, add_special=True), max_tokens, eos)
    return b"".join(tokenizer.token_bytes(t) for t in ids).decode("utf-8", errors="replace")


def client(live) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_greedy_completion_equals_transformers_generate(served, tiny_llama_dir: Path) -> None:
    result = client(served).completions.create(model="tiny-torch", prompt=PROMPTS[0], max_tokens=16, temperature=0)
    assert result.choices[0].text == expected_text(served, tiny_llama_dir, PROMPTS[0], 16)
    assert result.usage.completion_tokens >= 1


def test_concurrent_requests_are_batched_and_each_matches_its_solo_run(served, tiny_llama_dir: Path) -> None:
    runtime = served.state.served.runtime
    forwards_before = runtime.forwards

    def ask(prompt: str) -> str:
        return client(served).completions.create(model="tiny-torch", prompt=prompt, max_tokens=12,
                                                 temperature=0).choices[0].text

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        texts = list(pool.map(ask, PROMPTS))
    for prompt, text in zip(PROMPTS, texts):
        assert text == expected_text(served, tiny_llama_dir, prompt, 12)
    # 4 requests x (1 prefill + up to 11 decodes) would be up to 48 forwards one at a time.
    assert runtime.forwards - forwards_before < 40


def test_streamed_chat_equals_the_non_streamed_one(served) -> None:
    messages = [{"role": "user", "content": "Write a loop"}]
    whole = client(served).chat.completions.create(model="tiny-torch", messages=messages, max_tokens=10,
                                                   temperature=0)
    chunks = client(served).chat.completions.create(model="tiny-torch", messages=messages, max_tokens=10,
                                                    temperature=0, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
