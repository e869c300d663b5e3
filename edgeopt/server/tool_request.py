"""What a chat request's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` mean for this model.

:func:`plan_tools` checks the fields against each other (a named function must be among ``tools``) and
picks the model's tool-call syntax from its chat template. The plan then says what the template is given
(:meth:`ToolPlan.template_variables`), how the output is read (:meth:`ToolPlan.parser`) and, for
``tool_choice="required"`` or a named function, which grammar the output must follow
(edgeopt.server.tool_grammar), so that even a small model answers with a valid call.

``tool_choice="none"`` leaves the tools out of the prompt and the output unparsed: the model answers in
text, as OpenAI's does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from edgeopt.errors import RequestError
from edgeopt.server.chat_template import ChatTemplate
from edgeopt.server.schemas import ChatCompletionRequest
from edgeopt.server.tool_parser import ToolCallParser
from edgeopt.server.tool_schemas import FunctionDefinition, NamedToolChoice
from edgeopt.server.tool_syntax import ToolSyntax, detect_tool_syntax

# For templates that do not take ``tools``: the generic format, described in a system message.
GENERIC_TOOLS_PROMPT = (
    "You can call these functions (JSON schemas of their parameters are given):\n{tools}\n\n"
    'To call a function, reply with only a JSON object: {{"name": <function name>, "arguments": '
    "<arguments as a JSON object>}}. Otherwise reply normally."
)


@dataclass(frozen=True)
class ToolPlan:
    syntax: ToolSyntax
    functions: tuple[FunctionDefinition, ...]  # every tool of the request, for the prompt
    forced: tuple[FunctionDefinition, ...]  # required / named: the output must call one of these
    parallel: bool

    @property
    def enforced(self) -> bool:
        return bool(self.forced)

    def parser(self) -> ToolCallParser:
        return ToolCallParser(self.syntax, max_calls=None if self.parallel else 1)

    def tool_dicts(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": _function_dict(f)} for f in self.functions]

    def template_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as rendered: a template that cannot show tools gets them described in the system
        message, or, when there is none, in the first user message (some templates refuse a system role),
        and an earlier assistant turn's calls written as the JSON objects that message told it to reply with
        (such a template prints only ``content``: the calls would vanish from the conversation)."""
        if self.syntax.template_takes_tools:
            return messages
        messages = [_calls_as_text(m) for m in messages]
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in self.tool_dicts())
        note = GENERIC_TOOLS_PROMPT.format(tools=listing)
        roles = [m.get("role") for m in messages]
        at = 0 if roles[:1] == ["system"] else roles.index("user") if "user" in roles else None
        if at is None:
            return [{"role": "system", "content": note}, *messages]
        changed = dict(messages[at], content=f"{note}\n\n{messages[at].get('content', '')}")
        return [*messages[:at], changed, *messages[at + 1:]]

    def template_variables(self) -> dict[str, Any]:
        return {"tools": self.tool_dicts()} if self.syntax.template_takes_tools else {}


def _calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return message
    written = "\n".join(json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                                   ensure_ascii=False) for c in calls)
    content = message.get("content") or ""
    return dict(message, content=f"{content}\n{written}" if content else written)


def _function_dict(function: FunctionDefinition) -> dict[str, Any]:
    data = function.model_dump(exclude_none=True)
    data["parameters"] = function.parameters_schema()  # templates read tool.parameters.properties
    return data


def plan_tools(body: ChatCompletionRequest, template: ChatTemplate) -> ToolPlan | None:
    """None when the request uses no tools (none given, or ``tool_choice="none"``)."""
    tools = body.tools or []
    choice = body.tool_choice
    if not tools:
        if choice not in (None, "none", "auto"):
            raise RequestError(f"tool_choice={_describe(choice)} but the request has no tools",
                               'send the functions in "tools", or drop tool_choice', param="tool_choice")
        return None
    if choice == "none":
        return None
    functions = tuple(tool.function for tool in tools)
    _check_unique_names(functions)
    forced: tuple[FunctionDefinition, ...] = ()
    if choice == "required":
        forced = functions
    elif isinstance(choice, NamedToolChoice):
        forced = tuple(f for f in functions if f.name == choice.function.name)
        if not forced:
            raise RequestError(f"tool_choice names the function {choice.function.name!r}, which is not among "
                               f"tools ({', '.join(f.name for f in functions)})",
                               "name one of the functions in tools", param="tool_choice")
    if forced and body.response_format is not None and body.response_format.type != "text":
        raise RequestError(f"tool_choice={_describe(choice)} and response_format="
                           f"{body.response_format.type!r} both constrain the output",
                           "ask for one: a tool call, or a JSON answer", param="response_format")
    return ToolPlan(detect_tool_syntax(template.source), functions, forced, body.parallel_tool_calls)


def _check_unique_names(functions: tuple[FunctionDefinition, ...]) -> None:
    seen: set[str] = set()
    for i, function in enumerate(functions):
        if function.name in seen:
            raise RequestError(f"tools[{i}] repeats the function name {function.name!r}",
                               "give every function its own name", param=f"tools.{i}.function.name")
        seen.add(function.name)


def _describe(choice: Any) -> str:
    if isinstance(choice, NamedToolChoice):
        return f"{{function: {choice.function.name!r}}}"
    return repr(choice)
