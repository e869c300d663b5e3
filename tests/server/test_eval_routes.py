"""The routes evaluation harnesses use, in their request shapes: /v1/completions with a batch of token-id
prompts and with max_tokens=0 + echo (the prompt scored, nothing generated), /tokenize and /detokenize in
llama-server's and vLLM's shapes, /tokenizer_info."""

from __future__ import annotations

import httpx

from tests.fixtures.fake_runtime import BOS_ID
from tests.server.conftest import MODEL


def test_a_batch_of_token_id_prompts_gets_one_choice_each_equal_to_its_own_request(serve_fake):
    live = serve_fake()
    batch = [[BOS_ID, 72, 105], [BOS_ID, 97, 98, 99, 100], [BOS_ID, 120]]
    body = {"model": MODEL, "prompt": batch, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0}
    reply = httpx.post(f"{live.url}/v1/completions", json=body, timeout=30).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    for prompt, choice in zip(batch, reply["choices"]):
        alone = httpx.post(f"{live.url}/v1/completions", json={**body, "prompt": prompt}, timeout=30).json()
        assert choice["logprobs"] == alone["choices"][0]["logprobs"] and choice["text"] == alone["choices"][0]["text"]
        assert len(choice["logprobs"]["token_logprobs"]) == len(prompt) + 1  # prompt tokens, then the one generated
    assert reply["usage"]["prompt_tokens"] == sum(map(len, batch)) and reply["usage"]["completion_tokens"] == 3
    texts = httpx.post(f"{live.url}/v1/completions", json={"model": MODEL, "prompt": ["ab", "cd"], "max_tokens": 2},
                       timeout=30).json()
    assert len(texts["choices"]) == 2
    streamed = httpx.post(f"{live.url}/v1/completions", json={**body, "stream": True}, timeout=30)
    assert streamed.status_code == 400 and "one prompt per streamed request" in streamed.json()["error"]["message"]


def test_max_tokens_zero_with_echo_scores_the_prompt_only(serve_fake):
    live = serve_fake()
    body = {"model": MODEL, "prompt": "Hello there", "echo": True, "logprobs": 2, "temperature": 0}
    scored = httpx.post(f"{live.url}/v1/completions", json={**body, "max_tokens": 0}, timeout=30).json()
    one = httpx.post(f"{live.url}/v1/completions", json={**body, "max_tokens": 1}, timeout=30).json()
    choice = scored["choices"][0]
    assert choice["text"] == "Hello there" and scored["usage"]["completion_tokens"] == 0
    prompt_len = scored["usage"]["prompt_tokens"]
    assert len(choice["logprobs"]["token_logprobs"]) == prompt_len
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert choice["logprobs"][key] == one["choices"][0]["logprobs"][key][:prompt_len]
    refused = httpx.post(f"{live.url}/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 0})
    assert refused.status_code == 400 and "echo" in refused.json()["error"]["message"]


def test_tokenize_and_detokenize_in_both_servers_shapes(serve_fake):
    live = serve_fake()
    llama = httpx.post(f"{live.url}/tokenize", json={"content": "Hi!"}).json()
    assert llama["tokens"] == [72, 105, 33]  # llama-server: no BOS unless asked
    assert httpx.post(f"{live.url}/tokenize", json={"content": "Hi!", "add_special": True}).json()["tokens"][0] == BOS_ID
    vllm = httpx.post(f"{live.url}/tokenize", json={"prompt": "Hi!"}).json()
    assert vllm["tokens"] == [BOS_ID, 72, 105, 33] and vllm["count"] == 4  # vLLM: BOS unless told not to
    pieces = httpx.post(f"{live.url}/tokenize", json={"content": "é", "with_pieces": True}).json()["tokens"]
    assert pieces == [{"id": 0xC3, "piece": [0xC3]}, {"id": 0xA9, "piece": [0xA9]}]  # half characters as bytes
    back = httpx.post(f"{live.url}/detokenize", json={"tokens": [72, 105, 33]}).json()
    assert back == {"content": "Hi!", "prompt": "Hi!"}
    bad = httpx.post(f"{live.url}/detokenize", json={"tokens": [99999]})
    assert bad.status_code == 400 and "99999" in bad.json()["error"]["message"]
    both = httpx.post(f"{live.url}/tokenize", json={"content": "a", "prompt": "b"})
    assert both.status_code == 400 and "exactly one" in both.json()["error"]["message"]


def test_tokenizer_info_names_the_end_token_and_template(serve_fake):
    info = httpx.get(f"{serve_fake().url}/tokenizer_info").json()
    assert info["eos_token"] == "<|im_end|>" and "<|im_start|>" in info["chat_template"]
    assert info["model_max_length"] == 1024
