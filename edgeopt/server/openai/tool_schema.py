"""Request types of OpenAI tool calling: ``tools``, ``tool_choice``, and the tool calls an assistant
message carries back into the conversation. Types only; what they mean for a request (a named function
that is not among ``tools``, ...) is checked in :mod:`edgeopt.server.chat.tools.plan`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from edgeopt.server.http.text_fields import Text


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Text = Field(min_length=1, max_length=64)
    description: Text | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; absent means "no arguments"
    strict: bool | None = None  # arguments always follow the schema when a call is enforced; accepted


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
