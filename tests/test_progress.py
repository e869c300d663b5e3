from __future__ import annotations

import pytest

from edgeopt.progress import progress


def test_progress_passes_items_through_with_or_without_a_bar(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setenv("EDGEOPT_PROGRESS", "0")
    assert list(progress(range(5), "off")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")
    assert list(progress(iter(range(5)), "on", total=5)) == [0, 1, 2, 3, 4]
