"""CLI compression flags -> pass list."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.planning.pass_list import compression_passes


def test_prune_and_distil_with_data(tmp_path: Path) -> None:
    data = tmp_path / "d.txt"
    data.write_text("hello world\n")
    passes = compression_passes(0.3, None, None, 1, None, data, 50, False)
    assert [n for n, _ in passes] == ["prune", "distil"]
    prune, distil = passes[0][1], passes[1][1]
    assert prune["ratio"] == 0.3 and prune["layers"] == 1 and "heads" not in prune
    assert prune["calib_sha256"] == distil["data_sha256"] and len(distil["data_sha256"]) == 64
    assert distil["steps"] == 50


def test_prune_without_data_skips_distil() -> None:
    assert [n for n, _ in compression_passes(0.3, None, None, None, None, None, 50, False)] == ["prune"]


def test_no_distil_wins(tmp_path: Path) -> None:
    data = tmp_path / "d.txt"
    data.write_text("x")
    assert [n for n, _ in compression_passes(0.3, None, None, None, False, data, 50, False)] == ["prune"]


@pytest.mark.parametrize("kwargs", [
    dict(ratio=None, distil=True, data=True, fit=False),  # nothing to recover
    dict(ratio=0.3, distil=True, data=False, fit=False),  # no data
])
def test_distil_misuse_is_refused(tmp_path: Path, kwargs: dict) -> None:
    data = tmp_path / "d.txt"
    data.write_text("x")
    with pytest.raises(ConfigError) as info:
        compression_passes(kwargs["ratio"], None, None, None, kwargs["distil"], data if kwargs["data"] else None,
                           50, kwargs["fit"])
    assert info.value.hint


def test_missing_data_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.txt"):
        compression_passes(0.3, None, None, None, None, tmp_path / "nope.txt", 50, False)
