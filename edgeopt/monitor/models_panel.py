"""The "Models" panel of a server of several models: a row per model, hidden for a server of one.

A row: name, loaded or not, the bytes of the budget it holds (a bar like the KV bar, sized against the
whole budget), its running and waiting requests, TTFT p50 and generated tokens/s over the window, and
how often it was loaded / unloaded. The bar takes whatever width the other columns leave.
"""

from __future__ import annotations

from textual.widgets import Static

from edgeopt.monitor import formatting as fmt
from edgeopt.monitor.model_figures import ModelFigures
from edgeopt.monitor.window import Figures

MIN_BAR, MIN_NAME, MAX_NAME = 4, 5, 24
# Widths of the columns after the bar: bytes, run, wait, TTFT p50, tok/s, load/unl (each after one space).
TAIL = (10, 3, 4, 8, 7, 8)
STATE_WIDTH = 8


class ModelsPanel(Static):
    def __init__(self, window_s: float, **kwargs: object) -> None:
        super().__init__("", markup=False, **kwargs)
        self.border_title = f"Models · last {window_s:g}s"
        self.models: tuple[ModelFigures, ...] = ()
        self.budget_bytes: float | None = None
        self.display = False  # until a scrape shows several models

    def show(self, figures: Figures) -> None:
        self.models, self.budget_bytes = figures.models, figures.models_budget_bytes
        self.display = bool(self.models)
        self.border_subtitle = self.summary(figures) if self.models else ""
        self.refresh(layout=True)

    @property
    def text(self) -> str:
        """The rows as drawn 76 cells wide (an 80-column terminal)."""
        return self.lines(76)

    def render(self) -> str:
        return self.lines(self.content_size.width)

    def lines(self, width: int) -> str:
        name_width = _name_width(self.models, width)
        bar_width = max(width - _fixed_width(name_width), MIN_BAR)
        header = (f"{'model':<{name_width}} {'state':<{STATE_WIDTH}} {'held of budget':<{bar_width + 1 + TAIL[0]}} "
                  f"{'run':>{TAIL[1]}} {'wait':>{TAIL[2]}} {'TTFT p50':>{TAIL[3]}} {'tok/s':>{TAIL[4]}} "
                  f"{'load/unl':>{TAIL[5]}}")
        return "\n".join([header] + [self.row(m, name_width, bar_width) for m in self.models])

    def row(self, model: ModelFigures, name_width: int, bar_width: int) -> str:
        name = model.name if len(model.name) <= name_width else model.name[: name_width - 1] + "…"
        state = "loaded" if model.loaded else "unloaded"
        held = model.resident_bytes if model.loaded else None
        cells = (fmt.size_bytes(held), fmt.count(model.running), fmt.count(model.waiting),
                 fmt.seconds(model.ttft_p50).strip(), fmt.rate(model.generation_tokens_per_s).strip(),
                 f"{fmt.count(model.loads)}/{fmt.count(model.unloads)}")
        tail = " ".join(f"{cell:>{width}}" for cell, width in zip(cells, TAIL))
        return f"{name:<{name_width}} {state:<{STATE_WIDTH}} {fmt.bar(held, self.budget_bytes, bar_width)} {tail}"

    @staticmethod
    def summary(figures: Figures) -> str:
        """Under the panel: the bytes all models hold of the budget, and the rarer events when there were any."""
        held = sum(m.resident_bytes or 0.0 for m in figures.models if m.loaded)
        budget = figures.models_budget_bytes
        parts = [f"{fmt.size_bytes(held)} of {fmt.size_bytes(budget)} held {fmt.percent(held, budget).strip()}"]
        restores = sum(m.cache_restores or 0.0 for m in figures.models)
        failures = sum(m.load_failures or 0.0 for m in figures.models)
        if restores:
            parts.append(f"caches restored {fmt.count(restores)}")
        if failures:
            parts.append(f"failed loads {fmt.count(failures)}")
        return " · ".join(parts)


def _fixed_width(name_width: int) -> int:
    """Every column but the bar, with the single spaces between columns."""
    return name_width + 1 + STATE_WIDTH + 1 + 1 + sum(TAIL) + len(TAIL) - 1


def _name_width(models: tuple[ModelFigures, ...], width: int) -> int:
    """As wide as the longest name (up to MAX_NAME), but never so wide that the bar falls under MIN_BAR."""
    longest = max((len(m.name) for m in models), default=MIN_NAME)
    room = width - _fixed_width(0) - MIN_BAR
    return max(MIN_NAME, min(longest, MAX_NAME, room))
