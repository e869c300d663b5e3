from __future__ import annotations

from pathlib import Path

import pytest

import edgeopt.profiles
from edgeopt.errors import ConfigError, UnknownTargetError
from edgeopt.profiles import FAMILY_DEFAULTS, load_profile, profile_names
from edgeopt.profiles.host import cgroup_memory_limit, detect_host_profile

REQUIRED = {"jetson-orin-nano-8gb", "jetson-orin-nx-16gb", "jetson-agx-orin-64gb", "raspberry-pi-5-8gb",
            "raspberry-pi-5-4gb", "x86-64-cpu", "host"}


def test_required_profiles_exist():
    assert REQUIRED <= set(profile_names())


@pytest.mark.parametrize("name", sorted(REQUIRED - {"host"}))
def test_every_profile_file_loads_and_validates(name):
    p = load_profile(name)
    assert p.name == name
    assert 0 < p.usable_memory_bytes < p.total_memory_gb * 1024**3
    assert p.cores >= 1


def test_jetson_is_unified_cuda_and_pi_is_not():
    jetson, pi = load_profile("jetson"), load_profile("raspberry-pi")
    assert jetson.platform.memory_shared_with_accelerator and jetson.platform.has_cuda
    assert jetson.platform.accelerator_label == "cuda:sm_87" and jetson.platform.offload_memory_bytes == 0
    assert not pi.platform.memory_shared_with_accelerator and not pi.platform.has_cuda and pi.cpu_isa == "arm64"


def test_family_aliases_resolve_to_their_default():
    for alias, name in FAMILY_DEFAULTS.items():
        assert load_profile(alias).name == name


def test_unknown_target_lists_valid_names():
    with pytest.raises(UnknownTargetError) as err:
        load_profile("jetsn")
    assert "'jetsn'" in err.value.message
    assert "jetson-orin-nano-8gb" in err.value.hint and "raspberry-pi" in err.value.hint


def test_invalid_profile_file_names_the_field(tmp_path: Path):
    good = (edgeopt.profiles.PROFILE_DIR / "x86-64-cpu.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(good.replace('preferred_format = "gguf"', 'preferred_format = "tflite"'))
    with pytest.raises(ConfigError, match="preferred_format='tflite'"):
        load_profile(str(bad))
    bad.write_text(good + "\nwheels = 4\n")
    with pytest.raises(ConfigError, match="unknown field"):
        load_profile(str(bad))


def test_host_profile_uses_the_smaller_of_ram_and_cgroup_limit():
    import psutil

    host = detect_host_profile()
    limit = cgroup_memory_limit()
    expected = min(psutil.virtual_memory().total, limit) if limit else psutil.virtual_memory().total
    assert abs(host.total_memory_gb * 1024**3 - expected) < 0.01 * 1024**3
    assert host.os_reserved_gb < host.total_memory_gb
    assert load_profile("host").name == "host"


def test_cgroup_limit_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import edgeopt.profiles.host as host

    f = tmp_path / "memory.max"
    monkeypatch.setattr(host, "_CGROUP_LIMIT_FILES", (str(f),))
    f.write_text("max\n")
    assert host.cgroup_memory_limit() is None
    f.write_text("2147483648\n")
    assert host.cgroup_memory_limit() == 2 * 1024**3
    f.write_text(str(1 << 62))  # cgroup v1's "unlimited"
    assert host.cgroup_memory_limit() is None


def test_host_isa_agrees_with_the_cpu_flags() -> None:
    from edgeopt.profiles import load_profile
    from edgeopt.profiles.host import cpu_flags

    flags, isa = cpu_flags(), load_profile("host").cpu_isa
    if not Path("/proc/cpuinfo").is_file():
        assert flags == set()
    elif "avx512_vnni" in flags:
        assert isa == "avx512_vnni"
    elif "avx2" in flags:
        assert isa == "avx2" and "fma" in flags  # every AVX2 x86 CPU has FMA too: flags are per-word
    else:
        assert isa in ("arm64", "x86_64")
