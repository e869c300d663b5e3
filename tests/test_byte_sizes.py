"""Sizes read as written: bytes with B, decimal KB/MB/GB, binary KiB/MiB/GiB (and K/M/G), a bare number in
the option's documented unit (MiB), and a bare number that cannot be meant refused with the likely intent."""

from __future__ import annotations

import pytest

from edgeopt.byte_sizes import read_memory, read_size, refuse_above
from edgeopt.errors import ConfigError

MIB, GIB = 1024**2, 1024**3


@pytest.mark.parametrize("text, expected", [
    ("105453920B", 105453920), ("105453920 b", 105453920), ("4KB", 4000), ("90MB", 90_000_000),
    ("1.5GB", 1_500_000_000), ("4KiB", 4096), ("90MiB", 90 * MIB), ("4GiB", 4 * GIB), ("4G", 4 * GIB),
    ("512m", 512 * MIB), ("300", 300 * MIB), ("0", 0),
])
def test_sizes_are_read_as_written(text: str, expected: int) -> None:
    assert read_size(text, "--size").bytes == expected


@pytest.mark.parametrize("text", ["lots", "-1G", "12iB", "4 GiBs", "1e9"])
def test_what_is_no_size_is_refused_with_examples(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a size") as caught:
        read_size(text, "--size")
    assert "105453920B" in caught.value.hint


def test_a_bare_byte_count_read_as_mib_is_refused_naming_the_bytes_it_likely_meant() -> None:
    size = read_size("105453920", "--size")
    assert size.bare and size.bytes == 105453920 * MIB
    with pytest.raises(ConfigError, match=r"--size 105453920 \(a bare number is MiB: 100\.6 TiB\) is larger than "
                                          r"the model in F16 \(256\.0 MiB\)") as caught:
        refuse_above(size, 256 * MIB, "--size", "the model in F16")
    assert "write --size 105453920B" in caught.value.hint and "100.6 MiB" in caught.value.hint


def test_an_explicit_unit_above_the_limit_is_refused_without_guessing() -> None:
    with pytest.raises(ConfigError, match="larger than") as caught:
        refuse_above(read_size("2GiB", "--size"), 256 * MIB, "--size", "the model in F16")
    assert "at most 256.0 MiB" in caught.value.hint


def test_a_bare_memory_larger_than_the_device_is_refused_and_a_written_unit_is_taken() -> None:
    with pytest.raises(ConfigError, match="--memory 8000000000 .* larger than the memory of pi"):
        read_memory("8000000000", "--memory", 8 * GIB, "pi")
    assert read_memory("4096", "--memory", 8 * GIB, "pi") == 4 * GIB
    assert read_memory("16GiB", "--memory", 8 * GIB, "pi") == 16 * GIB  # planning for a bigger board
    with pytest.raises(ConfigError, match="must be positive"):
        read_memory("0", "--memory", 8 * GIB, "pi")
