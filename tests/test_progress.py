from __future__ import annotations

import pytest

from edgeopt.progress import counted, progress


def test_progress_passes_items_through_with_or_without_a_bar(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setenv("EDGEOPT_PROGRESS", "0")
    assert list(progress(range(5), "off")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")
    assert list(progress(iter(range(5)), "on", total=5)) == [0, 1, 2, 3, 4]


def test_a_counted_bar_takes_counts_as_they_come_and_is_silent_when_off(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setenv("EDGEOPT_PROGRESS", "0")
    with counted("off") as update:
        update(1, 19)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")
    with counted("on") as update:  # the total is known only with the first count (ninja's [1/19])
        update(1, 19)
        update(19, 19)
