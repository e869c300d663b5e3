"""Device profiles: TOML data describing a target's memory, compute and preferred formats.

``load_profile("jetson")`` resolves a family alias to its default profile; ``load_profile("host")``
describes this machine (see :mod:`edgeopt.profiles.host`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from edgeopt import backends
from edgeopt.errors import ConfigError, UnknownTargetError
from edgeopt.sizing.kv_types import selectable_kv_types
from edgeopt.profiles.device import GIB, DeviceProfile  # noqa: F401  (re-exported: the package's public names)
from edgeopt.profiles.instruction_sets import CPU_ISAS  # noqa: F401  (re-exported)
from edgeopt.profiles.platform import Platform  # noqa: F401  (re-exported)
from edgeopt.profiles.platform_fields import OPTIONAL_KEYS, REQUIRED_KEYS, platform_from_fields

PROFILE_DIR = Path(__file__).resolve().parent

# `--target jetson` picks the device most people deploy to first: the cheapest board of the family.
FAMILY_DEFAULTS = {
    "jetson": "jetson-orin-nano-8gb",
    "raspberry-pi": "raspberry-pi-5-8gb",
    "rpi": "raspberry-pi-5-8gb",
    "x86-64": "x86-64-cpu",
    "cpu": "x86-64-cpu",
}
# The fields the profile record keeps itself; the hardware's are edgeopt.profiles.platform_fields'.
OWN_REQUIRED = ("name", "description", "family", "os_reserved_gb", "memory_bandwidth_gbps", "preferred_format",
                "default_quant", "default_runtime")
OWN_OPTIONAL = ("tight_memory_kv_type",)


def profile_from_dict(data: dict[str, Any], source: str) -> DeviceProfile:
    """Validate raw TOML data; every problem names the file and the field."""
    known = set(OWN_REQUIRED + OWN_OPTIONAL + REQUIRED_KEYS + OPTIONAL_KEYS)
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"profile {source}: unknown field(s) {sorted(unknown)}", f"valid fields: {sorted(known)}")
    missing = set(OWN_REQUIRED + REQUIRED_KEYS) - set(data)
    if missing:
        raise ConfigError(f"profile {source}: missing field(s) {sorted(missing)}", "add them to the TOML file")
    own = {key: data[key] for key in OWN_REQUIRED + OWN_OPTIONAL if key in data}
    profile = DeviceProfile(**own, platform=platform_from_fields(data, source))
    _check(profile.total_memory_gb > profile.os_reserved_gb >= 0, source, "os_reserved_gb",
           profile.os_reserved_gb, "must be >= 0 and below total_memory_gb")
    _check(profile.preferred_format in backends.formats(), source, "preferred_format", profile.preferred_format,
           f"one of {backends.formats()}")
    _check(profile.default_runtime in backends.runtimes(), source, "default_runtime", profile.default_runtime,
           f"one of {backends.runtimes()}")
    _check(profile.tight_memory_kv_type in selectable_kv_types(), source, "tight_memory_kv_type",
           profile.tight_memory_kv_type, f"one of {selectable_kv_types()}")
    return profile


def _check(ok: bool, source: str, field: str, value: Any, rule: str) -> None:
    if not ok:
        raise ConfigError(f"profile {source}: {field}={value!r} is invalid", rule)


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml")) + ["host"]


def load_profile(target: str) -> DeviceProfile:
    """Load a profile by name, family alias, ``host``, or path to a TOML file."""
    if target == "host":
        from edgeopt.profiles.host import detect_host_profile

        return detect_host_profile()
    path = Path(target)
    if path.suffix == ".toml" and path.is_file():
        return _load_file(path)
    name = FAMILY_DEFAULTS.get(target, target)
    path = PROFILE_DIR / f"{name}.toml"
    if not path.is_file():
        aliases = ", ".join(sorted(FAMILY_DEFAULTS))
        raise UnknownTargetError(
            f"unknown target {target!r}",
            f"valid targets: {', '.join(profile_names())}; family aliases: {aliases}; or a path to a .toml file",
        )
    return _load_file(path)


def _load_file(path: Path) -> DeviceProfile:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"profile {path} is not valid TOML: {exc}", "fix the file's syntax") from exc
    return profile_from_dict(data, path.name)


def all_profiles() -> list[DeviceProfile]:
    return [load_profile(name) for name in profile_names()]
