"""Render docs/monitor.png: the dashboard watching a real ``edgeopt serve`` while clients keep it busy.

    python -m tests.monitor.make_screenshot --bundle BUNDLE [--out docs/monitor.png]

The app runs headless (textual's run_test) so no terminal is needed; its SVG export is rasterised with
cairosvg, after pointing the SVG at a monospace font that is installed (the export names a web font).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

import httpx

from edgeopt.monitor.app import MonitorApp
from edgeopt.server.startup.serve_process import launched_server
from tests.monitor.screen import next_polls

SIZE = (120, 32)
PROMPTS = ("import os\n", "def main():\n", "class Config:\n", "# parse the arguments\n")


async def keep_busy(base_url: str, clients: int, stop: asyncio.Event) -> int:
    """``clients`` concurrent loops of completions until ``stop``; returns the number answered."""
    answered = 0
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        model = (await http.get("/v1/models")).json()["data"][0]["id"]

        async def client(index: int) -> None:
            nonlocal answered
            turn = 0
            while not stop.is_set():
                body = {"model": model, "prompt": PROMPTS[(index + turn) % len(PROMPTS)],
                        "max_tokens": 48 + 16 * (turn % 3), "temperature": 0.8, "seed": index * 100 + turn}
                if (await http.post("/v1/completions", json=body)).status_code == 200:
                    answered += 1
                turn += 1

        await asyncio.gather(*(client(i) for i in range(clients)))
    return answered


async def capture(base_url: str, seconds: float, clients: int) -> str:
    app = MonitorApp(base_url, refresh_s=0.5, window_s=10)
    stop = asyncio.Event()
    async with app.run_test(size=SIZE) as pilot:
        load = asyncio.create_task(keep_busy(base_url, clients, stop))
        await next_polls(pilot, max(2, int(seconds / app.refresh_s)), timeout_s=seconds * 4 + 30)
        svg = app.export_screenshot(title="edgeopt monitor")
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(load, timeout=120)
    return svg


def svg_to_png(svg: str, out: Path) -> None:
    import cairosvg  # docs tool only: pip install cairosvg

    # Use an installed monospace font; at the export's 20px its cells are a little narrower than the
    # 12.2px grid, which leaves small gaps in box lines but never pushes text past the right edge.
    svg = svg.replace("font-family: Fira Code, monospace;", "font-family: DejaVu Sans Mono, monospace;")
    out.parent.mkdir(parents=True, exist_ok=True)
    cairosvg.svg2png(bytestring=svg.encode(), write_to=str(out), output_width=1400)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("docs/monitor.png"))
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    serve_args = ["--memory", "1GiB", "--max-concurrency", "4", "--context", "512"]
    with launched_server(args.bundle, threads=2, extra_args=serve_args) as server:
        svg = asyncio.run(capture(server.base_url, args.seconds, args.clients))
    svg_to_png(svg, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
