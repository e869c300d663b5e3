"""Stop strings that may straddle token boundaries ("\\n\\nUser:" can arrive as "\\n", "\\nUs", "er:").

Text that could still be the start of a stop string is held back until the next delta proves it is
not; a match anywhere truncates the output just before the stop string (which is never emitted).
"""

from __future__ import annotations


class StopStringMatcher:
    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the output (Anthropic reports it)

    def feed(self, text: str) -> str:
        """Add a text delta; return the text that is now safe to emit. Sets ``stopped`` on a match."""
        if not self._stops or self.stopped:
            return "" if self.stopped else text
        buffer = self._held + text
        found = [(at, stop) for stop in self._stops if (at := buffer.find(stop)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda hit: hit[0])
            self.stopped = True
            self._held = ""
            return buffer[:cut]
        hold = self._longest_stop_prefix_suffix(buffer)
        self._held = buffer[len(buffer) - hold:] if hold else ""
        return buffer[:len(buffer) - hold]

    def flush(self) -> str:
        """The stream ended for another reason: whatever was held back is real output."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_stop_prefix_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that is a proper prefix of some stop string."""
        best = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:length]):
                    best = length
                    break
        return best
