"""Ollama's ``options`` -> the neutral Sampling and limits.

Every option either changes what is generated or is refused by name: an option accepted and ignored
would make a client believe in a setting that does not hold. Load-time options (threads, GPU layers,
batch size, mmap) belong to ``edgeopt serve``'s command line, and their refusal says which flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt.errors import RequestError
from edgeopt.server.chat.request import Sampling

# Ollama's sampling options -> the neutral Sampling's field, and the JSON type each must have.
_NUMBER, _INTEGER = "a number", "an integer"
SAMPLING_OPTIONS = {"temperature": ("temperature", _NUMBER), "top_p": ("top_p", _NUMBER), "top_k": ("top_k", _INTEGER),
                    "min_p": ("min_p", _NUMBER), "seed": ("seed", _INTEGER),
                    "repeat_penalty": ("repetition_penalty", _NUMBER),
                    "presence_penalty": ("presence_penalty", _NUMBER),
                    "frequency_penalty": ("frequency_penalty", _NUMBER)}
HANDLED_OPTIONS = (*SAMPLING_OPTIONS, "stop", "num_predict", "num_ctx")
# Options fixed when the server starts, with the flag that sets them.
LOAD_TIME_OPTIONS = {"num_thread": "--threads", "num_gpu": "--target (GPU offload follows the device profile)",
                     "num_batch": "none (the engine batches by itself)", "main_gpu": "--target", "low_vram": "--memory",
                     "use_mmap": "none (weights are always memory-mapped)", "use_mlock": "none",
                     "numa": "none", "vocab_only": "none", "embedding_only": "none", "logits_all": "none"}
OLLAMA_DEFAULT_TEMPERATURE = 0.8  # Ollama's own default, used when a request gives none
OLLAMA_DEFAULT_TOP_K = 40
OLLAMA_DEFAULT_TOP_P = 0.9


@dataclass(frozen=True)
class GenerationOptions:
    sampling: Sampling
    max_tokens: int | None  # None: the context decides (num_predict -1 or -2, or absent)
    num_ctx: int  # the context this request may use (at most the served one)


def generation_options(options: dict[str, Any] | None, context: int) -> GenerationOptions:
    """``options`` checked one by one (Ollama's defaults where a request gives none), and ``num_ctx`` against the
    served ``context``: it may only narrow it."""
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
    for name, (field, kind) in SAMPLING_OPTIONS.items():
        if options.get(name) is not None:
            fields[field] = _typed(name, options[name], kind)
    return GenerationOptions(Sampling(**fields, stop=_stops(options.get("stop"))),
                             _num_predict(options.get("num_predict")), num_ctx(options.get("num_ctx"), context))


def _typed(name: str, value: Any, kind: str) -> Any:
    """JSON's numbers as Python reads them; true/false are no numbers (bool is an int subclass in Python)."""
    valid = isinstance(value, int) if kind == _INTEGER else isinstance(value, (int, float))
    if not valid or isinstance(value, bool):
        raise RequestError(f"options.{name} must be {kind}, got {value!r}", f"send options.{name} as {kind}",
                           param=f"options.{name}")
    return value


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
        raise RequestError(f"options.stop must be a string or a list of strings, got {value!r}",
                           'send e.g. "stop": ["\\n\\n"]', param="options.stop")
    return tuple(stops)


def _num_predict(predict: Any) -> int | None:
    if predict is None:
        return None
    if not isinstance(predict, int) or isinstance(predict, bool):
        raise RequestError(f"options.num_predict must be an integer, got {predict!r}",
                           "send a token count, or -1 for no limit", param="options.num_predict")
    if predict == 0:
        raise RequestError("options.num_predict=0 asks for no tokens at all",
                           "send num_predict >= 1, or -1 for no limit", param="options.num_predict")
    return predict if predict > 0 else None  # -1 (no limit) and -2 (fill the context): the context decides


def num_ctx(asked: Any, context: int) -> int:
    """The context this request may use: ``num_ctx`` up to what the server sized, default all of it."""
    if asked is None:
        return context
    if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:
        raise RequestError(f"options.num_ctx must be a positive integer, got {asked!r}",
                           f"send at most {context}", param="options.num_ctx")
    if asked > context:
        raise RequestError(f"options.num_ctx={asked} is larger than the {context} tokens this server sized its "
                           "KV cache for", f"send num_ctx <= {context}, or restart edgeopt serve with --context {asked}",
                           param="options.num_ctx")
    return asked
