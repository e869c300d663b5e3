"""Request types of OpenAI tool calling: ``tools``, ``tool_choice``, and the tool calls an assistant
message carries back into the conversation. Types only; what they mean for a request (a named function
that is not among ``tools``, ...) is checked in :mod:`edgeopt.server.tool_request`."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from edgeopt.server.text_fields import Text


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Text = Field(min_length=1, max_length=64)
    description: Text | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; absent means "no arguments"
    strict: bool | None = None  # arguments always follow the schema when a call is enforced; accepted

    def parameters_schema(self) -> dict[str, Any]:
        return self.parameters if self.parameters is not None else {"type": "object", "properties": {}}


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Text


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Text
    arguments: Text | dict[str, Any] = "{}"  # a JSON text, as OpenAI returns it (an object, as Ollama's)


class MessageToolCall(BaseModel):
    """A tool call of an earlier assistant turn, sent back by the client."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: Text | None = None  # OpenAI always sends one; a template that needs it (Mistral's) says so
    type: Literal["function"] = "function"
    function: CalledFunction

    def as_template_dict(self) -> dict[str, Any]:
        """Templates write ``tool_call.arguments | tojson`` (Qwen, Llama 3.1) or iterate its items: they
        expect an object, as transformers passes it. OpenAI sends a JSON text: decoded when it is one."""
        arguments: Any = self.function.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass  # not JSON: the template gets the text as it came
        call: dict[str, Any] = {"type": "function", "function": {"name": self.function.name, "arguments": arguments}}
        if self.id is not None:
            call["id"] = self.id
        return call
