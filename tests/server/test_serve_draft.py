"""``edgeopt serve TARGET --draft DRAFT`` end to end: the real SmolLM2-135M-Instruct served with a Q4_0 copy
of itself as draft answers an OpenAI client with llama.cpp's own greedy text of the target alone
(tests/fixtures/llama_greedy.py), drafts (seen on /metrics), samples, streams; a draft with another vocabulary stops the server with both vocabularies named;
contradicting flags are refused before anything loads."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from typer.testing import CliRunner

from edgeopt.cli.app import app
from edgeopt.demo.smollm2 import smollm2_gguf_path
from edgeopt.errors import ConfigError
from edgeopt.sources.model_source import open_model_source
from edgeopt.server.startup.draft import plan_with_draft
from edgeopt.server.startup.launcher import ServeOptions, load_served_model
from edgeopt.server.startup.serve_process import launched_server
from edgeopt.runtimes.llama_cpp.tokenizer import gguf_vocabulary
from tests.fixtures.draft_models import requantized_smollm2
from tests.fixtures.llama_greedy import llama_cpp_greedy

pytestmark = pytest.mark.timeout(300)
# flash attention, as the oracle runs it (tests/fixtures/llama_greedy.py says why the kernel is pinned)
ARGS = ["--memory", "1GiB", "--context", "1024", "--max-concurrency", "2", "--flash-attention", "on"]
PROMPT = "<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def draft_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return requantized_smollm2(tmp_path_factory.mktemp("draft"), "Q4_0")


def test_serve_with_a_draft_answers_as_the_target_alone(draft_gguf: Path) -> None:
    target = smollm2_gguf_path()
    with gguf_vocabulary(target) as tokenizer:
        ids = tokenizer.encode(PROMPT)
        expected = tokenizer.decode(llama_cpp_greedy(target, ids, 24))
    assert len(expected) > 20, "a reply this short would prove little"
    # one thread: two spin at llama.cpp's barriers, and on a shared host each waits for the other's core
    with launched_server(target, threads=1, extra_args=[*ARGS, "--draft", str(draft_gguf)]) as served:
        client = openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="x", max_retries=0, timeout=120)
        reply = client.completions.create(model=target.stem, prompt=PROMPT, max_tokens=24, temperature=0)
        assert reply.usage.prompt_tokens == len(ids) and reply.choices[0].text == expected
        streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
            model=target.stem, prompt=PROMPT, max_tokens=24, temperature=0, stream=True) if chunk.choices)
        assert streamed == expected
        sampled = client.chat.completions.create(model=target.stem, max_tokens=8, temperature=0.8, seed=7,
                                                 messages=[{"role": "user", "content": "Say something kind."}])
        assert sampled.usage.completion_tokens > 0
        metrics = httpx.get(f"{served.base_url}/metrics", timeout=10).text
    drafted = [line for line in metrics.splitlines()
               if line.startswith('edgeopt_speculative_drafted_tokens_total{source="draft"}')]
    assert drafted and float(drafted[0].split()[-1]) > 0


def test_a_draft_with_another_vocabulary_is_refused_when_the_model_loads(tiny_gguf_factory) -> None:
    tiny = tiny_gguf_factory("llama-gqa", "F16")
    options = ServeOptions(memory_bytes=1024**3, context=1024, max_concurrency=2, threads=2, draft=tiny,
                           speculative="draft")
    source = open_model_source(smollm2_gguf_path())
    shape, draft = plan_with_draft(source.bundle_dir, source.manifest, options.shape_request(), tiny, 4,
                                   options.memory_bytes, "host", verify=False)
    with pytest.raises(ConfigError) as refused:
        load_served_model(source.bundle_dir, source.manifest, shape, options, draft=draft)
    message = str(refused.value)
    assert str(tiny) in message and str(smollm2_gguf_path()) in message and "different vocabularies" in message
    assert "512-token" in message and "49152-token" in message and "same tokenizer" in refused.value.hint


@pytest.mark.parametrize("flags, message", [
    (["--speculative", "ngram"], "--speculative ngram asks for n-gram lookup"),
    (["--speculative", "off"], "--speculative off asks for no speculation"),
])
def test_contradicting_flags_are_refused_before_loading(draft_gguf: Path, flags: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["serve", str(smollm2_gguf_path()), "--draft", str(draft_gguf), *flags])
    assert result.exit_code != 0 and message in f"{result.output}{result.exception}"


def test_speculative_draft_without_a_draft_is_refused() -> None:
    result = CliRunner().invoke(app, ["serve", str(smollm2_gguf_path()), "--speculative", "draft"])
    assert result.exit_code != 0 and "needs a draft model" in f"{result.output}{result.exception}"
