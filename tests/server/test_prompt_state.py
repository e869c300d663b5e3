"""edgeopt serve --warm FILE on a real (tiny) GGUF: the first start computes and saves the system prompt's
KV, a restart loads it so the very first chat is a cache hit, an edited prompt is computed again, and a
state saved for another model or KV type is refused with what differs."""

from __future__ import annotations

import asyncio
import json

import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.engine import SamplingParams
from edgeopt.errors import ConfigError
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
from edgeopt.server.startup.prompt_state import state_paths, system_prefix_tokens
from tests.server.gguf_bundle import make_gguf_bundle

SYSTEM = "You are the build assistant of a robotics lab. Answer in one short paragraph.\n" * 6


@pytest.fixture(scope="module")
def bundle(tiny_gguf_factory, tiny_model_factory, tmp_path_factory):
    return make_gguf_bundle(tiny_gguf_factory("llama-gqa", "Q8_0"), tiny_model_factory("llama-gqa"),
                            tmp_path_factory.mktemp("warm") / "tiny-llama")


def start(bundle, warm_file):
    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=1 << 30, context=512, max_concurrency=2, threads=1, warm_file=warm_file)
    return load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)


def first_chat(served, question: str = "How do I flash the board?") -> tuple[list[int], int]:
    """Run one chat on a fresh server; returns (its prompt tokens, prompt tokens served from the cache)."""
    text = served.chat_template.render([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
    prompt = served.tokenizer.encode(text)

    async def run() -> None:
        await served.engine.add_request("chat", prompt, SamplingParams(max_tokens=4, temperature=0.0)).collect()

    before = served.engine.stats().prefix_cache_hit_tokens_total
    asyncio.run(run())
    return prompt, served.engine.stats().prefix_cache_hit_tokens_total - before


def test_a_restart_loads_the_saved_prompt_state_and_the_first_chat_hits_it(bundle, tmp_path, caplog) -> None:
    warm_file = tmp_path / "system.txt"
    warm_file.write_text(SYSTEM)
    caplog.set_level("INFO", logger="edgeopt.server")
    served = start(bundle, warm_file)
    try:
        prefix = system_prefix_tokens(SYSTEM, served.tokenizer, served.chat_template)
        assert served.engine.stats().kv_cached_tokens == len(prefix) > 60
    finally:
        served.close()
    state, meta = state_paths(warm_file)
    assert state.is_file() and json.loads(meta.read_text())["tokens"] == len(prefix)
    assert "prompt tokens computed" in caplog.text

    caplog.clear()
    served = start(bundle, warm_file)
    try:
        assert "prompt tokens loaded" in caplog.text
        stats = served.engine.stats()
        assert stats.kv_cached_tokens == len(prefix) and stats.prefill_tokens_total == 0  # nothing computed
        prompt, reused = first_chat(served)
        assert prompt[:len(prefix)] == prefix and reused == len(prefix)
    finally:
        served.close()


def test_an_edited_prompt_is_computed_again(bundle, tmp_path, caplog) -> None:
    warm_file = tmp_path / "system.txt"
    warm_file.write_text(SYSTEM)
    start(bundle, warm_file).close()
    warm_file.write_text(SYSTEM.replace("robotics", "chemistry"))
    caplog.set_level("INFO", logger="edgeopt.server")
    served = start(bundle, warm_file)
    try:
        assert "computing it again" in caplog.text and "prompt tokens computed" in caplog.text
        assert served.engine.stats().kv_cached_tokens > 0
    finally:
        served.close()


@pytest.mark.parametrize("key, stored", [("kv_type", "q8_0"), ("model_sha256", "0" * 64)])
def test_a_state_saved_for_another_model_or_kv_type_is_refused(bundle, tmp_path, key: str, stored: str) -> None:
    warm_file = tmp_path / "system.txt"
    warm_file.write_text(SYSTEM)
    start(bundle, warm_file).close()
    state, meta = state_paths(warm_file)
    data = json.loads(meta.read_text())
    data[key] = stored
    meta.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=rf"{key} '{stored}' \(this server: .*delete .*system.txt.kvstate"):
        start(bundle, warm_file)


def test_warm_needs_the_prefix_cache(bundle, tmp_path) -> None:
    warm_file = tmp_path / "system.txt"
    warm_file.write_text(SYSTEM)
    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=1 << 30, context=512, max_concurrency=2, threads=1, warm_file=warm_file,
                           prefix_cache=False)
    with pytest.raises(ConfigError, match="--warm needs the prefix cache.*--no-prefix-cache"):
        load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)
