"""Every failure the server answers becomes a JSON body: the server's default shape, {"error": {message, type,
param, code}} (OpenAI's, which llama-server and vLLM share), or on a face's paths the shape that face
registered (edgeopt/server/face.py: Anthropic's under /v1/messages, Ollama's under /api/); :class:`ErrorShapes`
picks by path.

Handlers live here so routes can simply raise :class:`edgeopt.errors.RequestError` subclasses (or let
FastAPI's validation fail) and the client still gets a 4xx it can read, while the server keeps serving.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from edgeopt.errors import EdgeoptError, RequestError
from edgeopt.server.face import Face
from edgeopt.server.http.json_body import RefusedBody

log = logging.getLogger("edgeopt.server")


def error_body(message: str, error_type: str, param: str | None = None, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class ErrorShapes:
    """The error body for a path: the shape of the face that registered the path's prefix, else the default."""

    def __init__(self, faces: Sequence[Face] = ()) -> None:
        self._by_prefix = [(prefix, face.error_body) for face in faces if face.error_body is not None
                           for prefix in face.error_paths]

    def response(self, path: str, status: int, message: str, error_type: str, param: str | None = None,
                 code: Any = None, headers: dict[str, str] | None = None) -> JSONResponse:
        shape = next((body for prefix, body in self._by_prefix if path.startswith(prefix)), None)
        # A message or param may quote the client's text: a lone surrogate in it could not be sent as UTF-8.
        content = (shape or _default_body)(status, _utf8(message), error_type, None if param is None else _utf8(param),
                                           code)
        return JSONResponse(content, status_code=status, headers=headers)

    def request_error(self, exc: RequestError, path: str = "") -> JSONResponse:
        message = f"{exc.message}; {exc.hint}" if exc.hint else exc.message
        code = exc.error_type if exc.status_code != 400 else None
        return self.response(path, exc.status_code, message, exc.error_type, exc.param, code)


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _default_body(status: int, message: str, error_type: str, param: str | None, code: Any) -> dict[str, Any]:
    return error_body(message, error_type, param, code)


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _is_type_tag(part: Any) -> bool:
    """pydantic appends the union branch it tried ('str', 'list[int]', 'function-after[...]') to a loc."""
    text = str(part)
    return isinstance(part, str) and (text in _TYPE_TAGS or "[" in text or text.startswith("function-"))


def error_param(err: dict[str, Any]) -> str | None:
    return ".".join(str(p) for p in err.get("loc", ()) if p != "body" and not _is_type_tag(p)) or None


def describe_validation_errors(errors: list[dict[str, Any]], body: Any = None) -> tuple[str, str | None]:
    """All pydantic errors -> one message about the first bad field (union branches merged), and param.
    ``body`` is what FastAPI read (the JSON text when it did not parse): it locates a JSON syntax error."""
    if not errors:
        return "invalid request", None
    errors = _matching_union_branch_first(errors)
    message, param = describe_validation_error(errors[0], body)
    same = [e for e in errors if error_param(e) == param]
    if len(same) > 1:  # a union: say every shape that was expected, once
        expected = "; or ".join(dict.fromkeys(str(e.get("msg", "")) for e in same))
        message = f"invalid value for {param!r}: {expected} (got {_shown(errors[0].get('input'))})"
    others = len({error_param(e) for e in errors}) - 1
    if others > 0:
        message += f" (and {others} more invalid parameter(s))"
    return message, param


