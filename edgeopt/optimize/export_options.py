"""The export flags of ``edgeopt optimize`` as one ``export_options`` dict for every format, and the check
that the chosen format and quant read each option given.

The CLI knows no format: every export flag the user gave becomes a key (flags not given add nothing, so
the cache keys of other exports do not change). Each format's entry declares the keys its exporter reads,
the flag that sets each and the quants that read it (``ExportSpec.options``); before any work the pipeline
refuses a key the chosen format or quant would not read, naming where it applies: an accepted flag is never
ignored. Nothing here names a format: flags, readers and examples all come from the registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.formats.entry import ExportOption


def export_options(*, calibration_data: Path | None = None, size_bytes: int | None = None,
                   self_calibration: bool = True, **given: Any) -> dict[str, Any]:
    """Only the flags the user gave (``given``: option keys some format declares; None means not given; a
    list's items may be comma-separated). The calibration file's hash joins the export cache key, so editing
    the text invalidates a cached export even though the path is unchanged."""
    from edgeopt.store.bundle import sha256_file

    unknown = sorted(set(given) - set(declared_options()))
    if unknown:
        raise ConfigError(f"no format reads the export option(s) {', '.join(unknown)}",
                          f"declared: {', '.join(declared_options())}")
    options: dict[str, Any] = {}
    if calibration_data is not None:
        options["calibration_data"] = str(calibration_data)
        if Path(calibration_data).is_file():
            options["calibration_sha256"] = sha256_file(Path(calibration_data))
    if size_bytes is not None:
        options["mix_size_bytes"] = size_bytes
    for key, value in given.items():
        if isinstance(value, list):
            value = [name for item in value for name in item.split(",") if name]
        if value is not None and value != []:
            options[key] = value
    if not self_calibration:
        options["self_calibration"] = False
    return options


def declared_options() -> dict[str, ExportOption]:
    """Every export option some registered format reads (the first declaration of a key names its flag)."""
    declared: dict[str, ExportOption] = {}
    for fmt in backends.formats():
        for key, option in backends.backend(fmt).export.options.items():
            declared.setdefault(key, option)
    return declared


def check_export_options(fmt: str, quant: str, options: dict[str, Any]) -> None:
    """Refuse, before any work, an option ``fmt``'s exporter or ``quant`` would not read, then the values
    the exporter itself cannot use (its ``check_options``)."""
    from edgeopt.exporters import get_exporter

    exporter = get_exporter(fmt)
    _check_calibration_use(exporter.calibration_refusal(quant), fmt, quant, options)
    read = backends.backend(fmt).export.options
    for key, value in options.items():
        given, flag = _as_given(key, value), _flag(key)
        if key not in read:
            readers = _formats_reading(key)
            if not readers:
                raise ConfigError(f"{given} is not an option of --format {fmt}", f"drop {flag}")
            raise ConfigError(f"{given} is an option of --format {' and '.join(readers)}, not {fmt}",
                              f"drop {flag}, or pass --format {readers[0]}")
        quants = read[key].quants
        if quants is not None and quant not in quants:
            raise ConfigError(f"{given} applies to --quant {' or '.join(quants)}, not {quant} (--format {fmt})",
                              f"drop {flag}, or pass --quant {quants[0]}")
    exporter.check_options(quant, options)


def _check_calibration_use(reason: str | None, fmt: str, quant: str, options: dict[str, Any]) -> None:
    """--calibration-data and --no-self-calibration are refused where the chosen quant uses no calibration
    text, with the exporter's reason."""
    if not reason:
        return
    if options.get("self_calibration") is False:
        raise ConfigError(f"--no-self-calibration changes nothing with --format {fmt} --quant {quant}: {reason}",
                          "drop --no-self-calibration")
    if options.get("calibration_data") is not None:
        examples = "; ".join(f"{name} {', '.join(entry.export.calibration_examples)}"
                             for name, entry in ((f, backends.backend(f)) for f in backends.formats())
                             if entry.export.calibration_examples)
        raise ConfigError(f"--calibration-data {options['calibration_data']} cannot be used with --format {fmt} "
                          f"--quant {quant}: {reason}",
                          f"drop --calibration-data, or choose a quant that uses it ({examples})")


def _flag(key: str) -> str:
    """The flag that sets ``key``, or the key itself for options set by code."""
    option = declared_options().get(key)
    return option.flag if option is not None and option.flag else repr(key)


def _as_given(key: str, value: Any) -> str:
    """The option as the user typed it: ``--int4-block-size 64``, ``--no-self-calibration``."""
    option = declared_options().get(key)
    if option is None or not option.flag:
        return f"export option {key!r}"
    if isinstance(value, bool):
        return option.flag
    if key == "mix_size_bytes":
        return f"{option.flag} {value / 2**20:.0f}MiB"
    return f"{option.flag} {','.join(value) if isinstance(value, list) else value}"


def _formats_reading(key: str) -> list[str]:
    """The formats whose entry declares ``key``."""
    return [fmt for fmt in backends.formats() if key in backends.backend(fmt).export.options]
