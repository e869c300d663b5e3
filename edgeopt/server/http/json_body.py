"""Every JSON request body is read once, with limits, before any face's schema sees it.

A body can be small and still expensive or dangerous: 4 MiB of ``[[],[],...]`` is a million Python lists,
JSON nested thousands deep overflows Python's recursion (in the parser, in templates, in error messages),
and a JSON string may spell a lone UTF-16 surrogate (``"\\ud800"``) or a NUL, which no tokenizer, C string
or UTF-8 response can carry. Here the body is refused with a 400/413 naming the limit and where the body
breaks it (``messages.3.content``), the same on every face, before a model is asked for anything.

Faces get this by building their routers with ``route_class=CheckedJsonRoute``; FastAPI then parses the body
through :class:`CheckedRequest.json` (its own parsing, errors included, is otherwise unchanged).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

MAX_JSON_DEPTH = 64  # arrays/objects inside each other: JSON schemas and tool arguments stay far below
MAX_JSON_VALUES = 1_048_576  # values in one body: a million (a 4 MiB body of short messages holds ~300k)
MAX_KEY_CHARS = 256  # an object key names a field or a property: never long
_BAD_CHARS = re.compile("[\ud800-\udfff\x00]")


class RefusedBody(HTTPException):
    """A body refused before parsing by the schema: 400 (or 413 past MAX_JSON_VALUES), naming ``param``."""

    def __init__(self, status_code: int, message: str, param: str | None = None) -> None:
        super().__init__(status_code, message)
        self.message = message
        self.param = param


def checked_json(body: bytes) -> Any:
    """The parsed body, or RefusedBody. Malformed JSON is left to FastAPI's own error (it locates it)."""
    # Every value after the first follows one of these bytes: counted at C speed before Python builds any
    # object. Text holds them too (a CSV has a comma every few bytes), hence the generous factor.
    bound = body.count(b",") + body.count(b"[") + body.count(b"{") + body.count(b":")
    if bound > 2 * MAX_JSON_VALUES:
        raise RefusedBody(413, f"request body holds up to {bound} JSON values and separators, above the limit of "
                               f"{MAX_JSON_VALUES} values; send fewer items (split the request)")
    try:
        value = json.loads(body)
    except RecursionError:
        raise RefusedBody(400, f"request body nests JSON deeper than {MAX_JSON_DEPTH} levels; flatten it") from None
    except UnicodeDecodeError as exc:
        raise RefusedBody(400, f"request body is not UTF-8 (byte {exc.start}: {body[exc.start:exc.start + 1]!r}); "
                               "send UTF-8 JSON") from None
    _walk(value)
    return value


def _walk(root: Any) -> None:
    """Depth, count, keys and text of every value, iteratively (no recursion to overflow)."""
    todo: list[tuple[Any, tuple[str, ...]]] = [(root, ())]
    seen = 0
    while todo:
        value, path = todo.pop()
        seen += 1
        if seen > MAX_JSON_VALUES:
            raise RefusedBody(413, f"request body holds more than {MAX_JSON_VALUES} JSON values; send fewer items")
        if isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, (dict, list)):
            if len(path) >= MAX_JSON_DEPTH:
                raise RefusedBody(400, f"request body nests JSON deeper than {MAX_JSON_DEPTH} levels at "
                                       f"{_where(path)}; flatten it", _param(path))
            if isinstance(value, dict):
                for key, child in value.items():
                    _check_key(key, path)
                    todo.append((child, (*path, key)))
            else:
                todo.extend((child, (*path, str(i))) for i, child in enumerate(value))


def _check_key(key: str, path: tuple[str, ...]) -> None:
    if len(key) > MAX_KEY_CHARS:
        raise RefusedBody(400, f"an object key at {_where(path)} is {len(key)} characters long, above the limit of "
                               f"{MAX_KEY_CHARS}; keys name fields and properties", _param(path))
    _check_text(key, path, "an object key")


def _check_text(text: str, path: tuple[str, ...], what: str = "the text") -> None:
    found = _BAD_CHARS.search(text)
    if found is None:
        return
    char = found.group()
    shown = char.encode("utf-8", "backslashreplace").decode()
    kind = "a NUL character" if char == "\x00" else f"a lone UTF-16 surrogate {shown}"
    why = "which no tokenizer or C string can carry" if char == "\x00" else "which is not valid Unicode"
    raise RefusedBody(400, f"{what} at {_where(path)} holds {kind} at character {found.start()}, {why}; send UTF-8 "
                           "text without NUL (escape pairs such as \\ud83d\\ude00 must be complete)", _param(path))


def _param(path: tuple[str, ...]) -> str | None:
    return ".".join(_printable(part) for part in path) or None


def _where(path: tuple[str, ...]) -> str:
    return _param(path) or "the top level"


def _printable(text: str) -> str:
    """A key as an error may show it: lone surrogates escaped (the error body must be UTF-8), long keys cut."""
    text = text.encode("utf-8", "backslashreplace").decode()
    return text if len(text) <= 64 else text[:61] + "..."


_UNREAD = object()


class CheckedRequest(Request):
    _checked: Any = _UNREAD  # the parsed body, once read

    async def json(self) -> Any:
        if self._checked is _UNREAD:
            self._checked = checked_json(await self.body())
        return self._checked


class CheckedJsonRoute(APIRoute):
    """A route whose JSON body is read by :func:`checked_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            return await handler(CheckedRequest(request.scope, request.receive))

        return checked
