"""The textual app: a timer asks for a poll, a worker does the HTTP, ``apply_poll`` updates the panels.

The app holds no statistics of its own: :class:`MetricsWindow` turns scrapes into figures and the
widgets only draw them. ``apply_poll`` is public so tests can feed fixed scrapes at fixed times.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Footer, Header

from edgeopt.monitor.client import MetricsClient, Poll
from edgeopt.monitor.metrics_parse import RequestRow
from edgeopt.monitor.models_panel import ModelsPanel
from edgeopt.monitor.widgets import LatencyPanel, MemoryPanel, RequestTable, StatusLine, ThroughputPanel
from edgeopt.monitor.window import Figures, MetricsWindow


class MonitorApp(App[None]):
    CSS_PATH = "monitor.tcss"
    TITLE = "edgeopt monitor"
    ENABLE_COMMAND_PALETTE = False  # three keys are the whole interface; keep the footer about them
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("r", "reset", "Reset"),
    ]

    def __init__(self, url: str, refresh_s: float = 1.0, window_s: float = 10.0, api_key: str | None = None,
                 autopoll: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.client = MetricsClient(url, timeout_s=max(1.0, min(refresh_s, 5.0)), api_key=api_key)
        self.refresh_s = refresh_s
        self.window = MetricsWindow(window_s)
        self.figures = Figures()
        self.paused = False
        self.polls_done = 0  # polls applied (tests wait on this)
        self._autopoll = autopoll
        self._clock = clock
        self._in_flight = False
        self._down_since: float | None = None
        self.sub_title = self.client.base_url

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield StatusLine(f"connecting to {self.client.base_url} …", id="status")
        with Horizontal(id="top"):
            yield LatencyPanel(self.window.window_s, id="latency")
            yield ThroughputPanel(id="throughput")
        yield MemoryPanel(id="memory")
        yield ModelsPanel(self.window.window_s, id="models")  # hidden unless the server has several models
        yield RequestTable(id="requests")
        yield Footer()

    def on_mount(self) -> None:
        if self._autopoll:
            self.set_interval(self.refresh_s, self._request_poll)
            self._request_poll()

    async def on_unmount(self) -> None:
        await self.client.aclose()

    def _request_poll(self) -> None:
        # A slow server must not pile polls up: skip this tick while the previous poll is out.
        if self.paused or self._in_flight:
            return
        self._in_flight = True
        self.run_worker(self._poll_once(), group="poll", exit_on_error=False)

    async def _poll_once(self) -> None:
        try:
            result = await self.client.poll()
        finally:
            self._in_flight = False
        if not self.paused:
            self.apply_poll(result, self._clock())

    def apply_poll(self, poll: Poll, now: float) -> None:
        """Show what one poll learned (or that the server could not be reached)."""
        self.polls_done += 1
        status = self.query_one(StatusLine)
        if poll.snapshot is None:
            if self._down_since is None:
                self._down_since = now
            status.show_state("down", f"✖ cannot reach {self.client.base_url}: {poll.error} · "
                                      f"down {now - self._down_since:.0f}s · retrying every {self.refresh_s:g}s")
            return
        self._down_since = None
        self.figures = self.window.add(poll.snapshot, now)
        self._draw(self.figures, poll.requests)
        status.show_state("ok", self._connected_text(poll))

    def _connected_text(self, poll: Poll) -> str:
        notes = [f"● connected {self.client.base_url} · every {self.refresh_s:g}s"]
        if poll.requests_error:
            notes.append(f"request detail: {poll.requests_error}")
        problems = self.figures.problems
        if problems:  # name the first offender; the parser's full message is too long for one line
            notes.append(f"{len(problems)} malformed metric(s): {problems[0].split(':', 1)[0]}")
        return " · ".join(notes)

    def _draw(self, figures: Figures, requests: list[RequestRow] | None) -> None:
        history = self.window.history
        self.query_one(LatencyPanel).show(figures, history)
        self.query_one(ThroughputPanel).show(figures, history)
        self.query_one(MemoryPanel).show(figures)
        self.query_one(ModelsPanel).show(figures)
        self.query_one(RequestTable).show(requests, with_model=bool(figures.models))

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        status = self.query_one(StatusLine)
        if self.paused:
            status.show_state("paused", "‖ paused · press p to resume")
        else:
            status.show_state("waiting", f"resuming {self.client.base_url} …")
            self._request_poll()

    def action_reset(self) -> None:
        self.window.reset()
        self.figures = Figures()
        self._draw(self.figures, [])
