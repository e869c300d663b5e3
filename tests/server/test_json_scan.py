"""The incremental JSON scanner under the tool-call parser: values end where json.loads says they end,
whatever the pieces the text arrives in."""

from __future__ import annotations

import json

import pytest

from edgeopt.server.chat.tools.json_scan import (
    JsonScanError,
    ObjectScanner,
    ValueEnd,
    ValueScanner,
)

OBJECT = '{"s": "a\\\\\\"}]", "o": {"x": [1, {"y": "}"}]}, "n": -1.5e3, "t": true, "z": null}'


def test_object_values_are_reported_whole_for_every_split() -> None:
    expected = {k: json.dumps(v) for k, v in json.loads(OBJECT).items()}
    for cut in range(len(OBJECT) + 1):
        scanner, ends, used = ObjectScanner(), {}, 0
        for piece in (OBJECT[:cut], OBJECT[cut:] + " trailing"):
            events, n = scanner.feed(piece)
            used += n
            ends.update({e.key: e.raw for e in events if isinstance(e, ValueEnd)})
        assert scanner.done and used == len(OBJECT)
        assert {k: json.dumps(json.loads(v)) for k, v in ends.items()} == expected


@pytest.mark.parametrize(("text", "length"), [('"a\\"b" rest', 6), ("[1, [2]] x", 8), ("12,", 2), ("true}", 4)])
def test_a_value_ends_where_it_ends(text: str, length: int) -> None:
    scanner = ValueScanner()
    assert scanner.feed(text) == length and scanner.done


def test_a_number_at_the_end_of_the_text_is_complete_only_then() -> None:
    scanner = ObjectScanner()
    events, _ = scanner.feed('{"n": 12')
    assert not any(isinstance(e, ValueEnd) for e in events)
    assert [e.raw for e in scanner.end_of_input() if isinstance(e, ValueEnd)] == ["12"]


@pytest.mark.parametrize(("text", "offset"), [('{"a" 1}', 5), ("x", 0), ('{"a": ]', 6), ('{"a": 1 "b"', 8)])
def test_errors_say_where(text: str, offset: int) -> None:
    with pytest.raises(JsonScanError) as caught:
        ObjectScanner().feed(text)
    assert caught.value.offset == offset
