"""Text fields of request bodies: a JSON string must be valid Unicode before it reaches a tokenizer."""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator

T = TypeVar("T")
# JSON can spell a lone UTF-16 surrogate ("\\ud800"); json.loads keeps it, but it is not Unicode text:
# encoding it for the tokenizer (or a response) raises. (A valid pair is joined into one character.)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _first_lone_surrogate(value: Any) -> str | None:
    if isinstance(value, str):
        found = _LONE_SURROGATE.search(value)
        return None if found is None else f"{found.group()!r} at character {found.start()}"
    children = [*value, *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        if isinstance(child, (str, list, dict)):
            where = _first_lone_surrogate(child)
            if where is not None:
                return where
    return None


def valid_unicode(value: T) -> T:
    where = _first_lone_surrogate(value)
    if where is not None:
        raise ValueError(f"the text holds a lone UTF-16 surrogate {where}, which is not valid Unicode; "
                         "send UTF-8 text (escape pairs such as \\ud83d\\ude00 must be complete)")
    return value


Text = Annotated[str, AfterValidator(valid_unicode)]


def quoted(text: str, limit: int = 80) -> str:
    """A client's value as an error message quotes it: repr'd, and cut past ``limit`` characters (a 3 MB model
    name must not come back as a 3 MB error)."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit - 3]}... ({len(text)} characters)"
