"""A model's output text -> OpenAI content and tool calls, incrementally (for streaming) in one pass.

The parser is fed the text as the engine produces it and returns deltas as OpenAI streams them: content
text, and for each call first its id and name, then its arguments in pieces. Text that might still turn
out to open a call (``<tool_ca`` at the end of a piece) is held back until it is decided. Non-streaming
responses feed the whole text at once to the same parser, so both always agree.

A call that turns out malformed before its name is known is given back as content, exactly as written;
once a name has been streamed, the call stands and its arguments are what the model wrote.
"""

from __future__ import annotations

import json

from edgeopt.server.chat.tools.deltas import CallBeingRead, ContentDelta, Delta, ToolCallDelta
from edgeopt.server.chat.tools.json_scan import (
    WHITESPACE,
    JsonScanError,
    ObjectScanner,
    ScanEvent,
    ValueEnd,
    ValueScanner,
    ValueStart,
    ValueText,
    held_prefix_length,
)
from edgeopt.server.chat.tools.syntax import MAX_MISTRAL_NAME_CHARS, MISTRAL_ARGS_MARKER, ToolFamily, ToolSyntax


class ToolCallParser:
    def __init__(self, syntax: ToolSyntax, max_calls: int | None = None) -> None:
        self._syntax = syntax
        self._max_calls = max_calls  # parallel_tool_calls=false: 1; later calls are dropped
        self._state = "start" if syntax.json_at_start else "content"
        self._pending = ""
        self._calls = 0
        self._call: CallBeingRead | None = None
        self._scanner: ObjectScanner | ValueScanner | None = None
        self._out: list[Delta] = []
        self._handlers = {"start": self._on_start, "content": self._on_content, "open": self._on_open,
                          "list": self._on_list, "body": self._on_body, "close": self._on_close,
                          "mistral_name": self._on_mistral_name, "mistral_arguments": self._on_mistral_arguments}

    @property
    def calls(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Delta]:
        self._pending += text
        while self._pending and self._handlers[self._state]():
            pass
        return self._take()

    def finish(self) -> list[Delta]:
        """The output ended: whatever is held back is decided now."""
        if isinstance(self._scanner, ObjectScanner) and self._call is not None:
            self._on_events(self._scanner.end_of_input())
        if self._call is not None:
            self._end_call(complete=False)
        if self._pending and not (self._calls and not self._pending.strip(WHITESPACE)):
            self._content(self._pending)
        self._pending = ""
        return self._take()

    # -- states: each consumes what it can of self._pending; True when another state should run now --

    def _on_start(self) -> bool:
        """Llama 3 / generic: a message (or what follows a call) that begins with "{" is a call. Mistral
        Nemo: one that begins with a list of objects is its calls (``[TOOL_CALLS]`` is a control token,
        which the detokenizer does not write out)."""
        stripped = self._pending.lstrip(WHITESPACE + ";" if self._calls else WHITESPACE)
        if not stripped or (stripped[0] == "[" and not stripped[1:].lstrip(WHITESPACE)):
            return False  # undecided until the first character (after "[": the next one) arrives
        if self._syntax.family == ToolFamily.MISTRAL and stripped[0] == "[" \
                and stripped[1:].lstrip(WHITESPACE)[0] == "{":
            self._pending = stripped[1:]
            self._state = "list"
        elif self._syntax.family != ToolFamily.MISTRAL and stripped[0] == "{":
            self._pending = stripped
            self._begin_call("", "body")
        else:
            self._state = "content"
        return True

    def _on_content(self) -> bool:
        """Plain text up to a call's opening marker. Whitespace right before a marker (or at the end of
        a reply with calls) is the calls' layout, not content: it is held until the next text decides."""
        marker = self._syntax.open_marker
        at = self._pending.find(marker) if marker else -1
        if at < 0:
            keep = held_prefix_length(self._pending, marker) if marker else 0
            text = self._pending[:len(self._pending) - keep]
            decided = text.rstrip(WHITESPACE)
            self._content(decided)
            self._pending = self._pending[len(decided):]
            return False
        before = self._pending[:at].rstrip(WHITESPACE)
        layout = self._pending[len(before):at]  # given back with the marker if this is no call after all
        self._content(before)
        self._pending = self._pending[at + len(marker):]
        next_state = "mistral_name" if self._syntax.family == ToolFamily.MISTRAL_ARGS else "open"
        self._begin_call(layout + marker, next_state)
        return True

    def _on_open(self) -> bool:
        if not self._skip_whitespace():
            return False
        first = self._pending[0]
        if first == "[" and self._syntax.family == ToolFamily.MISTRAL:
            self._consume(1)
            self._state = "list"
        elif first == "{":
            self._state = "body"
        else:
            self._not_a_call()
        return True

    def _on_list(self) -> bool:
        """Mistral Nemo: between the objects of ``[TOOL_CALLS][{...}, {...}]``."""
        if not self._skip_whitespace():
            return False
        first = self._pending[0]
        if first == "{":
            if self._call is None:
                self._begin_call("", "body")
            self._state = "body"
        elif first in ",]":
            self._pending = self._pending[1:]
            self._state = "list" if first == "," else "content"
        else:
            self._state = "content"
        return True

    def _on_body(self) -> bool:
        assert self._call is not None
        if not isinstance(self._scanner, ObjectScanner):
            self._scanner = ObjectScanner()
        try:
            events, used = self._scanner.feed(self._pending)
        except JsonScanError as exc:
            self._consume(exc.offset)
            self._not_a_call()
            return True
        self._consume(used)
        self._on_events(events)
        if not self._scanner.done:
            return False
        self._end_call(complete=True)
        return True

    def _on_close(self) -> bool:
        """Hermes: after the object, up to and including ``</tool_call>`` (what lies between is dropped)."""
        marker = self._syntax.close_marker or ""
        at = self._pending.find(marker)
        if at < 0:
            keep = held_prefix_length(self._pending, marker)
            self._pending = self._pending[len(self._pending) - keep:]
            return False
        self._pending = self._pending[at + len(marker):]
        self._state = "content"
        return True

    def _on_mistral_name(self) -> bool:
        """Mistral Small 3.2: ``[TOOL_CALLS]name[ARGS]{...}``."""
        assert self._call is not None
        at = self._pending.find(MISTRAL_ARGS_MARKER)
        if at < 0:
            if len(self._pending) > MAX_MISTRAL_NAME_CHARS:
                self._not_a_call()
                return True
            return False
        name = self._pending[:at].strip()
        self._consume(at + len(MISTRAL_ARGS_MARKER))
        if not name or any(ch in WHITESPACE for ch in name):
            self._not_a_call()
            return True
        self._name_known(name)
        self._call.arguments_key = "arguments"
        self._state = "mistral_arguments"
        return True

    def _on_mistral_arguments(self) -> bool:
        if not isinstance(self._scanner, ValueScanner):
            if not self._skip_whitespace():
                return False
            self._scanner = ValueScanner()
        try:
            used = self._scanner.feed(self._pending)
        except JsonScanError:
            self._end_call(complete=False)
            self._state = "content"
            return True
        self._arguments_text(self._pending[:used])
        self._consume(used)
        if self._scanner.done:
            self._end_call(complete=True)
            self._state = "content"
            return True
        return False

    # -- one call --

    def _begin_call(self, marker: str, state: str) -> None:
        self._call = CallBeingRead(index=self._calls, raw=marker)
        self._scanner = None
        self._state = state

    def _on_events(self, events: list[ScanEvent]) -> None:
        call = self._call
        assert call is not None
        for event in events:
            if isinstance(event, ValueStart) and event.key in self._syntax.argument_keys() \
                    and call.arguments_key is None:
                call.arguments_key = event.key
                call.arguments_is_string = event.first == '"'
            elif isinstance(event, ValueText) and event.key == call.arguments_key and not call.arguments_is_string:
                self._arguments_text(event.text)
            elif isinstance(event, ValueEnd) and event.key == call.arguments_key and call.arguments_is_string:
                self._arguments_text(json.loads(event.raw))
            elif isinstance(event, ValueEnd) and event.key == "name" and call.name is None:
                name = json.loads(event.raw)
                if isinstance(name, str) and name:
                    self._name_known(name)

    def _name_known(self, name: str) -> None:
        call = self._call
        assert call is not None
        call.name = name
        self._tool(ToolCallDelta(call.index, id=self._syntax.new_call_id(), name=name))
        for text in call.held_arguments:
            self._tool(ToolCallDelta(call.index, arguments=text))
        call.held_arguments.clear()

    def _arguments_text(self, text: str) -> None:
        call = self._call
        assert call is not None
        if not text:
            return
        if call.name is None:
            call.held_arguments.append(text)
        else:
            self._tool(ToolCallDelta(call.index, arguments=text))

    def _end_call(self, complete: bool) -> None:
        call = self._call
        assert call is not None
        self._call, self._scanner = None, None
        if call.name is None:
            self._content(call.raw)
            self._state = "content"
            return
        if call.arguments_key is None:
            self._tool(ToolCallDelta(call.index, arguments="{}"))
        self._calls += 1
        if complete:
            self._state = self._after_call_state()

    def _after_call_state(self) -> str:
        if self._syntax.close_marker:
            return "close"
        if self._syntax.family == ToolFamily.MISTRAL:
            return "list"
        return "start" if self._syntax.json_at_start else "content"

    def _not_a_call(self) -> None:
        """What was read as a call is none: it is content after all (a call already named stays one)."""
        call = self._call
        assert call is not None
        if call.name is not None:
            self._end_call(complete=False)
        else:
            self._call, self._scanner = None, None
            self._content(call.raw)
        self._state = "content"

    # -- output --

    def _consume(self, count: int) -> None:
        if self._call is not None:
            self._call.raw += self._pending[:count]
        self._pending = self._pending[count:]

    def _skip_whitespace(self) -> bool:
        """Consume leading whitespace; False when nothing else is there yet."""
        stripped = self._pending.lstrip(WHITESPACE)
        self._consume(len(self._pending) - len(stripped))
        return bool(self._pending)

    def _content(self, text: str) -> None:
        if text:
            self._out.append(ContentDelta(text))

    def _tool(self, delta: ToolCallDelta) -> None:
        if self._max_calls is None or delta.index < self._max_calls:
            self._out.append(delta)

    def _take(self) -> list[Delta]:
        out, self._out = self._out, []
        return out
