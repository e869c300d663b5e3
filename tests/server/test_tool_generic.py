"""The generic tool format on a template that does not take ``tools`` (the fake runtime's ChatML):
the tools are described in a system turn, an enforced call is a bare JSON object, and the streamed
deltas rebuild exactly the non-streamed message."""

from __future__ import annotations

import json

import jsonschema
import openai

from tests.server.conftest import MODEL

PARAMETERS = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 6},
                                               "k": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["q", "k"], "additionalProperties": False}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": PARAMETERS}}


def test_enforced_generic_call_streams_as_it_answers_whole(serve_fake) -> None:
    client = openai.OpenAI(base_url=f"{serve_fake().url}/v1", api_key="unused", max_retries=0)
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "find it"}], tools=[SEARCH],
               tool_choice="required", max_tokens=80, seed=7)
    whole = client.chat.completions.create(**ask).choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    [call] = whole.message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)
    chunks = list(client.chat.completions.create(**ask, stream=True))
    deltas = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or ()]
    assert [d.function.name for d in deltas if d.id] == ["search"]
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks)
