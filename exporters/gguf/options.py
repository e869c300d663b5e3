"""The ``edgeopt optimize`` flags of the GGUF exporter, turned into its ``export_options`` dict."""

from __future__ import annotations

from typing import Any


def gguf_export_options(size_bytes: int | None = None, self_calibration: bool = True) -> dict[str, Any]:
    """Only the flags the user gave (so the export cache keys of other exports do not change)."""
    options: dict[str, Any] = {}
    if size_bytes is not None:
        options["mix_size_bytes"] = size_bytes  # --size: a --quant MIX made to it (exporters/gguf/mix.py)
    if not self_calibration:
        options["self_calibration"] = False  # no matrix from generated text (exporters/gguf/self_calibration.py)
    return options
