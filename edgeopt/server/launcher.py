"""``edgeopt serve``: bundle -> KV sizing -> runtime -> engine -> FastAPI app -> uvicorn.

Order matters for a good first minute: the manifest is read and the KV cache sized (cheap, so errors
such as "does not fit" appear before anything loads), uvicorn starts listening at once with /health
answering 503, and the runtime loads in a worker thread. A load failure stops the server and is
re-raised to the CLI, which prints it with its fix.

Nothing here imports torch or transformers: a GGUF bundle is served by llama.cpp alone.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.bundle import Manifest
from edgeopt.model_source import bundle_model_names, model_card, open_model_source
from edgeopt import backends, memory_budget
from edgeopt.engine import Engine, EngineConfig, engine_config_for
from edgeopt.engine.api import ServingEngine
from edgeopt.errors import ConfigError
from edgeopt.kv_layout import auto_kv_layout
from edgeopt.server.auth import check_exposure
from edgeopt.server.chat_template import ChatTemplate
from edgeopt.server.connection_guard import DEFAULT_HEADER_TIMEOUT_S, guarded_protocol
from edgeopt.server.responses_store import DEFAULT_STORE_BYTES
from edgeopt.memory_budget import KvSizing
from edgeopt.server.sizing import bundle_kv_facts, served_kv_element_bytes, served_kv_type
from edgeopt.server.state import ServedModel, ServerSettings
from runtimes.base import Runtime

log = logging.getLogger("edgeopt.server")
DEFAULT_CONTEXT = 4096
KEEP_ALIVE_S = 5  # uvicorn's default: an idle keep-alive connection is closed 5 s after its last response


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_concurrency: int | None = None  # concurrent sequences; default: what the KV budget affords
    context: int | None = None  # tokens per sequence (prompt + output)
    memory_bytes: int | None = None  # overrides the profile's / host's usable memory
    target: str = "host"  # device profile whose memory the server may use
    threads: int | None = None
    max_waiting: int = 256
    verify: bool = True
    log_level: str = "info"
    insecure_no_auth: bool = False  # allow a non-loopback --host without an API key (auth.check_exposure)
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S  # connection_guard: request headers must arrive by then
    max_connections: int | None = None  # connection_guard: default min(512, half the descriptor limit)
    parse_special_in_content: bool = False  # chat text may contain control tokens (see ServerSettings)
    kv_type: str | None = None  # llama.cpp KV cache type (gguf only); None: the bundle's (server.sizing)
    prefix_cache: bool = True  # reuse the KV of cached prompt prefixes (--no-prefix-cache turns it off)
    warm_file: Path | None = None  # --warm: a system prompt whose KV is stored and loaded (prompt_store)
    kv_layout: str = "auto"  # llama.cpp (gguf) only: unified, streams, or auto (served_kv_layout)
    stream_interval_ms: float = 50.0  # streamed text at most this often when tokens come faster (engine.stream)
    responses_store_bytes: int = DEFAULT_STORE_BYTES  # stored /v1/responses (edgeopt.server.responses_store)
    speculative: str = "off"  # speculative decoding mode (edgeopt.engine.speculation): off, ngram, auto


def size_kv(bundle_dir: Path, manifest: Manifest, options: ServeOptions) -> KvSizing:
    """The bundle's KV sizing for these options: :func:`edgeopt.memory_budget.size_kv`, the planner's function,
    on the planner's memory pool; refused with the numbers when not even two tokens fit."""
    from profiles import load_profile

    profile = None if options.memory_bytes is not None else load_profile(options.target)
    facts = bundle_kv_facts(bundle_dir, manifest)
    # No --context: the model's own window, capped at DEFAULT_CONTEXT. Only an explicit value may be refused.
    context = options.context or min(facts.context_length, DEFAULT_CONTEXT)
    if context > facts.context_length:
        raise ConfigError(f"--context {context} is longer than the model's training context "
                          f"({facts.context_length} tokens)",
                          f"pass --context {facts.context_length} or less, or leave --context out to use "
                          f"{facts.context_length}")
    element_bytes = served_kv_element_bytes(manifest, served_kv_type(manifest, options.kv_type))
    sizing = memory_budget.size_kv(facts, memory_budget.memory_pool(profile, options.memory_bytes),
                                   kv_element_bytes=element_bytes, context=context,
                                   max_sequences=options.max_concurrency)
    return memory_budget.require_kv_room(sizing)


