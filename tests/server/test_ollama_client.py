"""Ollama's API with the official ``ollama`` client against a live server (the real engine over the fake
runtime): chat streamed and not, a tool call, ``format`` as a JSON schema, generate, list, show, ps, name:tag
resolution, options, and refusals in Ollama's error shape."""

from __future__ import annotations

import json

import httpx
import jsonschema
import ollama
import pytest

from tests.fixtures.fake_runtime import EOS_ID
from tests.fixtures.scripted_runtime import ScriptedRuntime
from tests.server.conftest import MODEL

pytestmark = pytest.mark.timeout(120)
GREEDY = {"temperature": 0, "num_predict": 24}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"]}}}


def client_for(live) -> ollama.Client:
    return ollama.Client(host=live.url, timeout=60)


def expected_chat_text(live, user: str, tokens: int) -> str:
    """The fake model's own greedy reply to the ChatML prompt of one user turn."""
    prompt = f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    ids = live.runtime.greedy_reference(live.runtime.tokenizer.encode(prompt, add_special=False), tokens)
    return live.runtime.tokenizer.decode([t for t in ids if t != EOS_ID])


def test_chat_answers_the_models_greedy_reply_streamed_and_not(serve_fake):
    live = serve_fake()
    client = client_for(live)
    messages = [{"role": "user", "content": "Hello"}]
    whole = client.chat(model=MODEL, messages=messages, options=GREEDY, stream=False)
    assert whole.message.role == "assistant" and whole.done and whole.done_reason == "length"
    assert whole.message.content == expected_chat_text(live, "Hello", 24)
    assert whole.eval_count == 24 and whole.prompt_eval_count > 0 and whole.total_duration > 0
    parts = list(client.chat(model=MODEL, messages=messages, options=GREEDY, stream=True))
    assert len(parts) > 2 and parts[-1].done and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].eval_count == 24


def test_a_tool_call_comes_back_as_ollamas_call_object_and_its_result_goes_back_in(serve_fake):
    call = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}
    live = serve_fake(runtime=ScriptedRuntime(json.dumps(call)))
    client = client_for(live)
    question = [{"role": "user", "content": "Weather in Paris?"}]
    for reply in (client.chat(model=MODEL, messages=question, tools=[WEATHER], options={"temperature": 0}),
                  list(client.chat(model=MODEL, messages=question, tools=[WEATHER], options={"temperature": 0},
                                   stream=True))[-1]):
        [made] = reply.message.tool_calls
        assert made.function.name == "get_weather" and made.function.arguments == call["arguments"]
        assert reply.message.content == ""
        jsonschema.validate(made.function.arguments, WEATHER["function"]["parameters"])
    # The client sends the call and the tool's answer back: both reach the model's prompt.
    follow_up = [*question, {"role": "assistant", "content": "", "tool_calls": [{"function": call}]},
                 {"role": "tool", "content": "21 degrees", "tool_name": "get_weather"}]
    answered = client.chat(model=MODEL, messages=follow_up, tools=[WEATHER], options={"temperature": 0})
    prompt_text = live.runtime.tokenizer.decode(live.runtime.prompts[-1])
    assert "21 degrees" in prompt_text and '"city": "Paris"' in prompt_text, prompt_text
    assert answered.done


def test_format_as_a_json_schema_is_enforced_on_a_model_that_would_write_anything(serve_fake):
    live = serve_fake()
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "member": {"type": "boolean"}},
              "required": ["name", "member"], "additionalProperties": False}
    reply = client_for(live).chat(model=MODEL, messages=[{"role": "user", "content": "Who?"}], format=schema,
                                  options={"temperature": 0, "num_predict": 200})
    jsonschema.validate(json.loads(reply.message.content), schema)


def test_format_json_lets_a_json_reply_through_and_cuts_a_chatty_one_to_json(serve_fake):
    """A model that answers 'Sure: {...}' is held to JSON from the first byte under format="json"."""
    chatty = serve_fake(runtime=ScriptedRuntime('Sure: {"answer": 42}'))
    plain = client_for(chatty).generate(model=MODEL, prompt="Answer?", options={"temperature": 0})
    assert plain.response == 'Sure: {"answer": 42}'
    held = client_for(chatty).generate(model=MODEL, prompt="Answer?", format="json",
                                       options={"temperature": 0, "num_predict": 60})
    assert held.response.lstrip().startswith("{") and "Sure" not in held.response


