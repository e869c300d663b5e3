"""Build-once protocol: a finished build is reused; an interrupted one leaves nothing behind."""

from __future__ import annotations

import pytest

from edgeopt.demo.store import DONE_MARKER, build_once, demo_cache_root, is_built


def _finished_build(calls: list):
    def build(tmp):
        calls.append(tmp)
        (tmp / "weights.bin").write_bytes(b"w")
        (tmp / DONE_MARKER).write_text("{}")
    return build


def test_builds_once_then_reuses(tmp_path):
    calls: list = []
    final = tmp_path / "demo-model-abc"
    assert build_once(final, _finished_build(calls)) == final
    assert build_once(final, _finished_build(calls)) == final
    assert len(calls) == 1 and is_built(final) and (final / "weights.bin").is_file()
    assert calls[0] != final, "the build must happen in a temporary directory, then be renamed"


def test_interrupted_build_leaves_no_directory_a_later_run_would_trust(tmp_path):
    final = tmp_path / "demo-model-abc"

    def crash(tmp):
        (tmp / "weights.bin").write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_once(final, crash)
    assert not final.exists()
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    calls: list = []
    build_once(final, _finished_build(calls))
    assert len(calls) == 1 and is_built(final)


def test_a_build_without_its_marker_is_rejected(tmp_path):
    final = tmp_path / "demo-model-abc"
    with pytest.raises(RuntimeError, match=DONE_MARKER):
        build_once(final, lambda tmp: (tmp / "weights.bin").write_bytes(b"w"))
    assert not final.exists()


def test_cache_root_prefers_the_demo_specific_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path / "general"))
    monkeypatch.setenv("EDGEOPT_DEMO_CACHE", str(tmp_path / "demo"))
    assert demo_cache_root() == tmp_path / "demo"
    monkeypatch.delenv("EDGEOPT_DEMO_CACHE")
    assert demo_cache_root() == tmp_path / "general"

