"""The export flags of ``edgeopt optimize`` as one ``export_options`` dict for every format, and the check
that the chosen format and quant read each option given.

The CLI knows no format: every export flag the user gave becomes a key (flags not given add nothing, so
the cache keys of other exports do not change). Each exporter declares the keys it reads and the quants
that read them (:attr:`edgeopt.exporters.Exporter.options`); before any work the pipeline refuses a key
the chosen exporter or quant would not read, naming where it applies: an accepted flag is never ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.errors import ConfigError

# export option key -> the optimize flag that sets it (keys without one are set by code: tests, benches)
FLAGS: dict[str, str] = {
    "calibration_data": "--calibration-data",
    "calibration_method": "--calibration-method",
    "int4_block_size": "--int4-block-size",
    "int8_method": "--int8-method",
    "int4_mix": "--int4-mix",
    "int4_algorithm": "--int4-algorithm",
    "keep_fp": "--keep-fp",
    "mix_size_bytes": "--size",
    "self_calibration": "--no-self-calibration",
}


def export_options(*, calibration_data: Path | None = None, calibration_method: str | None = None,
                   int4_block_size: int | None = None, int8_method: str | None = None, int4_mix: str | None = None,
                   int4_algorithm: str | None = None, keep_fp: list[str] | None = None, size_bytes: int | None = None,
                   self_calibration: bool = True) -> dict[str, Any]:
    """Only the flags the user gave. The calibration file's hash joins the export cache key, so editing the
    text invalidates a cached export even though the path is unchanged."""
    from edgeopt.store.bundle import sha256_file

    options: dict[str, Any] = {}
    if calibration_data is not None:
        options["calibration_data"] = str(calibration_data)
        if Path(calibration_data).is_file():
            options["calibration_sha256"] = sha256_file(Path(calibration_data))
    given = {"calibration_method": calibration_method, "int4_block_size": int4_block_size,
             "int8_method": int8_method, "int4_mix": int4_mix, "int4_algorithm": int4_algorithm,
             "mix_size_bytes": size_bytes}
    options |= {key: value for key, value in given.items() if value is not None}
    if keep_fp:
        options["keep_fp"] = [name for item in keep_fp for name in item.split(",") if name]
    if not self_calibration:
        options["self_calibration"] = False
    return options


def check_export_options(fmt: str, quant: str, options: dict[str, Any]) -> None:
    """Refuse, before any work, an option ``fmt``'s exporter or ``quant`` would not read, then the values
    the exporter itself cannot use (its ``check_options``)."""
    from edgeopt.exporters import get_exporter

    exporter = get_exporter(fmt)
    _check_calibration_use(exporter, fmt, quant, options)
    for key, value in options.items():
        given = _as_given(key, value)
        if key not in exporter.options:
            readers = _formats_reading(key)
            if not readers:
                raise ConfigError(f"{given} is not an option of --format {fmt}", f"drop {FLAGS.get(key, repr(key))}")
            raise ConfigError(f"{given} is an option of --format {' and '.join(readers)}, not {fmt}",
                              f"drop {FLAGS.get(key, repr(key))}, or pass --format {readers[0]}")
        quants = exporter.options[key]
        if quants is not None and quant not in quants:
            raise ConfigError(f"{given} applies to --quant {' or '.join(quants)}, not {quant} (--format {fmt})",
                              f"drop {FLAGS.get(key, repr(key))}, or pass --quant {quants[0]}")
    exporter.check_options(quant, options)


def _check_calibration_use(exporter: Any, fmt: str, quant: str, options: dict[str, Any]) -> None:
    """--calibration-data and --no-self-calibration are refused where the chosen quant uses no calibration
    text, with the exporter's reason."""
    reason = exporter.calibration_refusal(quant)
    if not reason:
        return
    if options.get("self_calibration") is False:
        raise ConfigError(f"--no-self-calibration changes nothing with --format {fmt} --quant {quant}: {reason}",
                          "drop --no-self-calibration")
    if options.get("calibration_data") is not None:
        raise ConfigError(f"--calibration-data {options['calibration_data']} cannot be used with --format {fmt} "
                          f"--quant {quant}: {reason}",
                          "drop --calibration-data, or choose a quant that uses it (gguf Q4_K_M, IQ4_XS, ...; "
                          "onnx int4, int8-static)")


def _as_given(key: str, value: Any) -> str:
    """The option as the user typed it: ``--int4-block-size 64``, ``--no-self-calibration``."""
    flag = FLAGS.get(key)
    if flag is None:
        return f"export option {key!r}"
    if isinstance(value, bool):
        return flag
    if key == "mix_size_bytes":
        return f"{flag} {value / 2**20:.0f}MiB"
    return f"{flag} {','.join(value) if isinstance(value, list) else value}"


def _formats_reading(key: str) -> list[str]:
    """The formats whose exporter reads ``key`` (those whose exporter is importable in this install)."""
    from edgeopt.exporters import get_exporter

    readers = []
    for fmt in backends.formats():
        try:
            if key in get_exporter(fmt).options:
                readers.append(fmt)
        except ConfigError:
            continue
    return readers
