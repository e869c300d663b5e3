"""Serve a GGUF file (or any bundle) in-process the way ``edgeopt serve PATH`` does: model source, sizing,
runtime, engine, app, uvicorn."""

from __future__ import annotations

from pathlib import Path

from edgeopt.sources.model_source import model_card, open_model_source
from edgeopt.server.app import create_app
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
from edgeopt.server.state import ServerSettings
from tests.server.live import LiveServer, start_live_server


def serve_path_live(path: Path, context: int = 512, max_concurrency: int = 2,
                    chat_template: str | None = None) -> LiveServer:
    source = open_model_source(path)
    # Flash attention, as tests/fixtures/llama_greedy.py's oracle runs it: auto would time both kernels and
    # take the faster, which differs between CPUs and rounds differently.
    options = ServeOptions(memory_bytes=1 << 30, context=context, max_concurrency=max_concurrency, threads=2,
                           chat_template=chat_template, flash_attention="on")
    shape = serving_shape(source.bundle_dir, source.manifest, options)
    served = load_served_model(source.bundle_dir, source.manifest, shape, options)
    settings = ServerSettings(model_names=source.names, kind=source.manifest.kind, memory_budget_bytes=1 << 30,
                              model_card=model_card(source.bundle_dir, source.manifest))
    return start_live_server(create_app(settings, served=served))
