"""Sizes as users write them on the command line, read as written.

    105453920B           bytes
    4KB, 90MB, 1.5GB     decimal (SI): 1000, 1000**2, 1000**3 bytes, as disk vendors and `ls --si` count
    4KiB, 90MiB, 4GiB    binary: 1024, 1024**2, 1024**3 bytes
    4K, 90M, 4G          binary (the shorthand llama.cpp, Docker and `free -h` use)
    90                   a bare number: the option's documented unit (MiB for every option here)

A bare number keeps its unit, but a value the option cannot mean (a "size" larger than the F16 model, a
memory larger than the device) is refused by :func:`refuse_above`, naming what the digits would be in
bytes: `--size 105453920` is almost certainly 105,453,920 bytes, not 100 TiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgeopt.errors import ConfigError

MIB = 1024**2
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)\s*$", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}
EXAMPLES = "write e.g. 105453920B (bytes), 90MiB or 90MB (MiB are 1024**2 bytes, MB 1000**2), 4GiB, or a number of MiB"


@dataclass(frozen=True)
class Size:
    """A size as the user wrote it and the bytes it means."""

    text: str
    bytes: int
    bare: bool  # no unit: read in the option's documented unit (MiB)


def read_size(text: str, option: str) -> Size:
    """The bytes ``text`` means (0 allowed); ``option`` names the flag in the error."""
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(f"{option} {text!r} is not a size", EXAMPLES)
    number, prefix, binary, byte_suffix = match.groups()
    prefix = prefix.lower()
    if binary and not prefix:  # "12iB": no such unit
        raise ConfigError(f"{option} {text!r} is not a size", EXAMPLES)
    if not prefix and not byte_suffix:
        return Size(text, int(float(number) * MIB), bare=True)
    base = 1000 if (byte_suffix and not binary and prefix) else 1024  # only "KB/MB/GB/TB" are decimal
    return Size(text, int(float(number) * base ** _POWERS.get(prefix, 0)), bare=False)


def parse_size(text: str, option: str) -> int:
    """Bytes of ``text`` (see :func:`read_size`)."""
    return read_size(text, option).bytes


def human(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit that keeps it >= 1 (``100.6 MiB``, ``95.9 TiB``)."""
    value, unit = float(nbytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"


def refuse_above(size: Size, limit_bytes: int, option: str, limit_name: str) -> None:
    """Refuse ``size`` when it exceeds ``limit_bytes`` (what the option can mean: ``limit_name`` says what
    that is). For a bare number the hint names the likely intent: the same digits in bytes."""
    if size.bytes <= limit_bytes:
        return
    read_as = f" (a bare number is MiB: {human(size.bytes)})" if size.bare else f" ({human(size.bytes)})"
    message = f"{option} {size.text}{read_as} is larger than {limit_name} ({human(limit_bytes)})"
    digits = size.text.strip()
    if size.bare and float(digits) <= limit_bytes:
        hint = f"if you meant {float(digits):.0f} bytes ({human(float(digits))}), write {option} {digits}B"
    else:
        hint = f"pass at most {human(limit_bytes)}; {EXAMPLES}"
    raise ConfigError(message, hint)


def read_memory(text: str, option: str, device_bytes: int, device_name: str) -> int:
    """Bytes of a positive memory size (``--memory``). A bare number larger than the device's whole memory
    cannot be meant as MiB and is refused; a size written with its unit is taken as written (planning for
    a larger board than the profile's is a real question)."""
    size = read_size(text, option)
    if size.bytes < 1:
        raise ConfigError(f"{option} {text!r} must be positive", "write e.g. 4GiB")
    if size.bare:
        refuse_above(size, device_bytes, option, f"the memory of {device_name}")
    return size.bytes
