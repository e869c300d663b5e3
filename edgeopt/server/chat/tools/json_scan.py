"""Incremental scanning of JSON text that arrives in pieces (a model's tool call, token by token).

:class:`ValueScanner` finds where one JSON value ends; :class:`ObjectScanner` walks one object and says,
as text arrives, which key's value is being written, its characters, and when it is complete. Neither
builds Python values (the tool-call parser decodes the few it needs with :func:`json.loads`); they only
track strings, escapes and nesting, so the characters of a value can be forwarded as they come.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

WHITESPACE = " \t\n\r"
_PRIMITIVE_END = WHITESPACE + ",}]"


class JsonScanError(ValueError):
    """The text is not (the beginning of) what the scanner expects at this point.

    ``offset``: where in the text given to ``feed`` the offending character is."""

    offset = 0


class ValueScanner:
    """One JSON value, character by character: ``feed`` returns how many characters belong to it (all
    of them while it is open) and sets ``done`` at its end. Leading whitespace is the caller's."""

    def __init__(self) -> None:
        self.done = False
        self._kind = ""  # "string" | "container" | "primitive", from the first character
        self._depth = 0
        self._in_string = False
        self._escaped = False

    def feed(self, text: str) -> int:
        for i, ch in enumerate(text):
            if not self._kind:
                self._start(ch)
            elif self._kind == "primitive":
                if ch in _PRIMITIVE_END:
                    self.done = True
                    return i  # the terminator is not part of the value
            elif self._in_string:
                if self._string_char(ch) and self._kind == "string":
                    self.done = True
                    return i + 1
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self.done = True
                    return i + 1
        return len(text)

    def end_of_input(self) -> None:
        """A number or literal is complete when the text ends right after it."""
        if self._kind == "primitive":
            self.done = True

    def _start(self, ch: str) -> None:
        if ch == '"':
            self._kind, self._in_string = "string", True
        elif ch in "{[":
            self._kind, self._depth = "container", 1
        elif ch in "-0123456789tfn":
            self._kind = "primitive"
        else:
            raise JsonScanError(f"a JSON value cannot start with {ch!r}")

    def _string_char(self, ch: str) -> bool:
        """Consume one character inside a string; True when it closed the string."""
        if self._escaped:
            self._escaped = False
        elif ch == "\\":
            self._escaped = True
        elif ch == '"':
            self._in_string = False
            return True
        return False


@dataclass(frozen=True)
class ValueStart:
    key: str
    first: str  # the value's first character: '"' for a string, '{' for an object, ...


@dataclass(frozen=True)
class ValueText:
    key: str
    text: str


@dataclass(frozen=True)
class ValueEnd:
    key: str
    raw: str  # the value's whole JSON text


ScanEvent = ValueStart | ValueText | ValueEnd


class ObjectScanner:
    """One JSON object, arriving in pieces. ``feed`` returns the events of the new text and how many
    characters it consumed (fewer than given once the object has closed: the rest is not its)."""

    def __init__(self) -> None:
        self.done = False
        self._state = "open"
        self._key_raw = ""
        self._key = ""
        self._value: ValueScanner | None = None
        self._value_raw = ""

    def feed(self, text: str) -> tuple[list[ScanEvent], int]:
        events: list[ScanEvent] = []
        i = 0
        try:
            while i < len(text) and not self.done:
                if self._state == "value":
                    i += self._feed_value(text[i:], events)
                    continue
                self._step(text[i], events)
                i += 1
        except JsonScanError as exc:
            exc.offset = i
            raise
        return events, i

    def end_of_input(self) -> list[ScanEvent]:
        """A primitive value that ends the text (``{"a": 1`` then nothing) is complete."""
        if self._state == "value" and self._value is not None:
            self._value.end_of_input()
            if self._value.done:
                return [self._end_value()]
        return []

    def _step(self, ch: str, events: list[ScanEvent]) -> None:
        state = self._state
        if state == "key":
            self._key_raw += ch
            if ch == '"' and not _ends_in_escape(self._key_raw[:-1]):
                self._key = json.loads(self._key_raw)
                self._state = "colon"
            return
        if ch in WHITESPACE:
            return
        if state == "open" and ch == "{":
            self._state = "key_or_end"
        elif state in ("key_or_end", "key_next") and ch == '"':
            self._key_raw, self._state = '"', "key"
        elif state in ("key_or_end", "after_value") and ch == "}":
            self.done = True
        elif state == "colon" and ch == ":":
            self._state = "value_start"
        elif state == "value_start":
            self._value, self._value_raw, self._state = ValueScanner(), "", "value"
            events.append(ValueStart(self._key, ch))
            self._feed_value(ch, events)
        elif state == "after_value" and ch == ",":
            self._state = "key_next"
        else:
            raise JsonScanError(f"unexpected {ch!r} in a JSON object (expected {_EXPECTED[state]})")

    def _feed_value(self, text: str, events: list[ScanEvent]) -> int:
        assert self._value is not None
        used = self._value.feed(text)
        if used:
            self._value_raw += text[:used]
            events.append(ValueText(self._key, text[:used]))
        if self._value.done:
            events.append(self._end_value())
        return used

    def _end_value(self) -> ValueEnd:
        self._state, self._value = "after_value", None
        return ValueEnd(self._key, self._value_raw)


_EXPECTED = {"open": "'{'", "key_or_end": "a key or '}'", "key_next": "a key", "colon": "':'",
             "after_value": "',' or '}'"}


def _ends_in_escape(text: str) -> bool:
    """True when ``text`` ends inside an escape: an odd number of backslashes before the next character."""
    return (len(text) - len(text.rstrip("\\"))) % 2 == 1


def held_prefix_length(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is the beginning of ``marker`` (may still become it)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
