"""A decode pass's time by the tokens it carries, where a line does not fit it: measured at engine start at a
few sizes (edgeopt.engine.speculation.calibration), then corrected by the steps the engine serves.

On a CPU the second token of a pass costs ~0.6 of a pass and each one after ~0.33 (SmolLM2-135M on 2 x86
cores), so a line through two sizes overprices long drafts or underprices short ones. But a measurement taken
once can mislead as well: a host busy at start times its passes wrong, its load changes, and a step of 16
sequences (each reading its own context) is not the start-up pass of 16 tokens of one sequence. So each size
the engine serves often enough is priced by its own recent steps, and the sizes it has not served by the
start-up curve scaled to the load now (the served sizes' times over their start-up ones). Every token a pass
carries costs at least the start-up curve's cheapest token (scaled alike): a step of 16 sequences is slowed by
contention that the steps of 8 were not, and a curve drawn through such means can come out flat past them,
which would price drafts on a full batch at nothing.
"""

from __future__ import annotations

import statistics

MIN_SERVED = 3  # steps of a size before their mean stands for it
SERVED_WINDOW = 10  # a size's mean follows about its last SERVED_WINDOW steps
REDRAW_EVERY = 8  # steps between two redrawings of the curve (each step would cost a fast model ~3% of its time)


class PassCurve:
    def __init__(self, measured: dict[int, float]) -> None:
        """``measured``: tokens -> seconds of a pass of that many, at two sizes or more."""
        if len(measured) < 2:
            raise ValueError(f"a pass curve needs two sizes or more, got {sorted(measured)}")
        self._measured = dict(sorted(measured.items()))
        sizes = list(self._measured)
        # the least a token adds to a pass at start: the flattest segment of the curve (none where one falls)
        self._least_per_token = max(0.0, min((self._measured[b] - self._measured[a]) / (b - a)
                                             for a, b in zip(sizes, sizes[1:])))
        self._served: dict[int, tuple[int, float]] = {}  # tokens -> (steps counted, mean seconds)
        self._points: list[tuple[int, float]] | None = None  # what seconds() reads; remade after a change
        self._observed_since = 0  # steps observed since the curve last changed
        self.version = 0  # changes with the curve: prices computed from it stand until then

    def observe(self, tokens: int, seconds: float) -> None:
        steps, mean = self._served.get(tokens, (0, 0.0))
        steps = min(steps + 1, SERVED_WINDOW)
        self._served[tokens] = (steps, mean + (seconds - mean) / steps)
        self._observed_since += 1
        if steps == MIN_SERVED or (steps > MIN_SERVED and self._observed_since >= REDRAW_EVERY):
            self._points = None  # a size newly priced by its own steps, or the served means moved on
            self._observed_since = 0
            self.version += 1

    def seconds(self, tokens: int) -> float:
        """A pass of ``tokens``: between known sizes on the line joining them, past the largest on the slope
        of its last segment, below the smallest at the smallest's time."""
        points = self._points if self._points is not None else self._make_points()
        if tokens <= points[0][0]:
            return points[0][1]
        for (low, a), (high, b) in zip(points, points[1:]):
            if tokens <= high:
                return a + (b - a) * (tokens - low) / (high - low)
        (low, a), (high, b) = points[-2], points[-1]
        return b + (b - a) / (high - low) * (tokens - high)

    def _make_points(self) -> list[tuple[int, float]]:
        served = {n: mean for n, (steps, mean) in self._served.items() if steps >= MIN_SERVED}
        both = [served[n] / self._measured[n] for n in served if n in self._measured]
        scale = statistics.median(both) if both else 1.0  # the load now against the load at start
        merged = {n: t * scale for n, t in self._measured.items()} | served
        least = self._least_per_token * scale
        points: list[tuple[int, float]] = []
        for tokens in sorted(merged):  # a pass costs more for carrying more: noise must not say otherwise
            floor = points[-1][1] + least * (tokens - points[-1][0]) if points else 0.0
            points.append((tokens, max(floor, merged[tokens])))
        self._points = points
        return points