def _matching_union_branch_first(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A union (``str | list[ContentPart]``) reports one error per branch. The branch whose type matched
    failed for another reason ("lone surrogate") or deeper (messages.0.content.0.text), unlike the other
    branches' mismatches ("should be a valid string"): report that one, drop the mismatches."""
    param = error_param(errors[0])
    if param is None:
        return errors

    def under(e: dict[str, Any]) -> bool:
        return error_param(e) == param or (error_param(e) or "").startswith(param + ".")

    def is_type_error(e: dict[str, Any]) -> bool:
        return str(e.get("type", "")).endswith("_type")

    if any(under(e) and not is_type_error(e) for e in errors):
        return [e for e in errors if not (under(e) and is_type_error(e))]
    shallow = [e for e in errors if error_param(e) == param]
    if len(shallow) < len([e for e in errors if under(e)]):  # a branch matched deeper down
        return [e for e in errors if not any(e is m for m in shallow)]
    return errors


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_NOT_AN_OBJECT = "request body must be a JSON object of request parameters"


def describe_validation_error(err: dict[str, Any], body: Any = None) -> tuple[str, str | None]:
    """One pydantic error -> (message naming the field and the offending value, param)."""
    kind = err.get("type", "")
    if kind == "json_invalid":  # FastAPI puts the character offset in loc: a position, not a parameter
        return f"request body is not valid JSON: {_json_syntax_error(err, body)}", None
    param = error_param(err)
    if param is None:
        return _describe_body_error(kind, err), None
    if kind == "missing":
        return f"missing required parameter {param!r}", param
    if kind == "extra_forbidden":
        return f"parameter {param!r} is not supported by this server", param
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"invalid value for {param!r}: {msg} (got {_shown(err.get('input'))})", param


def _json_syntax_error(err: dict[str, Any], body: Any) -> str:
    detail = str(err.get("ctx", {}).get("error", err.get("msg", "")))
    loc = err.get("loc", ())
    offset = loc[-1] if loc and isinstance(loc[-1], int) else None
    if offset is None or not isinstance(body, str):
        return detail
    line = body.count("\n", 0, offset) + 1
    column = offset - body.rfind("\n", 0, offset)
    return f"{detail} at line {line} column {column} (character {offset})"


def _describe_body_error(kind: str, err: dict[str, Any]) -> str:
    """An error about the body as a whole (no field to name): empty, or not a JSON object."""
    if kind == "missing":
        return ("request body is empty; send a JSON object of request parameters, "
                "e.g. {\"model\": ..., \"prompt\": ...}")
    value = err.get("input")
    if isinstance(value, (bytes, bytearray)):
        return f"{_NOT_AN_OBJECT}; the body was not read as JSON: send Content-Type: application/json"
    if value is None:
        return f"{_NOT_AN_OBJECT}, got null"
    if type(value) in _JSON_TYPE_NAMES:
        return f"{_NOT_AN_OBJECT}, got {_JSON_TYPE_NAMES[type(value)]} ({_shown(value)})"
    return f"request body is invalid: {err.get('msg', '')}"


def install_error_handlers(app: FastAPI, count_error: Any, shapes: ErrorShapes) -> None:
    """``count_error(status)`` feeds the edgeopt_request_errors_total counter."""

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        count_error(exc.status_code)
        return shapes.request_error(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        count_error(400)
        message, param = describe_validation_errors(list(exc.errors()), exc.body)
        return shapes.response(request.url.path, 400, message, "invalid_request_error", param)

    @app.exception_handler(RefusedBody)
    async def _refused_body(request: Request, exc: RefusedBody) -> JSONResponse:
        count_error(exc.status_code)
        code = "request_too_large" if exc.status_code == 413 else None
        return shapes.response(request.url.path, exc.status_code, exc.message, "invalid_request_error", exc.param, code)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        count_error(exc.status_code)
        message = f"{request.method} {request.url.path}: {exc.detail}"
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return shapes.response(request.url.path, exc.status_code, message, kind, headers=exc.headers)

    # A 500 is a fault of the server, never of the request: it carries an id that finds it in the server's log.
    @app.exception_handler(EdgeoptError)
    async def _backend_error(request: Request, exc: EdgeoptError) -> JSONResponse:
        count_error(500)
        request_id = _new_request_id()
        log.error("request %s failed: %s", request_id, exc)
        return shapes.response(request.url.path, 500, f"{exc} (request id {request_id})", "server_error",
                               headers={"X-Request-Id": request_id})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        count_error(500)
        request_id = _new_request_id()
        log.exception("unexpected server error in request %s", request_id)
        return shapes.response(request.url.path, 500, f"internal error: {type(exc).__name__}: {exc} (request id "
                               f"{request_id}; the server's log has the traceback)", "server_error",
                               headers={"X-Request-Id": request_id})


def _new_request_id() -> str:
    return uuid.uuid4().hex[:16]
