"""The served GGUF's weights start loading the moment ``edgeopt serve`` knows its file, beside the imports.

A cold start of a 262k-vocabulary GGUF spent its first second importing the server stack (FastAPI, pydantic,
uvicorn, numpy: Python, one core) and only then began llama.cpp's model load (C, which reads the file and
builds its vocabulary tables without holding the GIL). Started here in a thread, the load runs on the other
core while the imports go on. The runtime takes the model when its load comes (``take``), provided it is the
same file loaded the same way (no RPC split, the same GPU layers); anything else frees it and loads as
before, and so does any failure here: the regular load then reports it with its fix.

Only one plain causal-LM GGUF served alone is loaded early (``edgeopt serve FILE.gguf`` or a GGUF bundle
directory); several models, --workers and --draft keep the regular order.

The load can begin before the CLI itself is imported (typer and every command's module: ~0.4 s before ``serve``
runs): :func:`start_from_command_line` reads ``edgeopt serve PATH ...`` from the raw arguments, and ``serve``, once
its options are parsed, takes that load over (:func:`early_load_for`) or frees it.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def early_model_file(path: Path) -> Path | None:
    """The GGUF that serving ``path`` loads, when it is a plain causal LM's; None: nothing to load early."""
    if path.is_file() and path.suffix == ".gguf":
        return path.resolve()
    manifest = path / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None  # the regular load reports it
    if not isinstance(data, dict) or data.get("runtime") != "llama_cpp" or data.get("kind", "causal-lm") != "causal-lm":
        return None
    model_file = data.get("model_file")
    return (path / model_file).resolve() if isinstance(model_file, str) else None


# Options of `serve` after which the model is not loaded alone on this host (edgeopt.cli.commands.serve_cmd)
NOT_ALONE_OPTIONS = ("--model", "--workers", "--draft")


class EarlyLoad:
    """One GGUF loading in a daemon thread; ``take`` hands its llama.cpp model over once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._result: Future[tuple[int, Any]] = Future()
        self._taken = False
        try:
            # In the caller's thread: the imports are Python (the GIL), so interleaved with the caller's own they
            # would only delay the load; the load itself is C and runs beside whatever the caller imports next.
            from edgeopt.profiles import load_profile
            from edgeopt.runtimes.llama_cpp.model import default_gpu_layers

            layers = default_gpu_layers(load_profile("host"))
        except BaseException as exc:  # noqa: BLE001 -- the regular load meets it again and reports it
            self._result.set_exception(exc)
            return
        threading.Thread(target=self._run, args=(layers,), name="edgeopt-early-load", daemon=True).start()

    def _run(self, layers: int) -> None:
        try:
            from edgeopt.runtimes.llama_cpp.model import load_model

            self._result.set_result((layers, load_model(self.path, layers, beside_python=True)))
        except BaseException as exc:  # noqa: BLE001 -- the regular load meets it again and reports it
            self._result.set_exception(exc)

    def discard(self) -> None:
        """Not wanted after all: its model is freed once loaded, without waiting for it here."""
        self._taken = True
        self._result.add_done_callback(_free_loaded)

    def take(self, path: Path, n_gpu_layers: int) -> Any | None:
        """The model loaded early when it is ``path`` with ``n_gpu_layers`` (waits for the load to end), once;
        None otherwise (a model loaded for something else is freed)."""
        if self._taken:
            return None
        self._taken = True
        try:
            layers, model = self._result.result()
        except BaseException as exc:  # noqa: BLE001
            log.debug("early load of %s failed (%s); loading it again", self.path, exc)
            return None
        if Path(path).resolve() == self.path and layers == n_gpu_layers:
            return model
        import llama_cpp

        llama_cpp.llama_model_free(model)
        return None


def _free_loaded(result: Future[tuple[int, Any]]) -> None:
    if result.exception() is None:
        import llama_cpp

        llama_cpp.llama_model_free(result.result()[1])


def start_early_load(path: Path) -> EarlyLoad | None:
    model_file = early_model_file(path)
    return EarlyLoad(model_file) if model_file is not None else None


_from_command_line: list[EarlyLoad] = []  # the load start_from_command_line began, until serve claims it


def served_alone(argv: list[str]) -> Path | None:
    """PATH of ``[--debug] serve PATH ...`` when nothing among the arguments serves it otherwise than alone on this
    host (NOT_ALONE_OPTIONS) or asks for help; None otherwise (a path after other options is left to ``serve``'s
    own parsing, which knows which options take values)."""
    args = argv[1:] if argv[:1] == ["--debug"] else argv
    if len(args) < 2 or args[0] != "serve" or args[1].startswith("-"):
        return None
    for arg in args[2:]:
        if arg in ("--help", "-h") or arg.split("=", 1)[0] in NOT_ALONE_OPTIONS:
            return None
    return Path(args[1])


def start_from_command_line(argv: list[str]) -> None:
    """Begin loading the model of ``edgeopt serve PATH ...`` (``argv`` without the program) before the CLI's imports."""
    path = served_alone(argv)
    load = start_early_load(path) if path is not None else None
    if load is not None:
        _from_command_line.append(load)


def early_load_for(path: Path | None) -> EarlyLoad | None:
    """The load that serving ``path`` takes over (None: not served alone, so nothing is loaded early): the one
    begun from the command line when it is that file's, else one begun now. A load begun for anything else is
    freed."""
    begun = _from_command_line.pop() if _from_command_line else None
    model_file = early_model_file(path) if path is not None else None
    if begun is not None and begun.path == model_file:
        return begun
    if begun is not None:
        begun.discard()
    return EarlyLoad(model_file) if model_file is not None else None
