"""The served GGUF's weights start loading the moment ``edgeopt serve`` knows its file, beside the imports.

A cold start of a 262k-vocabulary GGUF spent its first second importing the server stack (FastAPI, pydantic,
uvicorn, numpy: Python, one core) and only then began llama.cpp's model load (C, which reads the file and
builds its vocabulary tables without holding the GIL). Started here in a thread, the load runs on the other
core while the imports go on. The runtime takes the model when its load comes (``take``), provided it is the
same file loaded the same way (no RPC split, the same GPU layers); anything else frees it and loads as
before, and so does any failure here: the regular load then reports it with its fix.

Only one plain causal-LM GGUF served alone is loaded early (``edgeopt serve FILE.gguf`` or a GGUF bundle
directory); several models, --workers and --draft keep the regular order.
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


class EarlyLoad:
    """One GGUF loading in a daemon thread; ``take`` hands its llama.cpp model over once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._result: Future[tuple[int, Any]] = Future()
        self._taken = False
        threading.Thread(target=self._run, name="edgeopt-early-load", daemon=True).start()

    def _run(self) -> None:
        try:
            from edgeopt.profiles import load_profile
            from edgeopt.runtimes.llama_cpp.model import default_gpu_layers, load_model

            layers = default_gpu_layers(load_profile("host"))
            self._result.set_result((layers, load_model(self.path, layers)))
        except BaseException as exc:  # noqa: BLE001 -- the regular load meets it again and reports it
            self._result.set_exception(exc)

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


def start_early_load(path: Path) -> EarlyLoad | None:
    model_file = early_model_file(path)
    return EarlyLoad(model_file) if model_file is not None else None
