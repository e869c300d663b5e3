"""The cheap decisions about a chat request, made before a prompt worker is taken: can this model chat, which
tools and in which syntax, where a thinking model's reply starts, and which grammar constrains the output."""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.engine.grammar import GrammarSpec
from edgeopt.errors import RequestError
from edgeopt.server.chat.output_format import output_grammar_spec
from edgeopt.server.chat.reply import ReasoningStart
from edgeopt.server.chat.request import ChatRequest
from edgeopt.server.chat.tools.grammar import tool_call_grammar
from edgeopt.server.chat.tools.plan import ToolPlan, plan_tools
from edgeopt.server.state import ServedModel


@dataclass(frozen=True)
class ChatDecisions:
    tools: ToolPlan | None  # None: no tools, or tool_choice="none" (the output is not read for calls)
    reasoning: ReasoningStart | None  # None: the model does not think (its output is all answer)
    grammar: GrammarSpec | None  # what constrains the output (a JSON answer, a forced call), None: nothing
    variables: dict[str, object]  # what the template is given besides the messages


def decide(served: ServedModel, body: ChatRequest) -> ChatDecisions:
    if served.chat_template is None:
        raise RequestError("this model's bundle has no chat template, so it cannot format a chat's messages",
                           "send a plain prompt to /v1/completions instead", param=body.names.prompt)
    tools = plan_tools(body, served.chat_template)
    variables = template_variables(body)
    grammar = output_grammar_spec(body.output_format)
    if tools is not None and tools.enforced:
        grammar = tool_call_grammar(tools, served.tokenizer.control_token_ids())
    return ChatDecisions(tools, _reasoning_start(served, body, variables, constrained=grammar is not None),
                         grammar, variables)


def template_variables(body: ChatRequest) -> dict[str, object]:
    """``reasoning_effort`` for templates that read it (gpt-oss); ``"none"`` also turns Qwen3's thinking off
    and any other effort on (its ``enable_thinking``). Templates that read neither ignore both."""
    if body.reasoning_effort is None:
        return {}
    return {"reasoning_effort": body.reasoning_effort, "enable_thinking": body.reasoning_effort != "none"}


def _reasoning_start(served: ServedModel, body: ChatRequest, variables: dict[str, object],
                     constrained: bool) -> ReasoningStart | None:
    """Where this request's reply begins for a thinking model (None: the model does not think). A template
    that always thinks (DeepSeek-R1's: no ``enable_thinking``) cannot honour ``reasoning_effort="none"``."""
    reasoning = served.reasoning
    if reasoning is None:
        return None
    if body.reasoning_effort == "none" and not reasoning.syntax.can_switch_off:
        raise RequestError(f"{body.names.reasoning} asks for no thinking, but this model's chat template always "
                           "thinks (it has no enable_thinking switch)", "leave it unset: the thinking comes back "
                           "apart from the answer", param=body.names.reasoning)
    # A constraint (a JSON answer, a forced call) is what the model writes, from its first token: that is the
    # answer, even where the template's prompt opens a thinking block.
    inside = not constrained and reasoning.reply_starts_in_reasoning(variables)
    return ReasoningStart(reasoning.syntax, inside)
