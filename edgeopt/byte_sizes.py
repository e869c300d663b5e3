"""Sizes as users write them on the command line: '4GiB', '4G', '512MiB', '1.5g', or a bare number of MiB."""

from __future__ import annotations

import re

from edgeopt.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1024**2, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}  # a bare number means MiB


def parse_size(text: str, option: str) -> int:
    """Bytes of ``text`` (0 allowed); ``option`` names the flag in the error."""
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(f"{option} {text!r} is not a size", "write e.g. 4GiB, 512MiB, or a number of MiB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
