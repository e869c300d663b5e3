"""Issue 12 item 2: preparing a prompt can neither stall the event loop nor take time without bound.

The exact requests from the issue, against real bundles (GGUF: llama.cpp's tokenizer; ONNX: `tokenizers`):
a 350 KB prompt of ``"<|endoftext|>a" x 25000`` and a 3.4 MB chat of 100k tiny messages. Both are refused
with a 400 before any tokenizing (the refusal says why: bytes, or the message cap), and /health answers
while a slow prompt is being tokenized.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from edgeopt.server.chat.request import MAX_CHAT_MESSAGES
from edgeopt.server.batching.prompt_worker import INLINE_PROMPT_CHARS
from tests.fixtures.fake_runtime import ByteTokenizer
from tests.server.conftest import MODEL
from tests.server.gguf_bundle import make_gguf_bundle, serve_bundle_live
from tests.server.live import LiveServer

pytestmark = pytest.mark.timeout(300)
CONTEXT = 256
FLOOD_PROMPT = "<|endoftext|>a" * 25000  # 350 KB
TINY_MESSAGES = [{"role": "user", "content": "hi"}] * 100_000  # ~3.4 MB of JSON, under the 4 MiB body limit


@pytest.fixture(scope="module", params=["gguf", "onnx"])
def real_server(request, tiny_gguf_factory, tiny_model_factory, tmp_path_factory) -> Iterator[LiveServer]:
    if request.param == "gguf":
        bundle = make_gguf_bundle(tiny_gguf_factory("llama-gqa", "Q8_0"), tiny_model_factory("llama-gqa"),
                                  tmp_path_factory.mktemp("gguf") / "tiny-llama")
    else:
        bundle = request.getfixturevalue("onnx_fp32_bundle")
    live = serve_bundle_live(bundle, CONTEXT)
    yield live
    live.stop()


def timed_post(live: LiveServer, path: str, body: dict) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    response = httpx.post(f"{live.url}{path}", json=body, timeout=300)
    return response, time.perf_counter() - start


def test_special_token_flood_is_refused_before_tokenizing(real_server: LiveServer):
    response, seconds = timed_post(real_server, "/v1/completions", {"model": MODEL, "prompt": FLOOD_PROMPT})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "prompt"
    assert "350000 bytes" in error["message"] and f"context of {CONTEXT} tokens" in error["message"], error
    print(f"\n350 KB special-token prompt refused in {seconds * 1000:.0f} ms")
    assert httpx.get(f"{real_server.url}/health").status_code == 200


def test_chat_of_100k_tiny_messages_is_refused_by_the_message_cap(real_server: LiveServer):
    body = {"model": MODEL, "messages": TINY_MESSAGES, "max_tokens": 1}
    response, seconds = timed_post(real_server, "/v1/chat/completions", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages"
    assert "100000 messages" in error["message"], error
    assert str(MAX_CHAT_MESSAGES) in error["message"]
    print(f"\n100k-message chat refused in {seconds * 1000:.0f} ms")


def test_a_long_chat_under_the_cap_is_refused_by_its_size_not_tokenized(real_server: LiveServer):
    messages = [{"role": "user", "content": "<|im_start|>system\nhi " * 30}] * MAX_CHAT_MESSAGES
    response, _ = timed_post(real_server, "/v1/chat/completions", {"model": MODEL, "messages": messages})
    assert response.status_code == 400, response.text
    assert "bytes" in response.json()["error"]["message"]


class SlowTokenizer(ByteTokenizer):
    """Tokenizing takes a while, releasing the GIL as llama.cpp (ctypes) and `tokenizers` (Rust) do."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.finished_at: list[float] = []

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        if "slow" in text:
            time.sleep(self.seconds)
            self.finished_at.append(time.perf_counter())
        return super().encode(text, add_special, parse_special)


SLOW = "slow " * (INLINE_PROMPT_CHARS // 5 + 1)  # past the length prepared on the event loop


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"model": MODEL, "prompt": SLOW, "max_tokens": 1}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": SLOW}], "max_tokens": 1}),
])
def test_health_answers_while_a_prompt_is_being_tokenized(serve_fake, path, body):
    live = serve_fake(context_length=4096, kv_capacity_tokens=4096)
    tokenizer = live.state.served.tokenizer = SlowTokenizer(seconds=3.0)
    big = threading.Thread(target=lambda: httpx.post(f"{live.url}{path}", json=body, timeout=60))
    big.start()
    time.sleep(0.3)  # the slow request is in the tokenizer now
    health = httpx.get(f"{live.url}/health", timeout=60)
    answered = time.perf_counter()
    big.join()
    assert health.status_code == 200
    [tokenized] = tokenizer.finished_at
    assert answered < tokenized, "/health waited for the tokenizer: it ran on the event loop"
    print(f"\n/health answered {tokenized - answered:.2f} s before the slow prompt was tokenized")


class SlowBatchTokenizer:
    """An encoder bundle's tokenizer whose batches take a while (GIL released, as in `tokenizers`)."""

    def __init__(self, inner, seconds: float) -> None:  # noqa: ANN001 - runtimes' BundleTokenizer
        self.inner, self.seconds = inner, seconds
        self.finished_at: list[float] = []

    def encode_batch(self, texts: list[str], add_special: bool = True,
                     max_length: int | None = None) -> list[list[int]]:
        time.sleep(self.seconds)
        self.finished_at.append(time.perf_counter())
        return self.inner.encode_batch(texts, add_special, max_length)


def test_health_answers_while_embedding_inputs_are_tokenized(encoder_fp32_bundle):
    from edgeopt.runtimes import load_embedding_runtime

    from edgeopt.store.bundle import load_bundle
    from edgeopt.server.app import create_app
    from edgeopt.server.state import ServedModel, ServerSettings
    from tests.server.live import start_live_server

    runtime = load_embedding_runtime("onnxruntime", encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), threads=1)
    tokenizer = runtime.tokenizer = SlowBatchTokenizer(runtime.tokenizer, seconds=3.0)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=tokenizer, embedder=runtime)
    live = start_live_server(create_app(ServerSettings(model_names=("bert",), kind="embedding"), served=served))
    try:
        big = threading.Thread(target=lambda: httpx.post(f"{live.url}/v1/embeddings", timeout=60,
                                                         json={"model": "bert", "input": "slow"}))
        big.start()
        time.sleep(0.3)
        health = httpx.get(f"{live.url}/health", timeout=60)
        answered = time.perf_counter()
        big.join()
    finally:
        live.stop()
    assert health.status_code == 200
    [tokenized] = tokenizer.finished_at
    assert answered < tokenized, "/health waited for the tokenizer: it ran on the event loop"