def load_served_model(bundle_dir: Path, manifest: Manifest, sizing: KvSizing | None,
                      options: ServeOptions) -> ServedModel:
    """Load the runtime sized by ``sizing`` and start an engine over it (runs in a worker thread).

    Embedding bundles (``sizing`` None) have no KV cache and no engine: the runtime alone serves them.
    """
    from runtimes import load_embedding_runtime, load_runtime

    if sizing is None:
        embedder = load_embedding_runtime(manifest.runtime, bundle_dir, manifest, threads=options.threads)
        return ServedModel(context_length=embedder.info.context_length, tokenizer=embedder.tokenizer,
                           embedder=embedder)
    kv_tokens, layout_option = runtime_kv_layout(manifest, options, sizing)
    runtime = load_runtime(manifest.runtime, bundle_dir, manifest, kv_capacity_tokens=kv_tokens,
                           max_slots=sizing.max_sequences, context_length=sizing.context_length,
                           threads=options.threads, **kv_type_option(manifest, options),
                           **layout_option,
                           **({} if options.prefix_cache else {"cache_slots": 0}))
    try:
        config = engine_config(runtime, sizing, options, kv_tokens)
        # A runtime that brings its own scheduler (torch on CUDA: transformers' paged continuous batching)
        # offers an engine with our Engine API; every other runtime runs under our engine.
        engine: ServingEngine = runtime.create_engine(config) or Engine(runtime, config)
        template = ChatTemplate.from_bundle(bundle_dir, manifest.chat_template, manifest.tokenizer_dir,
                                            manifest.export.get("special_tokens"))
    except BaseException:
        runtime.close()
        raise
    engine.start()
    if options.warm_file is not None:
        _warm(engine, runtime, manifest, template, options.warm_file)
    log.info("engine ready: %d KV tokens, %d concurrent sequences, context %d", config.kv_capacity_tokens,
             config.max_running, engine.context_tokens)
    return ServedModel(context_length=engine.context_tokens, tokenizer=runtime.tokenizer, engine=engine,
                       runtime=runtime, chat_template=template)


def kv_type_option(manifest: Manifest, options: ServeOptions) -> dict[str, str]:
    """The runtime option that carries the KV cache type, for runtimes that store more than one (llama.cpp)."""
    kv_type = served_kv_type(manifest, options.kv_type)
    return {"kv_type": kv_type} if kv_type else {}


KV_LAYOUT_CHOICES = ("auto", "unified", "streams")


def served_kv_layout(manifest: Manifest, options: ServeOptions, sizing: KvSizing | None) -> str:
    """The llama.cpp KV layout to serve with; ``auto``: :func:`edgeopt.kv_layout.auto_kv_layout` (streams when
    memory holds them: measured on a ~200M Q8_0 model at 16 streams, streams cost 0.90x unified's CPU per
    decode step and 0.75x with 4 idle cached 1,000-token prefixes, tests/bench/bench_step_cost.py)."""
    if options.kv_layout not in KV_LAYOUT_CHOICES:
        raise ConfigError(f"--kv-layout {options.kv_layout!r} is not a KV layout",
                          f"use one of {', '.join(KV_LAYOUT_CHOICES)}")
    if not backends.backend(manifest.format).kv_layouts:
        if options.kv_layout == "streams":
            raise ConfigError(f"--kv-layout streams applies to llama.cpp (GGUF) bundles; this one runs on "
                              f"{manifest.runtime}", "leave --kv-layout out for this bundle")
        return "unified"
    if options.kv_layout != "auto" or sizing is None:
        return "unified" if options.kv_layout == "auto" else options.kv_layout
    return auto_kv_layout(sizing.kv_fit_tokens, sizing.max_sequences, sizing.context_length, options.prefix_cache)


def runtime_kv_layout(manifest: Manifest, options: ServeOptions, sizing: KvSizing) -> tuple[int, dict[str, str]]:
    """The KV cells the runtime may allocate and the runtime option that carries the layout (only runtimes
    with a choice, llama.cpp, get one). Unified: the sized pool. Streams: every cell the memory budget holds
    (kv_fit_tokens), which the runtime splits into a context-long stream per slot and as many cached-prefix
    streams as remain (runtimes.llama_cpp.stream_layout), never more than it holds."""
    layout = served_kv_layout(manifest, options, sizing)
    tokens = sizing.kv_fit_tokens if layout == "streams" else sizing.kv_capacity_tokens
    return tokens, ({"kv_layout": layout} if backends.backend(manifest.format).kv_layouts else {})


