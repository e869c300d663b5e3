"""POST /v1/responses and GET/DELETE /v1/responses/{id} with the official openai client, over the fake runtime.

The Responses API runs on the chat path: the same conversation as a chat must give the same prompt (token
count) and, greedy, the same text. Streams are checked event by event against the client's own types
(tests/server/responses_events.py). The tool-calling, structured-output and prefix-cache flows on real
chat templates are in test_responses_tools.py; the Agents SDK in test_agents_sdk.py.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.server.conftest import MODEL
from tests.server.responses_events import check_events, stream_events

pytestmark = pytest.mark.timeout(120)


def client_for(live) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_a_response_is_the_same_chat_as_chat_completions(serve_fake):
    client = client_for(serve_fake())
    response = client.responses.create(model=MODEL, instructions="Be brief.", input="Hello there", temperature=0,
                                       max_output_tokens=12, metadata={"run": "1"}, store=False)
    chat = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=12, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}])
    assert response.output_text == chat.choices[0].message.content and response.output_text
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens == 12
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.metadata == {"run": "1"} and response.object == "response" and response.id.startswith("resp_")
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "incomplete"


def test_items_are_the_same_turns_as_chat_messages(serve_fake):
    """Message items (with parts and a developer role), a function call and its output, against the chat
    messages they stand for."""
    client = client_for(serve_fake())
    items = [{"role": "developer", "content": "Use tools."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 3}'}]
    messages = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp_c": 3}'}]
    response = client.responses.create(model=MODEL, input=items, temperature=0, max_output_tokens=8)
    chat = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=8)
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.output_text == chat.choices[0].message.content


def test_streamed_events_parse_with_the_clients_types_and_equal_the_non_streamed_reply(serve_fake):
    live = serve_fake(eos_logit=2.0)
    ask = {"model": MODEL, "input": "Tell me", "temperature": 0, "max_output_tokens": 40}
    whole = client_for(live).responses.create(**ask)
    events = stream_events(live.url, ask)
    final = check_events(events)
    assert final.output_text == whole.output_text and final.status == whole.status
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed" if final.status == "completed" else "response.incomplete"]
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_the_clients_stream_helper_rebuilds_the_response(serve_fake):
    client = client_for(serve_fake(eos_logit=5.0))
    with client.responses.stream(model=MODEL, input="Hi", temperature=0, max_output_tokens=300) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "".join(deltas)


def test_a_length_stop_streams_response_incomplete(serve_fake):
    live = serve_fake()
    final = check_events(stream_events(live.url, {"model": MODEL, "input": "x", "max_output_tokens": 3}))
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert final.output[0].status == "incomplete"


def test_logprobs_are_included_when_asked(serve_fake):
    live = serve_fake()
    client = client_for(live)
    ask = dict(model=MODEL, input="abc", max_output_tokens=5, temperature=0, top_logprobs=2,
               include=["message.output_text.logprobs"])
    response = client.responses.create(**ask)
    logprobs = response.output[0].content[0].logprobs
    assert len(logprobs) == 5 and all(len(entry.top_logprobs) == 2 for entry in logprobs)
    assert "".join(entry.token for entry in logprobs) == response.output_text
    final = check_events(stream_events(live.url, ask))
    assert [e.token for e in final.output[0].content[0].logprobs] == [e.token for e in logprobs]


def test_stored_responses_chain_get_and_delete(serve_fake):
    live = serve_fake(cache_slots=4)
    client = client_for(live)
    first = client.responses.create(model=MODEL, instructions="Be brief.", input="One", temperature=0,
                                    max_output_tokens=6)
    second = client.responses.create(model=MODEL, instructions="Be brief.", input="Two", temperature=0,
                                     max_output_tokens=6, previous_response_id=first.id)
    chat = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=6, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "One"},
        {"role": "assistant", "content": first.output_text}, {"role": "user", "content": "Two"}])
    assert second.usage.input_tokens == chat.usage.prompt_tokens
    assert second.output_text == chat.choices[0].message.content
    # The follow-up's prompt starts with the first turn's prompt and answer, which the prefix cache kept.
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(first.id).output_text == first.output_text
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError, match=first.id):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError, match=first.id) as refused:
        client.responses.create(model=MODEL, input="Three", previous_response_id=first.id)
    assert refused.value.body["param"] == "previous_response_id"


def test_store_false_keeps_nothing(serve_fake):
    client = client_for(serve_fake())
    response = client.responses.create(model=MODEL, input="x", max_output_tokens=2, store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError, match=response.id):
        client.responses.retrieve(response.id)


def test_the_store_evicts_least_recently_used_within_its_byte_budget_and_metrics_count_it(serve_fake):
    live = serve_fake(settings={"responses_store_bytes": 6000})
    client = client_for(live)
    ids = [client.responses.create(model=MODEL, input=f"turn {i}", max_output_tokens=4).id for i in range(8)]
    client.responses.retrieve(ids[-2])  # used: kept over the newest-but-one
    metrics = {line.split()[0]: float(line.split()[1]) for line in httpx.get(f"{live.url}/metrics").text.splitlines()
               if line.startswith("edgeopt_responses_")}
    stored = int(metrics["edgeopt_responses_stored"])
    assert 0 < stored < 8 and metrics["edgeopt_responses_store_evicted_total"] == 8 - stored
    assert 0 < metrics["edgeopt_responses_store_bytes"] <= metrics["edgeopt_responses_store_budget_bytes"] == 6000
    with pytest.raises(openai.NotFoundError, match=ids[0]):
        client.responses.retrieve(ids[0])
    assert client.responses.retrieve(ids[-1]).id == ids[-1]


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"tools": [{"type": "web_search"}]}, "tools", "'web_search'"),
    ({"tools": [{"type": "local_shell"}]}, "tools", "'local_shell'"),
    ({"tool_choice": {"type": "file_search"}}, "tool_choice", "'file_search'"),
    ({"input": [{"type": "computer_call_output", "call_id": "c", "output": {}}]}, "input", "'computer_call_output'"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]}, "input",
     "images are not supported"),
    ({"truncation": "auto"}, "truncation", "disabled"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text", '"schema"'),
    ({"text": {"verbosity": "low"}}, "text.verbosity", "medium"),
    ({"top_logprobs": 2}, "top_logprobs", "message.output_text.logprobs"),
    ({"tool_choice": "required"}, "tool_choice", "no tools"),
    ({"max_output_tokens": 100000}, "max_output_tokens", "max_output_tokens="),
    ({"background": True}, "background", "not supported"),
])
def test_what_cannot_be_honoured_is_a_400_naming_it(serve_fake, body, param, words):
    live = serve_fake()
    reply = httpx.post(f"{live.url}/v1/responses", json={"model": MODEL, "input": "x", **body})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"].startswith(param) and words in error["message"], error
    ok = client_for(live).responses.create(model=MODEL, input="still here", max_output_tokens=2)
    assert ok.usage.output_tokens == 2


def test_a_failed_step_is_a_500_or_response_failed_and_nothing_is_stored() -> None:
    from edgeopt.server.app import create_app
    from edgeopt.server.state import ServerSettings
    from tests.server.conftest import fake_served_model
    from tests.server.live import start_live_server
    from tests.server.test_hardening import FailingRuntime

    live = start_live_server(create_app(ServerSettings(model_names=(MODEL,)),
                                        served=fake_served_model(FailingRuntime())))
    try:
        body = {"model": MODEL, "input": "boom~", "max_output_tokens": 4}
        failed = httpx.post(f"{live.url}/v1/responses", json=body)
        assert failed.status_code == 500 and "device lost" in failed.json()["error"]["message"]
        events = stream_events(live.url, body)
        final = check_events(events)
        assert final.status == "failed" and final.error.code == "server_error" and "device lost" in final.error.message
        with pytest.raises(openai.NotFoundError):
            client_for(live).responses.retrieve(final.id)
        assert client_for(live).responses.create(model=MODEL, input="fine", max_output_tokens=2).status
    finally:
        live.stop()


CODEX_SHELL = {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
               "strict": False, "parameters": {"type": "object", "properties": {
                   "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"},
                   "timeout_ms": {"type": "number"}}, "required": ["command"], "additionalProperties": False}}


def test_codex_shaped_turns_are_served(serve_fake):
    """The fields and items Codex CLI sends (codex-rs ResponsesApiRequest): developer and user messages of
    input_text parts, a function tool, store false, stream, client_metadata, nulls for what it leaves unset;
    the next turn carries the call, its output and a reasoning item without text back."""
    live = serve_fake(eos_logit=2.0)
    first_turn = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]}]
    body = {"model": MODEL, "instructions": "You are Codex, a coding agent.", "input": first_turn,
            "tools": [CODEX_SHELL], "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": None,
            "store": False, "stream": True, "include": [], "prompt_cache_key": "0b9f-thread", "text": None,
            "service_tier": None, "client_metadata": {"x-codex-turn": "1"}}
    assert check_events(stream_events(live.url, body)).status in ("completed", "incomplete")
    second_turn = [*first_turn,
                   {"type": "reasoning", "id": "rs_1", "summary": [], "content": None, "encrypted_content": None},
                   {"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "call_1"},
                   {"type": "function_call_output", "call_id": "call_1", "output": "a.txt\nb.txt"}]
    assert check_events(stream_events(live.url, {**body, "input": second_turn})).status in ("completed", "incomplete")
