"""The ``edgeopt optimize`` flags of the ONNX exporter, turned into its ``export_options`` dict."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def onnx_export_options(calibration_data: Path | None = None, calibration_method: str | None = None,
                        int4_block_size: int | None = None, keep_fp: list[str] | None = None,
                        int8_method: str | None = None, int4_mix: str | None = None,
                        int4_algorithm: str | None = None) -> dict[str, Any]:
    """Only the flags the user gave; the calibration file's hash joins the export cache key, so
    editing the text invalidates a cached static-INT8 export even though the path is unchanged."""
    from edgeopt.bundle import sha256_file

    options: dict[str, Any] = {}
    if calibration_data is not None:
        options["calibration_data"] = str(calibration_data)
        if Path(calibration_data).is_file():
            options["calibration_sha256"] = sha256_file(Path(calibration_data))
    if calibration_method is not None:
        options["calibration_method"] = calibration_method
    if int4_block_size is not None:
        options["int4_block_size"] = int4_block_size
    if int8_method is not None:
        options["int8_method"] = int8_method
    if int4_algorithm is not None:
        options["int4_algorithm"] = int4_algorithm
    if int4_mix is not None:
        options["int4_mix"] = int4_mix
    if keep_fp:
        options["keep_fp"] = [name for item in keep_fp for name in item.split(",") if name]
    return options
