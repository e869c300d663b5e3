"""A tool plan in the prompt: what the chat template is given, and how a template that cannot show tools gets
them anyway (described in a message, in the generic call format the reply parser reads)."""

from __future__ import annotations

import json
from typing import Any

from edgeopt.server.chat.request import Function
from edgeopt.server.chat.tools.plan import ToolPlan

# For templates that do not take ``tools``: the generic format, described in a system message.
GENERIC_TOOLS_PROMPT = (
    "You can call these functions (JSON schemas of their parameters are given):\n{tools}\n\n"
    'To call a function, reply with only a JSON object: {{"name": <function name>, "arguments": '
    "<arguments as a JSON object>}}. Otherwise reply normally."
)


def with_tools(plan: ToolPlan, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages and the template variables that show ``plan``'s tools to the model."""
    if plan.syntax.template_takes_tools:
        return messages, {"tools": tool_dicts(plan)}
    return template_messages(plan, messages), {}


def tool_dicts(plan: ToolPlan) -> list[dict[str, Any]]:
    """What templates read as ``tools``: each function's name, description and parameters (always a schema)."""
    return [{"type": "function", "function": _function_dict(f)} for f in plan.functions]


def _function_dict(function: Function) -> dict[str, Any]:
    data: dict[str, Any] = {"name": function.name}
    if function.description is not None:
        data["description"] = function.description
    data["parameters"] = dict(function.parameters) if function.parameters is not None else {
        "type": "object", "properties": {}}
    if function.strict is not None:
        data["strict"] = function.strict
    return data


def template_messages(plan: ToolPlan, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as rendered: a template that cannot show tools gets them described in the system
    message, or, when there is none, in the first user message (some templates refuse a system role),
    and an earlier assistant turn's calls written as the JSON objects that message told it to reply with
    (such a template prints only ``content``: the calls would vanish from the conversation)."""
    if plan.syntax.template_takes_tools:
        return messages
    messages = [_calls_as_text(m) for m in messages]
    listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tool_dicts(plan))
    note = GENERIC_TOOLS_PROMPT.format(tools=listing)
    roles = [m.get("role") for m in messages]
    at = 0 if roles[:1] == ["system"] else roles.index("user") if "user" in roles else None
    if at is None:
        return [{"role": "system", "content": note}, *messages]
    changed = dict(messages[at], content=f"{note}\n\n{messages[at].get('content', '')}")
    return [*messages[:at], changed, *messages[at + 1:]]


def _calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return message
    written = "\n".join(json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                                   ensure_ascii=False) for c in calls)
    content = message.get("content") or ""
    return dict(message, content=f"{content}\n{written}" if content else written)
