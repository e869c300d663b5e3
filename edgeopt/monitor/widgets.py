"""The dashboard's panels. Each takes already-computed figures and only decides how they look.

Every text-bearing widget keeps the plain text it shows in ``text`` so tests (and people debugging)
can read what is on screen without parsing render output.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Sparkline, Static

from edgeopt.monitor import formatting as fmt
from edgeopt.monitor.metrics_parse import RequestRow
from edgeopt.monitor.window import Figures, History, Latency


class Figure(Static):
    """A line of text whose current value is readable as ``text``."""

    def __init__(self, text: str = "", **kwargs: object) -> None:
        super().__init__(text, markup=False, **kwargs)
        self.text = text

    def show(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.update(text)


class StatusLine(Figure):
    """Connection state: connected, unreachable (and for how long), or paused."""

    def show_state(self, state: str, text: str) -> None:
        for name in ("ok", "down", "paused", "waiting"):
            self.set_class(name == state, f"-{name}")
        self.show(text)


class LatencyRow(Horizontal):
    def __init__(self, label: str, series: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.label = label
        self.series = series

    def compose(self) -> ComposeResult:
        yield Figure(self._line(Latency()), classes="figures")
        yield Sparkline([], summary_function=max, classes="trend")

    def show(self, latency: Latency, history: History) -> None:
        self.query_one(Figure).show(self._line(latency))
        self.query_one(Sparkline).data = history.series(self.series)

    def _line(self, latency: Latency) -> str:
        return f"{self.label:<4} p50 {fmt.seconds(latency.p50)}  p95 {fmt.seconds(latency.p95)}"


class LatencyPanel(Vertical):
    def __init__(self, window_s: float, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.border_title = f"Latency · last {window_s:g}s"

    def compose(self) -> ComposeResult:
        yield LatencyRow("TTFT", "ttft_p50", id="ttft")
        yield LatencyRow("ITL", "itl_p50", id="itl")
        yield LatencyRow("E2E", "e2e_p95", id="e2e")

    def show(self, figures: Figures, history: History) -> None:
        self.query_one("#ttft", LatencyRow).show(figures.ttft, history)
        self.query_one("#itl", LatencyRow).show(figures.itl, history)
        self.query_one("#e2e", LatencyRow).show(figures.e2e, history)


class ThroughputPanel(Vertical):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.border_title = "Throughput · queue"

    def compose(self) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Figure(self._rate_line(Figures()), id="tokens-per-s", classes="figures")
            yield Sparkline([], summary_function=max, classes="trend", id="tokens-trend")
        yield Figure(self._queue_line(Figures()), id="queue")
        yield Figure(self._totals_line(Figures()), id="totals")

    def show(self, figures: Figures, history: History) -> None:
        self.query_one("#tokens-per-s", Figure).show(self._rate_line(figures))
        self.query_one("#tokens-trend", Sparkline).data = history.series("tokens_per_s")
        self.query_one("#queue", Figure).show(self._queue_line(figures))
        self.query_one("#totals", Figure).show(self._totals_line(figures))

    @staticmethod
    def _rate_line(figures: Figures) -> str:
        return f"gen tok/s {fmt.rate(figures.generation_tokens_per_s)}"

    @staticmethod
    def _queue_line(figures: Figures) -> str:
        return (f"running {fmt.count(figures.running)}  waiting {fmt.count(figures.waiting)}  "
                f"prompt/s {fmt.rate(figures.prompt_tokens_per_s).strip()}")

    @staticmethod
    def _totals_line(figures: Figures) -> str:
        line = (f"done {fmt.count(figures.requests_total)}  errors {fmt.count(figures.errors_total)}  "
                f"preempted {fmt.count(figures.preemptions_total)}")
        acceptance = figures.speculative_acceptance  # shown once speculation has verified a guess
        return line if acceptance is None else f"{line}  spec accepted {acceptance:.0%}"


class UsageBar(Static):
    """``label [████░░░] used / capacity  pct``; the bar takes whatever width is left."""

    def __init__(self, label: str, unit: str, **kwargs: object) -> None:
        super().__init__("", markup=False, **kwargs)
        self.label = label
        self.unit = unit
        self.used: float | None = None
        self.capacity: float | None = None

    def show(self, used: float | None, capacity: float | None) -> None:
        self.used, self.capacity = used, capacity
        self.refresh()

    @property
    def text(self) -> str:
        return self._compose_line(bar_width=10)

    def render(self) -> str:
        fixed = len(self._compose_line(bar_width=0))
        return self._compose_line(bar_width=max(self.size.width - fixed, 4))

    def _compose_line(self, bar_width: int) -> str:
        if self.unit == "bytes":
            amounts = f"{fmt.size_bytes(self.used)} / {fmt.size_bytes(self.capacity)}"
        else:
            amounts = f"{fmt.count(self.used)} / {fmt.count(self.capacity)} {self.unit}"
        gauge = fmt.bar(self.used, self.capacity, bar_width)
        return f"{self.label:<9}{gauge} {amounts} {fmt.percent(self.used, self.capacity):>4}"


class MemoryPanel(Vertical):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.border_title = "Memory"

    def compose(self) -> ComposeResult:
        yield UsageBar("KV cache", "tok", id="kv")
        yield UsageBar("cached", "tok", id="cached")
        yield Figure(self._prefix_line(Figures()), id="prefix")
        yield UsageBar("RSS", "bytes", id="rss")
        workers = Figure("", id="workers")  # a split server's workers; hidden (no line) for one process
        workers.display = False
        yield workers

    def show(self, figures: Figures) -> None:
        self.query_one("#kv", UsageBar).show(figures.kv_used_tokens, figures.kv_capacity_tokens)
        self.query_one("#cached", UsageBar).show(figures.prefix_cached_tokens, figures.kv_capacity_tokens)
        self.query_one("#prefix", Figure).show(self._prefix_line(figures))
        self.query_one("#rss", UsageBar).show(figures.rss_bytes, figures.memory_budget_bytes)
        self.border_subtitle = f"KV {figures.kv_cache_kind}" if figures.kv_cache_kind else ""
        workers = self.query_one("#workers", Figure)
        workers.display = bool(figures.workers)
        workers.show(self.workers_line(figures))

    @staticmethod
    def workers_line(figures: Figures) -> str:
        """Each RPC worker: memory used of offered, and a memory query's round trip over the head's connection."""
        return "\n".join(f"{'worker':<9}{w.name} {fmt.size_bytes(w.used_bytes)} of {fmt.size_bytes(w.offered_bytes)} "
                         f"({fmt.percent(w.used_bytes, w.offered_bytes).strip()}), "
                         f"rtt {fmt.seconds(w.round_trip_s).strip()}" for w in figures.workers)

    @staticmethod
    def _prefix_line(figures: Figures) -> str:
        """How much prompt work the prefix cache saved (the 'cached' bar is what it holds for that)."""
        served = fmt.percent(figures.prefix_hit_tokens_total, figures.prefix_query_tokens_total).strip()
        return f"{'':<9}prefix cache served {served} of {fmt.count(figures.prefix_query_tokens_total)} prompt tok"


class RequestTable(DataTable):
    """Active requests; rows are replaced on every poll (the server's list is the truth).

    A server of several models adds a "model" column; a server of one looks as it always did.
    """

    # Fixed widths: a width grown from the rows is recomputed after they are drawn, so a poll's screen
    # could show "decod" for "decoding" (and the columns would jump as states come and go).
    COLUMNS = {"request": 18, "state": 10, "prompt": 6, "generated": 9, "elapsed": 7}
    MODEL_WIDTH = 14
    with_model = False  # the columns now shown include "model"

    def on_mount(self) -> None:
        self.cursor_type = "none"
        self._add_columns()
        self.border_title = "Active requests"

    def _add_columns(self) -> None:
        widths = {**self.COLUMNS, "model": self.MODEL_WIDTH}
        for name in self.columns_shown:
            self.add_column(name, width=widths[name])

    def show(self, rows: list[RequestRow] | None, with_model: bool = False) -> None:
        switch = with_model != self.with_model
        self.clear(columns=switch)
        if switch:
            self.with_model = with_model
            self._add_columns()
        for row in rows or []:
            cells = [row.request_id[: self.COLUMNS["request"]], row.state, f"{row.prompt_tokens:>6}",
                     f"{row.generated_tokens:>9}", f"{row.elapsed_s:6.1f}s"]
            if self.with_model:
                cells.insert(1, (row.model or fmt.MISSING)[: self.MODEL_WIDTH])
            self.add_row(*cells)
        self.border_subtitle = "detail unavailable" if rows is None else f"{len(rows)} active"

    @property
    def columns_shown(self) -> tuple[str, ...]:
        names = tuple(self.COLUMNS)
        return (names[0], "model", *names[1:]) if self.with_model else names