def test_generate_templated_raw_and_with_context(serve_fake):
    live = serve_fake()
    client = client_for(live)
    templated = client.generate(model=MODEL, prompt="Hello", options=GREEDY)
    assert templated.response == expected_chat_text(live, "Hello", 24) and templated.done
    raw = client.generate(model=MODEL, prompt="abc", raw=True, options=GREEDY)
    ids = live.runtime.greedy_reference(live.runtime.tokenizer.encode("abc"), 24)
    assert raw.response == live.runtime.tokenizer.decode([t for t in ids if t != EOS_ID])
    # The returned context is the conversation's ids: sent back, the next prompt continues it.
    assert templated.context[-24:] and len(templated.context) == templated.prompt_eval_count + 24
    again = client.generate(model=MODEL, prompt="More", context=templated.context, options=GREEDY)
    assert again.prompt_eval_count > len(templated.context)
    streamed = list(client.generate(model=MODEL, prompt="Hello", options=GREEDY, stream=True))
    assert "".join(p.response for p in streamed) == templated.response


def test_list_show_ps_version_and_name_tags(serve_fake):
    live = serve_fake(settings={"model_card": {"format": "gguf", "quant": "Q8_0", "architecture": "llama",
                                               "weights_bytes": 1234, "parameters": 135_000_000}})
    client = client_for(live)
    [listed] = client.list().models
    assert listed.model == MODEL and listed.size == 1234
    assert listed.details.quantization_level == "Q8_0" and listed.details.parameter_size == "135.0M"
    shown = client.show(f"{MODEL}:latest")
    assert "<|im_start|>" in shown.template and "completion" in shown.capabilities
    assert shown.modelinfo["llama.context_length"] == 1024 and shown.details.family == "llama"
    [running] = client.ps().models
    assert running.model == MODEL and running.context_length == 1024
    assert httpx.get(f"{live.url}/api/version").json()["version"]
    tagged = client.chat(model="alias:7b", messages=[{"role": "user", "content": "Hello"}], options=GREEDY)
    assert tagged.message.content == expected_chat_text(live, "Hello", 24)


def test_refusals_are_clear_in_ollamas_error_shape(serve_fake):
    live = serve_fake()
    client = client_for(live)
    hello = [{"role": "user", "content": "Hello"}]
    with pytest.raises(ollama.ResponseError, match="not found") as missing:
        client.chat(model="llama3:8b", messages=hello)
    assert missing.value.status_code == 404 and MODEL in missing.value.error
    with pytest.raises(ollama.ResponseError, match="not supported") as pulled:
        client.pull("llama3")
    assert pulled.value.status_code == 501 and "edgeopt optimize" in pulled.value.error
    with pytest.raises(ollama.ResponseError, match="num_ctx=4096"):
        client.chat(model=MODEL, messages=hello, options={"num_ctx": 4096})
    with pytest.raises(ollama.ResponseError, match="mirostat"):
        client.chat(model=MODEL, messages=hello, options={"mirostat": 2})
    with pytest.raises(ollama.ResponseError, match="--threads"):
        client.chat(model=MODEL, messages=hello, options={"num_thread": 4})
    with pytest.raises(ollama.ResponseError, match="does not think"):
        client.chat(model=MODEL, messages=hello, think=True)
    with pytest.raises(ollama.ResponseError, match="raw=true"):
        client.generate(model=MODEL, prompt="abc", raw=True, logprobs=True)
    with pytest.raises(ollama.ResponseError, match="embeddings"):
        client.embed(model=MODEL, input="hello")
    assert httpx.get(f"{live.url}/health").status_code == 200  # and it keeps serving


def test_options_change_what_is_generated(serve_fake):
    live = serve_fake()
    client = client_for(live)
    hello = [{"role": "user", "content": "Hello"}]
    short = client.chat(model=MODEL, messages=hello, options={"temperature": 0, "num_predict": 5})
    assert short.eval_count == 5 and short.done_reason == "length"
    narrow = client.chat(model=MODEL, messages=hello, options={"temperature": 0, "num_ctx": 70})
    assert narrow.prompt_eval_count + narrow.eval_count == 70  # num_ctx ends the reply
    stopped = client.chat(model=MODEL, messages=hello, options={**GREEDY, "stop": [short.message.content[2:4]]})
    assert stopped.message.content == short.message.content[:2] and stopped.done_reason == "stop"
    seeded = [client.chat(model=MODEL, messages=hello, options={"temperature": 1.5, "seed": 7, "num_predict": 12})
              .message.content for _ in range(2)]
    assert seeded[0] == seeded[1]
    default = client.chat(model=MODEL, messages=hello, options={"seed": 7, "num_predict": 12})
    assert default.message.content != seeded[0]  # Ollama's default temperature (0.8), not 1.5
