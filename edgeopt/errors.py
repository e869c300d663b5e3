"""The one exception hierarchy of edgeopt.

Every error says *what* went wrong, names the offending value, and carries a ``hint`` that tells the
user the fix (often the next command to run). The CLI prints ``message`` and ``hint`` on one line each
and exits non-zero; the server maps :class:`RequestError` subclasses to OpenAI-style 4xx bodies.
"""

from __future__ import annotations

# --- the hint vocabulary -------------------------------------------------------------------------
# Hints that recur have one wording each, so the user (and a search of the log) meets the same fix
# everywhere. Any hint that names a flag names a real option of the command that can raise it
# (tests/test_error_hints.py walks every hint in the source and checks).

# An inconsistency only a bug in edgeopt's serving core can cause: nothing the user passed explains it.
ENGINE_BUG_HINT = "this is an engine bug; please report it"
# The KV cache (cells x sequences) is more than the memory allows.
FEWER_KV_CELLS_HINT = "serve fewer sequences (--max-concurrency), a shorter --context or a smaller --memory, or free memory"


class EdgeoptError(Exception):
    """Base class: a failure the user can act on."""

    exit_code: int = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


# --- configuration and inputs ------------------------------------------------------------------


class ConfigError(EdgeoptError):
    """A flag, profile or file has a value edgeopt cannot use."""


class ModelNotFoundError(EdgeoptError):
    """The model path or hub id does not resolve to a checkpoint."""


class UnsupportedArchitectureError(EdgeoptError):
    """The checkpoint's architecture is not one edgeopt can convert or run."""


class UnknownTargetError(ConfigError):
    """``--target`` names no device profile."""


class DoesNotFitError(EdgeoptError):
    """The model cannot fit the target's memory, even at the smallest quantization."""


class OutputExistsError(EdgeoptError):
    """The output directory already exists and ``--force`` was not given."""


class MissingDependencyError(EdgeoptError):
    """An optional dependency (for example the ``optimize`` extra) is not installed."""


class NativeBuildError(EdgeoptError):
    """Compiling a native part on this machine failed (the RPC worker, built from llama.cpp's sources)."""


# --- model path ------------------------------------------------------------------------------


class BundleError(EdgeoptError):
    """A bundle directory is missing, malformed or corrupted."""


class ExportError(EdgeoptError):
    """Converting or quantizing a model failed."""


class PassError(EdgeoptError):
    """An optimization pass (prune, distil, ...) failed or was misconfigured."""


class EvaluationError(EdgeoptError):
    """Quality evaluation could not run (bad data file, mismatched vocabularies, ...)."""


class QualityFloorError(EdgeoptError):
    """The optimized model lost more quality than the floor allows (edgeopt/evaluation/quality_floor.py)."""


# --- request path ----------------------------------------------------------------------------


class BackendError(EdgeoptError):
    """An inference runtime failed to load or to run a step."""


class WorkerError(BackendError):
    """An RPC worker (edgeopt worker) is unreachable, speaks another protocol version, or died."""


class RequestError(EdgeoptError):
    """A request the server refuses; ``status_code`` and ``error_type`` follow the OpenAI API."""

    status_code: int = 400
    error_type: str = "invalid_request_error"

    def __init__(self, message: str, hint: str = "", param: str | None = None) -> None:
        super().__init__(message, hint)
        self.param = param


class ContextOverflowError(RequestError):
    """Prompt plus max_tokens exceed the context the server was sized for."""


class ModelNameError(RequestError):
    status_code = 404
    error_type = "model_not_found"


class UnknownResponseError(RequestError):
    """A stored response id the server does not hold (never stored, or evicted): OpenAI answers 404."""

    status_code = 404


class AuthenticationError(RequestError):
    status_code = 401
    error_type = "authentication_error"


class PermissionDeniedError(RequestError):
    """A known caller asked for what its key does not allow (edgeopt.server.http.callers)."""

    status_code = 403
    error_type = "permission_error"


class OverloadedError(RequestError):
    """The waiting queue is full; the client should retry later."""

    status_code = 429
    error_type = "rate_limit_exceeded"


class ChatTemplateError(RequestError):
    """The chat template rejected the messages (its raise_exception) or failed while rendering them."""


class NotReadyError(RequestError):
    """The model is still loading (or failed to load); /health says which."""

    status_code = 503
    error_type = "service_unavailable"


class NotSupportedHereError(RequestError):
    """A route this server knows but will not do (Ollama's pull/create/delete: one model per server)."""

    status_code = 501
    error_type = "not_implemented"
