"""Detokenizer (UTF-8 safe streaming) and stop strings across token boundaries."""

from __future__ import annotations

from edgeopt.engine.detokenizer import IncrementalDetokenizer
from edgeopt.engine.stop_strings import StopStringMatcher
from tests.fixtures.fake_runtime import ByteTokenizer


def test_multibyte_characters_are_held_until_complete() -> None:
    detok = IncrementalDetokenizer(ByteTokenizer())
    deltas = [detok.add(b) for b in "né😀".encode()]
    assert deltas == ["n", "", "é", "", "", "", "😀"]
    assert detok.flush() == ""


def test_invalid_and_dangling_bytes_become_replacement_characters() -> None:
    detok = IncrementalDetokenizer(ByteTokenizer())
    assert detok.add(0xFF) == "\ufffd"
    assert detok.add(0xE2) == ""
    assert detok.flush() == "\ufffd"


def test_stop_string_split_over_many_deltas() -> None:
    matcher = StopStringMatcher(["\n\nUser:"])
    emitted = [matcher.feed(d) for d in ["Hello", "\n", "\nUs", "er:", " ignored"]]
    assert "".join(emitted) == "Hello" and matcher.stopped
    assert emitted[1] == ""  # "\n" was held back: it could have started the stop string


def test_false_start_is_released_when_disproved() -> None:
    matcher = StopStringMatcher(["STOP"])
    assert matcher.feed("ab ST") == "ab "
    assert matcher.feed("ART") == "START"
    assert matcher.feed("x S") == "x "
    assert matcher.flush() == "S" and not matcher.stopped


def test_earliest_of_several_stop_strings_wins() -> None:
    matcher = StopStringMatcher(["world", "lo w"])
    assert matcher.feed("hello world") == "hel" and matcher.stopped
