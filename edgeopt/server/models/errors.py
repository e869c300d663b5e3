"""Refusals of the model-management routes (llama-server's /models/unload, Ollama's keep_alive 0)."""

from __future__ import annotations

from edgeopt.errors import RequestError


class ModelBusyError(RequestError):
    """A model asked to unload while requests are in flight: it stays until they finish."""

    status_code = 409
    error_type = "model_busy"


class ModelTooLargeError(RequestError):
    """A model that needs more than the server's whole memory budget: it never loads here."""

    error_type = "model_too_large"
