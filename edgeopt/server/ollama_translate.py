"""Ollama requests -> the chat path's :class:`ChatCompletionRequest` (edgeopt.server.chat_prep prepares it,
as it does every face's) or, for ``/api/generate`` with ``raw``, a :class:`CompletionRequest`.

What differs from OpenAI's shapes: tool-call arguments are objects (not JSON text) and calls carry no
id, so ids are made up here and a tool message's ``tool_name`` is matched to the earliest unanswered call
of that name; ``format`` is ``"json"`` or a JSON schema; ``think`` switches thinking on or off; a
generate prompt is the user turn of a one-turn chat (with ``system`` before it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from edgeopt.errors import RequestError
from edgeopt.server.ollama_options import sampling_fields
from edgeopt.server.ollama_schema import Format, OllamaChatRequest, OllamaGenerateRequest, OllamaMessage, Think
from edgeopt.server.schemas import ChatCompletionRequest, CompletionRequest
from edgeopt.server.state import ServedModel


@dataclass(frozen=True)
class Translation:
    request: ChatCompletionRequest | CompletionRequest
    num_ctx: int  # the context this request may use (options.num_ctx, at most the served context)


def chat_request(body: OllamaChatRequest, model: str, served: ServedModel) -> Translation:
    _refuse_images(body.messages)
    if not body.messages:  # Ollama's "load the model" call; the route answers it without generating
        raise AssertionError("the route answers an empty chat before translating it")
    fields = sampling_fields(body.options, served.context_length)
    context = fields.pop("num_ctx")
    request = ChatCompletionRequest.model_validate({
        "model": model, "messages": _openai_messages(body.messages), **fields,
        **_think_fields(body.think, served), **_format_field(body.format),
        **({"tools": [t.model_dump() for t in body.tools]} if body.tools else {}),
        **({"logprobs": True, "top_logprobs": body.top_logprobs or 0} if body.logprobs else {}),
    })
    return Translation(request, context)


def generate_request(body: OllamaGenerateRequest, model: str, served: ServedModel) -> Translation:
    """A templated generate is a one-turn chat; ``raw`` sends the prompt as it is, like /v1/completions."""
    if body.images:
        raise RequestError("images are not supported by this model (images has "
                           f"{len(body.images)} item(s))", "send text only", param="images")
    if body.template is not None:
        raise RequestError("a per-request template (Go template syntax) cannot be used: this server renders the "
                           "model's own Jinja chat template", "drop template, or send raw=true with the prompt "
                           "already formatted", param="template")
    if body.suffix:
        raise RequestError("suffix (fill-in-the-middle) is not supported by this server",
                           "drop suffix, or send raw=true with the model's own FIM markup", param="suffix")
    fields = sampling_fields(body.options, served.context_length)
    context = fields.pop("num_ctx")
    if body.raw:
        if body.system or body.think is not None:
            raise RequestError("raw=true sends the prompt exactly as given, so system and think cannot apply",
                               "drop system/think, or drop raw", param="system" if body.system else "think")
        if body.context:
            raise RequestError("raw=true cannot take context ids", "send the previous text in the prompt", param="context")
        if body.logprobs:
            raise RequestError("logprobs with raw=true is not supported here", "drop raw (the prompt is then the user "
                               "turn of the model's template), or use /v1/completions with echo and logprobs",
                               param="logprobs")
        return Translation(CompletionRequest.model_validate({"model": model, "prompt": body.prompt or "", **fields,
                                                             **_format_field(body.format)}), context)
    messages = ([{"role": "system", "content": body.system}] if body.system else []) + [
        {"role": "user", "content": body.prompt or ""}]
    request = ChatCompletionRequest.model_validate({
        "model": model, "messages": messages, **fields, **_think_fields(body.think, served),
        **_format_field(body.format),
        **({"logprobs": True, "top_logprobs": body.top_logprobs or 0} if body.logprobs else {}),
    })
    return Translation(request, context)


def _refuse_images(messages: list[OllamaMessage]) -> None:
    for i, message in enumerate(messages):
        if message.images:
            raise RequestError(f"images are not supported by this model (messages[{i}] has {len(message.images)})",
                               "send text only", param=f"messages.{i}.images")


def _openai_messages(messages: list[OllamaMessage]) -> list[dict[str, Any]]:
    """Ollama turns -> OpenAI turns: calls get ids (call_0, call_1, ...), and each tool result answers the
    earliest still unanswered call of its ``tool_name`` (or, without one, the earliest unanswered call)."""
    out: list[dict[str, Any]] = []
    unanswered: list[tuple[str, str]] = []  # (id, function name)
    made = 0
    for message in messages:
        turn: dict[str, Any] = {"role": message.role, "content": message.content or ""}
        if message.tool_calls:
            turn["tool_calls"] = []
            for call in message.tool_calls:
                call_id = f"call_{made}"
                made += 1
                unanswered.append((call_id, call.function.name))
                turn["tool_calls"].append({"id": call_id, "type": "function", "function": {
                    "name": call.function.name, "arguments": json.dumps(call.function.arguments)}})
        if message.role == "tool":
            match = next((c for c in unanswered if message.tool_name in (None, c[1])), None)
            if match is not None:
                unanswered.remove(match)
                turn["tool_call_id"] = match[0]
            if message.tool_name:
                turn["name"] = message.tool_name  # templates that print the tool's name read it here
        out.append(turn)
    return out


def _think_fields(think: Think, served: ServedModel) -> dict[str, Any]:
    """``think``: None leaves the model's default; false turns thinking off; true (or a level) asks for it,
    which only a model that thinks can give. True is effort "medium": it switches thinking on in templates
    that read ``enable_thinking`` (edgeopt.server.request_prep.template_variables) and is gpt-oss's default."""
    if think is None:
        return {}
    if think is False:
        return {"reasoning_effort": "none"} if served.reasoning is not None else {}
    if served.reasoning is None:
        raise RequestError(f"think={think!r} asks for thinking, but this model does not think (its chat template "
                           "has no thinking block)", "drop think, or send think=false", param="think")
    return {"reasoning_effort": think if isinstance(think, str) else "medium"}


def _format_field(value: Format) -> dict[str, Any]:
    if value in (None, ""):
        return {}
    if value == "json":
        return {"response_format": {"type": "json_object"}}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "format", "schema": value}}}
