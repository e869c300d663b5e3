"""The grammar of "a call, in this model's syntax, to one of these functions": ``tool_choice="required"``
or a named function, enforced by the engine's constrained decoding (edgeopt.engine.grammar).

A Lark grammar (llguidance's dialect) per request. The fixed text of a call (``<tool_call>\\n{"name":
"get_weather", "arguments": `` for Hermes) is a literal; the arguments are the function's own JSON schema,
embedded with ``%json`` as the root of its own schema, so its local ``$ref``s resolve as the client wrote
them. The name comes first, then the arguments, which is also the order the streaming parser needs to
send the name before the arguments. A marker that is a control token of the vocabulary (Mistral's
``[TOOL_CALLS]``) is named by its id, since plain text never produces a control token.

Llama 3.x templates refuse more than one call per assistant turn, so their grammar allows one call;
Hermes and Mistral allow several when ``parallel_tool_calls`` is true.
"""

from __future__ import annotations

import json
from typing import Any

from edgeopt.engine.grammar import JSON_LAYOUT, RECURSION_HINT, GrammarSpec, UnsupportedGrammarError, recursion_message
from edgeopt.engine.schema_recursion import unending_ref
from edgeopt.server.chat.request import Function
from edgeopt.server.chat.tools.plan import ToolPlan
from edgeopt.server.chat.tools.syntax import MISTRAL_ARGS_MARKER, ToolFamily

PARALLEL_FAMILIES = (ToolFamily.HERMES, ToolFamily.MISTRAL, ToolFamily.MISTRAL_ARGS)


def tool_call_grammar(plan: ToolPlan, control_ids: dict[str, int]) -> GrammarSpec:
    for function in plan.forced:  # a schema with no finite instance fails only mid-call: refuse it now
        recursing = unending_ref(function.parameters_schema())
        if recursing is not None:
            raise UnsupportedGrammarError(recursion_message(recursing, f"the parameters schema of {function.name!r}"),
                                          RECURSION_HINT, param="tools")
    syntax = plan.syntax
    lines = [_arguments_rule(i, f) for i, f in enumerate(plan.forced)]
    family = syntax.family
    if family == ToolFamily.MISTRAL_ARGS:
        marker = _literal(syntax.open_marker or "", control_ids)
        args_marker = _literal(MISTRAL_ARGS_MARKER, control_ids)
        lines.append("call: " + " | ".join(f"{marker} {_literal(f.name, {})} {args_marker} args_{i}"
                                            for i, f in enumerate(plan.forced)))
    else:
        lines.append("body: " + " | ".join(f"{_literal(_object_head(f, syntax.arguments_key), {})} args_{i} "
                                            '"}"' for i, f in enumerate(plan.forced)))
        lines.append(f"call: {_call_rule(plan, control_ids)}")
    repeat = plan.parallel and family in PARALLEL_FAMILIES
    if family == ToolFamily.MISTRAL:
        marker = _literal(syntax.open_marker or "", control_ids)
        more = '(", " call)*' if repeat else ""
        lines.append(f'start: {marker} "[" call {more} "]"')
    else:
        separator = '"\\n"' if family == ToolFamily.HERMES else '""'
        lines.append(f"start: call ({separator} call)*" if repeat else "start: call")
    return GrammarSpec.lark("\n".join(lines), param="tools")


def _call_rule(plan: ToolPlan, control_ids: dict[str, int]) -> str:
    syntax = plan.syntax
    if syntax.family == ToolFamily.HERMES:
        opening = _literal(syntax.open_marker or "", control_ids)
        closing = _literal(syntax.close_marker or "", control_ids)
        return f'{opening} "\\n" body "\\n" {closing}'
    return "body"


def _object_head(function: Function, arguments_key: str) -> str:
    """``{"name": "get_weather", "arguments": `` in the layout the constraint writes JSON in."""
    return f'{{"name": {json.dumps(function.name, ensure_ascii=False)}, "{arguments_key}": '


def _arguments_rule(index: int, function: Function) -> str:
    schema: dict[str, Any] = dict(function.parameters_schema())
    schema["x-guidance"] = {**JSON_LAYOUT, "lenient": False}
    return f"args_{index}: %json {json.dumps(schema, ensure_ascii=False)}"


def _literal(text: str, control_ids: dict[str, int]) -> str:
    if text in control_ids:
        return f"<[{control_ids[text]}]>"
    return json.dumps(text, ensure_ascii=False)
