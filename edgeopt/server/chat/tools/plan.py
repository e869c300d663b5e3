"""What a chat request's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` mean for this model.

:func:`plan_tools` checks the fields against each other (a named function must be among ``tools``) and
picks the model's tool-call syntax from its chat template. The plan then says what the template is given
(edgeopt.server.chat.tools.prompt), how the output is read (edgeopt.server.chat.reply) and, for
``tool_choice="required"`` or a named function, which grammar the output must follow
(edgeopt.server.chat.tools.grammar), so that even a small model answers with a valid call.

``tool_choice="none"`` leaves the tools out of the prompt and the output unparsed: the model answers in
text, as OpenAI's does.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.errors import RequestError
from edgeopt.server.chat.request import ChatRequest, Function, NamedTool, ToolChoice
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.chat.tools.syntax import ToolSyntax, detect_tool_syntax


@dataclass(frozen=True)
class ToolPlan:
    syntax: ToolSyntax
    functions: tuple[Function, ...]  # every tool of the request, for the prompt
    forced: tuple[Function, ...]  # required / named: the output must call one of these
    parallel: bool

    @property
    def enforced(self) -> bool:
        return bool(self.forced)


def plan_tools(body: ChatRequest, template: ChatTemplate) -> ToolPlan | None:
    """None when the request uses no tools (none given, or ``tool_choice="none"``)."""
    choice, names = body.tool_choice, body.names
    if not body.tools:
        if choice not in (None, "none", "auto"):
            raise RequestError(f"{names.tool_choice}={_describe(choice)} but the request has no tools",
                               f"send the functions in {names.tools!r}, or drop {names.tool_choice}",
                               param=names.tool_choice)
        return None
    if choice == "none":
        return None
    _check_functions(body.tools, names.tools)
    forced: tuple[Function, ...] = ()
    if choice == "required":
        forced = body.tools
    elif isinstance(choice, NamedTool):
        forced = tuple(f for f in body.tools if f.name == choice.name)
        if not forced:
            raise RequestError(f"{names.tool_choice} names the function {choice.name!r}, which is not among "
                               f"{names.tools} ({', '.join(f.name for f in body.tools)})",
                               f"name one of the functions in {names.tools}", param=names.tool_choice)
    if forced and body.output_format is not None:
        raise RequestError(f"{names.tool_choice}={_describe(choice)} and {body.output_format.param} (a "
                           f"{body.output_format.kind} answer) both constrain the output",
                           "ask for one: a tool call, or a JSON answer", param=body.output_format.param)
    return ToolPlan(detect_tool_syntax(template.source), body.tools, forced, body.parallel_tool_calls)


def _check_functions(functions: tuple[Function, ...], param: str) -> None:
    """What every face's tools must satisfy for a call to be read back: a name, and only one of each."""
    seen: set[str] = set()
    for i, function in enumerate(functions):
        if not function.name:
            raise RequestError(f"{param}[{i}] has an empty function name", "give every function a name",
                               param=f"{param}.{i}")
        if function.name in seen:
            raise RequestError(f"{param}[{i}] repeats the function name {function.name!r}",
                               "give every function its own name", param=f"{param}.{i}")
        seen.add(function.name)


def _describe(choice: ToolChoice | None) -> str:
    if isinstance(choice, NamedTool):
        return f"{{function: {choice.name!r}}}"
    return repr(choice)
