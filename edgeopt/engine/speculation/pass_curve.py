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

Scaling by one factor keeps the start-up curve's shape, and a shape timed beside a busy neighbour is wrong in a
way no level corrects: llama.cpp's threads stall at their barriers in proportion to the work, so the extra
tokens came out dear (SmolLM2, 2 cores, one busy loop beside it: a pass of 2 tokens 2.2x one, against 1.6x on a
quiet host), no draft paid, only passes of one token were served, and the price never moved. So where the
steps served reach two sizes of the start-up range (a drafted step, or the controller's price probe:
:mod:`edgeopt.engine.speculation.price_probe`), the smallest sets the level and the others what a token adds
beyond it, each against the start-up curve at the same sizes.
"""

from __future__ import annotations

import statistics

MIN_SERVED = 3  # steps of a size before their mean stands for it
SERVED_WINDOW = 10  # a size's mean follows about its last SERVED_WINDOW steps
REDRAW_EVERY = 8  # steps between two redrawings of the curve (each step would cost a fast model ~3% of its time)
# What a token adds now, against at start, stays within this factor of the level's change: one thread instead of
# two roughly doubles both, and a served mean more than that apart is one noisy step, not the host.
SHAPE_CHANGE = 4.0


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
        return _on_points(self._points if self._points is not None else self._make_points(), tokens)

    def shape(self) -> dict[int, float]:
        """The start-up sizes as priced now, each over a pass of the smallest: what /metrics and logs show."""
        first = self.seconds(min(self._measured))
        return {n: self.seconds(n) / first for n in self._measured}

    def _make_points(self) -> list[tuple[int, float]]:
        served = {n: mean for n, (steps, mean) in self._served.items() if steps >= MIN_SERVED}
        start_up = list(self._measured.items())
        inside = sorted(n for n in served if n <= start_up[-1][0])  # (16 sequences are not 16 tokens of one)
        if inside:
            base = inside[0]
            at_base = _on_points(start_up, base)
            level = served[base] / at_base  # the load now against the load at start
            added = [(served[n] - served[base]) / (_on_points(start_up, n) - at_base) for n in inside[1:]
                     if _on_points(start_up, n) > at_base]
            slope = min(max(statistics.median(added), level / SHAPE_CHANGE), level * SHAPE_CHANGE) if added else level
            # Above the smallest served size the served slope carries the shape; below it nothing was served, and
            # that slope carried down could price a pass at or under zero (4 sequences' steps steeper than at
            # start, then one sequence left): there the start-up shape at the load now.
            merged = {n: served[base] + slope * (t - at_base) if n > base else level * t for n, t in start_up} | served
        else:
            base, level, slope = 0, 1.0, 1.0
            merged = dict(self._measured) | served
        points: list[tuple[int, float]] = []
        for tokens in sorted(merged):  # a pass costs more for carrying more: noise must not say otherwise
            least = self._least_per_token * (level if tokens <= base else slope)
            floor = points[-1][1] + least * (tokens - points[-1][0]) if points else 0.0
            points.append((tokens, max(floor, merged[tokens])))
        self._points = points
        return points


def _on_points(points: list[tuple[int, float]], tokens: int) -> float:
    """Between two points on the line joining them, past the last on the slope of the last segment, below the
    first at the first's value."""
    if tokens <= points[0][0]:
        return points[0][1]
    for (low, a), (high, b) in zip(points, points[1:]):
        if tokens <= high:
            return a + (b - a) * (tokens - low) / (high - low)
    (low, a), (high, b) = points[-2], points[-1]
    return b + (b - a) / (high - low) * (tokens - high)
