"""Ollama's ``options`` -> the chat path's sampling fields, and Ollama's model names -> the served model.

Every option either changes what is generated or is refused by name: an option accepted and ignored
would make a client believe in a setting that does not hold. Load-time options (threads, GPU layers,
batch size, mmap) belong to ``edgeopt serve``'s command line, and their refusal says which flag.
"""

from __future__ import annotations

from typing import Any

from edgeopt.errors import ModelNameError, RequestError
from edgeopt.server.state import ServerState

# Ollama option -> the chat request's field of the same meaning.
SAMPLING_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                    "seed": "seed", "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
                    "frequency_penalty": "frequency_penalty", "stop": "stop"}
HANDLED_OPTIONS = (*SAMPLING_OPTIONS, "num_predict", "num_ctx")
# Options fixed when the server starts, with the flag that sets them.
LOAD_TIME_OPTIONS = {"num_thread": "--threads", "num_gpu": "--target (GPU offload follows the device profile)",
                     "num_batch": "none (the engine batches by itself)", "main_gpu": "--target", "low_vram": "--memory",
                     "use_mmap": "none (weights are always memory-mapped)", "use_mlock": "none",
                     "numa": "none", "vocab_only": "none", "embedding_only": "none", "logits_all": "none"}
OLLAMA_DEFAULT_TEMPERATURE = 0.8  # Ollama's own default, used when a request gives none
OLLAMA_DEFAULT_TOP_K = 40
OLLAMA_DEFAULT_TOP_P = 0.9


def sampling_fields(options: dict[str, Any] | None, context: int) -> dict[str, Any]:
    """The chat request's sampling fields for ``options`` (Ollama's defaults where a request gives none), and
    ``num_ctx`` checked against the served ``context``: it may only narrow it."""
    options = dict(options or {})
    for name in options:
        if name in LOAD_TIME_OPTIONS:
            raise RequestError(f"options.{name} is fixed when the server starts; this server cannot change it "
                               "per request", f"drop options.{name} (edgeopt serve flag: {LOAD_TIME_OPTIONS[name]})",
                               param=f"options.{name}")
        if name not in HANDLED_OPTIONS:
            raise RequestError(f"options.{name} is not supported by this server",
                               f"drop it; supported options: {', '.join(HANDLED_OPTIONS)}", param=f"options.{name}")
    fields: dict[str, Any] = {"temperature": OLLAMA_DEFAULT_TEMPERATURE, "top_k": OLLAMA_DEFAULT_TOP_K,
                              "top_p": OLLAMA_DEFAULT_TOP_P}
    fields.update({SAMPLING_OPTIONS[k]: v for k, v in options.items() if k in SAMPLING_OPTIONS and v is not None})
    predict = options.get("num_predict")
    if predict is not None and not isinstance(predict, int):
        raise RequestError(f"options.num_predict must be an integer, got {predict!r}",
                           "send a token count, or -1 for no limit", param="options.num_predict")
    if predict == 0:
        raise RequestError("options.num_predict=0 asks for no tokens at all",
                           "send num_predict >= 1, or -1 for no limit", param="options.num_predict")
    if predict is not None and predict > 0:  # -1 (no limit) and -2 (fill the context): the context decides
        fields["max_tokens"] = predict
    fields["num_ctx"] = num_ctx(options.get("num_ctx"), context)
    return fields


def num_ctx(asked: Any, context: int) -> int:
    """The context this request may use: ``num_ctx`` up to what the server sized, default all of it."""
    if asked is None:
        return context
    if not isinstance(asked, int) or asked < 1:
        raise RequestError(f"options.num_ctx must be a positive integer, got {asked!r}",
                           f"send at most {context}", param="options.num_ctx")
    if asked > context:
        raise RequestError(f"options.num_ctx={asked} is larger than the {context} tokens this server sized its "
                           "KV cache for", f"send num_ctx <= {context}, or restart edgeopt serve with --context {asked}",
                           param="options.num_ctx")
    return asked


def resolve_model(state: ServerState, name: str) -> str:
    """The served model's id for an Ollama name: the id or an alias, with or without a ``:tag``
    (``smollm2``, ``smollm2:latest``, ``smollm2:135m`` all name the one model this server holds)."""
    names = state.settings.model_names
    if name in names:
        return name
    base = name.rsplit(":", 1)[0] if ":" in name else name
    for candidate in names:
        if base in (candidate, candidate.rsplit(":", 1)[0]) or base.lower() == candidate.lower():
            return candidate
    raise ModelNameError(f"model {name!r} not found: this server serves {state.model_id!r}",
                         f"use model={state.model_id!r} (GET /api/tags lists it); models are not pulled here",
                         param="model")
