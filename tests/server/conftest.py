"""Server fixtures: the real Engine over the deterministic fake runtime, behind a real uvicorn."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeopt.demo.tokenizer import CHATML_TEMPLATE
from edgeopt.engine.api import EngineConfig
from edgeopt.engine.engine import Engine
from edgeopt.server.app import create_app
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.state import ServedModel, ServerSettings
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.live import LiveServer, start_live_server

MODEL = "fake-model"


def fake_served_model(runtime: FakeRuntime, **engine_config: Any) -> ServedModel:
    config = EngineConfig(kv_capacity_tokens=runtime.info.kv_capacity_tokens, max_running=runtime.info.max_slots,
                          context_length=runtime.info.context_length, **engine_config)
    engine = Engine(runtime, config)
    engine.start()
    return ServedModel(context_length=engine.context_tokens, tokenizer=runtime.tokenizer, engine=engine,
                       runtime=runtime, chat_template=ChatTemplate(CHATML_TEMPLATE, "", "<|im_end|>"))


@pytest.fixture
def serve_fake() -> Iterator[Callable[..., LiveServer]]:
    """``serve_fake(runtime_kwargs..., engine=dict(...), api_key=..., settings=dict(...))`` -> a running
    LiveServer (``settings``: more ServerSettings fields; ``runtime``: a fake of your own instead)."""
    started: list[LiveServer] = []

    def make(engine: dict | None = None, api_key: str | None = None, max_body_bytes: int | None = None,
             settings: dict | None = None, runtime: FakeRuntime | None = None, **runtime_kwargs: Any) -> LiveServer:
        runtime = runtime or FakeRuntime(**runtime_kwargs)
        extra = {"max_body_bytes": max_body_bytes} if max_body_bytes else {}
        extra.update(settings or {})
        settings = ServerSettings(model_names=(MODEL, "alias"), api_key=api_key,
                                  memory_budget_bytes=1 << 30, **extra)
        app = create_app(settings, served=fake_served_model(runtime, **(engine or {})))
        live = start_live_server(app)
        live.runtime = runtime
        started.append(live)
        return live

    yield make
    for live in started:
        live.stop()


@pytest.fixture(scope="session")
def qwen2_checkpoint(tmp_path_factory) -> Path:
    """A tiny random Qwen2 with the real Qwen2 tokenizer (151k tokens) and a ChatML template: a tokenizer
    llama.cpp's converter recognises (it refuses our own trained test tokenizer)."""
    from tests.exporters.conformance_models import (
        CASES,
        build_conformance_checkpoint,
        build_tokenizer_files,
    )

    work = tmp_path_factory.mktemp("qwen2")
    tokenizer = build_tokenizer_files("qwen2", work / "tokenizer")
    return build_conformance_checkpoint(work / "model", CASES["qwen2"], tokenizer)


@pytest.fixture(scope="session")
def reference_gguf(qwen2_checkpoint: Path, tmp_path_factory) -> Path:
    """That checkpoint converted by llama.cpp's own converter (f32), not by edgeopt."""
    from tests.exporters.reference_converter import convert_with_reference

    return convert_with_reference(qwen2_checkpoint, tmp_path_factory.mktemp("ref") / "tiny-ref.gguf")
