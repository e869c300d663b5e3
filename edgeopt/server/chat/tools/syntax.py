"""How a model family writes a tool call, detected from its chat template's text (never its name).

The template is the one description of the format a model was trained on: Qwen2.5/Qwen3/Hermes
templates show ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, Llama 3.1/3.2 templates ask
for ``{"name": ..., "parameters": ...}`` (3.1 also knows ``<|python_tag|>``), Mistral's write
``[TOOL_CALLS][{...}]`` (Nemo) or ``[TOOL_CALLS]name[ARGS]{...}`` (Small 3.2, Devstral). A template that
takes ``tools`` in any other way, or none at all, gets the generic format: a bare JSON object
``{"name": ..., "arguments": ...}``, which a template without tools is told about in a system message.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from enum import Enum

MISTRAL_ARGS_MARKER = "[ARGS]"
MAX_MISTRAL_NAME_CHARS = 256  # a function name is at most 64; longer text before [ARGS] is not a call


class ToolFamily(str, Enum):
    HERMES = "hermes"  # Qwen2.5, Qwen3, QwQ, Hermes 2 Pro / 3
    LLAMA3 = "llama3"  # Llama 3.1, 3.2, 3.3
    MISTRAL = "mistral"  # Mistral Nemo: [TOOL_CALLS][{"name": ..., "arguments": ...}, ...]
    MISTRAL_ARGS = "mistral_args"  # Mistral Small 3.2, Devstral, Ministral 3: [TOOL_CALLS]name[ARGS]{...}
    GENERIC = "generic"


@dataclass(frozen=True)
class ToolSyntax:
    family: ToolFamily
    open_marker: str | None  # text that opens a call (or, for Mistral, the list of calls)
    close_marker: str | None  # text that closes one call (Hermes)
    json_at_start: bool  # a message that begins with "{" is a call (Llama 3, generic), "[{" calls (Mistral)
    arguments_key: str  # the key the family writes arguments under
    template_takes_tools: bool  # False: the tools are described in a system message we add

    def argument_keys(self) -> tuple[str, ...]:
        """Keys read as the arguments: the family's own first, then the other common spelling."""
        return (self.arguments_key, *(k for k in ("arguments", "parameters") if k != self.arguments_key))

    def new_call_id(self) -> str:
        """Mistral's templates refuse ids that are not 9 letters and digits; others use OpenAI's style."""
        if self.family in (ToolFamily.MISTRAL, ToolFamily.MISTRAL_ARGS):
            alphabet = string.ascii_letters + string.digits
            return "".join(secrets.choice(alphabet) for _ in range(9))
        return f"call_{secrets.token_hex(12)}"


def detect_tool_syntax(template_source: str) -> ToolSyntax:
    takes_tools = "tools" in template_source
    if "[TOOL_CALLS]" in template_source:
        if "[ARGS]" in template_source:
            return ToolSyntax(ToolFamily.MISTRAL_ARGS, "[TOOL_CALLS]", None, False, "arguments", takes_tools)
        return ToolSyntax(ToolFamily.MISTRAL, "[TOOL_CALLS]", None, True, "arguments", takes_tools)
    # Qwen3-Coder-style templates also say <tool_call> but write XML (<function=...>): not this format.
    if "<tool_call>" in template_source and "<function=" not in template_source:
        return ToolSyntax(ToolFamily.HERMES, "<tool_call>", "</tool_call>", False, "arguments", takes_tools)
    if "<|start_header_id|>" in template_source and '"parameters"' in template_source:
        return ToolSyntax(ToolFamily.LLAMA3, "<|python_tag|>", None, True, "parameters", takes_tools)
    return ToolSyntax(ToolFamily.GENERIC, None, None, True, "arguments", takes_tools)
