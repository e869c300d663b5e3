"""What an API face is to the server: its routes, and the little it adds to what every face shares.

A face is a package under edgeopt/server/ (``openai/``, ``responses/``, ``anthropic/``, ``ollama/``,
``tokenize/``) whose ``__init__`` exposes one ``FACE``; edgeopt/server/faces.py lists them, one line each.
Nothing shared names a face: the error shape of a face's paths, the headers its clients send the API key in
and the state it keeps (the Responses store) come from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter

from edgeopt.server.state import ServerState

# (status, message, error type, param, code) -> the JSON body of an error in a face's own shape
ErrorBody = Callable[[int, str, str, str | None, Any], dict[str, Any]]


@dataclass(frozen=True)
class Face:
    name: str
    # Its routes for each bundle kind it serves (manifest.kind: "causal-lm", "embedding")
    routers: Mapping[str, tuple[APIRouter, ...]] = field(default_factory=dict)
    # Paths (prefixes) whose errors take ``error_body``'s shape instead of the server's default
    error_paths: tuple[str, ...] = ()
    error_body: ErrorBody | None = None
    # Headers besides ``Authorization: Bearer`` its clients send the API key in (lower case)
    key_headers: tuple[bytes, ...] = ()
    # Called once the server's state exists: a face keeps its own state there (ServerState.face_state)
    start: Callable[[ServerState], None] | None = None