def _warm(engine: ServingEngine, runtime: Runtime, manifest: Manifest, template: ChatTemplate | None,
          warm_file: Path) -> None:
    """--warm: put the system prompt's KV in the prefix cache (loaded from its saved state when it can)."""
    from edgeopt.server.prompt_state import warm_prompt_cache

    try:
        if not isinstance(engine, Engine) or not runtime.info.saves_prefix_state:
            raise ConfigError(f"--warm needs the prefix cache of a llama.cpp (GGUF) bundle; this is {manifest.runtime}"
                              f"{' with --no-prefix-cache' if runtime.info.cache_slots == 0 else ''}",
                              "serve a GGUF bundle with the prefix cache on, or leave --warm out")
        result = warm_prompt_cache(engine, runtime, manifest, template, runtime.tokenizer, warm_file)
    except BaseException:
        engine.shutdown()
        raise
    log.info("--warm %s: %d prompt tokens %s in %.2f s", warm_file, result.tokens, result.source, result.seconds)


def engine_config(runtime: Runtime, sizing: KvSizing, options: ServeOptions,
                  kv_tokens: int | None = None) -> EngineConfig:
    """The EngineConfig that matches the runtime (its batch buffer, see engine_config_for), bounded by our sizing."""
    info = runtime.info
    kv_tokens = sizing.kv_capacity_tokens if kv_tokens is None else kv_tokens  # what the runtime was offered
    return engine_config_for(runtime, kv_capacity_tokens=min(kv_tokens, info.kv_capacity_tokens),
                             max_running=min(sizing.max_sequences, info.max_slots), max_waiting=options.max_waiting,
                             context_length=min(sizing.context_length, info.context_length),
                             prefix_cache=options.prefix_cache, stream_interval_s=options.stream_interval_ms / 1000,
                             speculative=options.speculative)


def model_names(bundle_dir: Path, manifest: Manifest) -> tuple[str, ...]:
    """The bundle's directory name is the model id; the source model's id is accepted as an alias."""
    return bundle_model_names(bundle_dir, manifest)


def uvicorn_config(app: Any, options: ServeOptions) -> Any:
    """The uvicorn.Config that ``edgeopt serve`` runs (tests start their servers with it too)."""
    import uvicorn

    return uvicorn.Config(app, host=options.host, port=options.port, log_level=options.log_level,
                          timeout_graceful_shutdown=5, timeout_keep_alive=KEEP_ALIVE_S,
                          http=guarded_protocol(options.header_timeout_s, options.max_connections))


def serve_bundle(bundle_dir: Path, options: ServeOptions) -> None:
    """Serve a bundle directory, or a GGUF file where it lies (edgeopt.model_source), until interrupted
    (Ctrl-C / SIGTERM)."""
    import uvicorn

    from edgeopt.server.app import create_app

    api_key = options.api_key or os.environ.get("EDGEOPT_API_KEY") or None
    check_exposure(options.host, options.port, api_key, options.insecure_no_auth)
    if options.parse_special_in_content:  # an operator must be able to see from the log that this is off
        log.warning("--parse-special-in-content: control-token text in chat messages becomes control tokens, "
                    "so a user message can forge a system turn")
    source = open_model_source(bundle_dir, verify=options.verify)
    bundle_dir, manifest = source.bundle_dir, source.manifest
    kv_type = served_kv_type(manifest, options.kv_type)  # refuses --kv-type on onnx/torch before anything loads
    served_kv_layout(manifest, options, None)  # and --kv-layout streams
    kv_layout: str | None = None
    if manifest.kind == "causal-lm":
        sizing: KvSizing | None = size_kv(bundle_dir, manifest, options)
        if backends.backend(manifest.format).kv_layouts:  # a layout only where the runtime has a choice
            kv_layout = served_kv_layout(manifest, options, sizing)
        log.info("KV sizing (%s KV cache, %s layout): %s", kv_type, kv_layout or "the runtime's", sizing.to_dict())
        budget = sizing.usable_memory_bytes
    elif manifest.kind == "embedding":
        sizing, budget, kv_type = None, options.memory_bytes or 0, None
    else:
        raise ConfigError(f"bundle kind {manifest.kind!r} cannot be served", "servable kinds: causal-lm, embedding")
    settings = ServerSettings(model_names=source.names, kind=manifest.kind, api_key=api_key,
                              memory_budget_bytes=budget, parse_special_in_content=options.parse_special_in_content,
                              kv_type=kv_type, kv_layout=kv_layout,
                              responses_store_bytes=options.responses_store_bytes,
                              model_card=model_card(bundle_dir, manifest))
    failures: list[BaseException] = []
    server: uvicorn.Server | None = None

    def stop_on_load_error(exc: BaseException) -> None:
        failures.append(exc)
        if server is not None:
            server.should_exit = True

    app = create_app(settings, loader=lambda: load_served_model(bundle_dir, manifest, sizing, options),
                     on_load_error=stop_on_load_error)
    server = uvicorn.Server(uvicorn_config(app, options))
    server.run()
    if failures:
        raise failures[0]
