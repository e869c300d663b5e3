"""``edgeopt serve``: bundle -> serving shape -> runtime -> engine -> FastAPI app -> uvicorn.

The serving shape (KV type, layout, cells, sequences, context, batch: :mod:`edgeopt.sizing.shape`) is
decided once, here, from the manifest's typed ``kv`` section and the operator's flags, and handed whole to
the runtime and the engine; nothing below works any of it out again.

Order matters for a good first minute: the manifest is read and the serving shape decided (cheap, so errors
such as "does not fit" appear before anything loads), uvicorn starts listening at once with /health
answering 503, and the runtime loads in a worker thread. A load failure stops the server and is
re-raised to the CLI, which prints it with its fix.

Nothing here imports torch or transformers: a GGUF bundle is served by llama.cpp alone.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt import backends
from edgeopt.store.bundle import Manifest
from edgeopt.engine import Engine, EngineConfig, engine_config_for
from edgeopt.engine.api import SHARED_NAMESPACE, ServingEngine
from edgeopt.engine.prefix_tree import OPERATOR_NAMESPACE
from edgeopt.errors import ConfigError
from edgeopt.planning import BundleSource, ServePlan, ServeRequest, plan_for
from edgeopt.sources.model_source import bundle_model_names, model_card, open_model_source
from edgeopt.runtimes.base import Runtime
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.startup.draft import DraftSetup, load_draft, plan_with_draft
from edgeopt.server.http.connection_guard import guarded_protocol
from edgeopt.server.models.compute_gate import ComputeGate
from edgeopt.server.state import ServedModel, ServerSettings
from edgeopt.server.startup.serve_options import ServeOptions, server_keys, serves_with_keys
from edgeopt.sizing.budget import MIB
from edgeopt.sizing.resident import ResidentMemory, resident_memory
from edgeopt.sizing.shape import ServingShape, check_shape_request

if TYPE_CHECKING:
    from edgeopt.runtimes.llama_cpp.rpc import RpcOffload
    from edgeopt.runtimes.llama_cpp.kept_models import KeptModels
    from edgeopt.server.startup.early_load import EarlyLoad

log = logging.getLogger("edgeopt.server")
INHERITED_SOCKET_ENV = "EDGEOPT_SERVE_FD"  # set by edgeopt.rpc.supervisor for the server it runs
KEEP_ALIVE_S = 5  # uvicorn's default: an idle keep-alive connection is closed 5 s after its last response


def serving_shape(bundle_dir: Path, manifest: Manifest, options: ServeOptions) -> ServingShape:
    """The bundle's serving shape for these options (the planner's, edgeopt.planning)."""
    shape = served_plan(bundle_dir, manifest, options).shape
    assert shape is not None, f"{manifest.kind} bundles have no serving shape"
    return shape


def served_plan(bundle_dir: Path, manifest: Manifest, options: ServeOptions) -> ServePlan:
    return plan_for(BundleSource(bundle_dir, manifest), options.target,
                    ServeRequest(options.shape_request(), options.memory_bytes))


def load_served_model(bundle_dir: Path, manifest: Manifest, shape: ServingShape | None,
                      options: ServeOptions, offload: RpcOffload | None = None,
                      gate: ComputeGate | None = None, draft: DraftSetup | None = None,
                      early: EarlyLoad | None = None, kept: KeptModels | None = None) -> ServedModel:
    """Load the runtime in ``shape`` and start an engine over it (runs in a worker thread).

    Embedding and rerank bundles (``shape`` None) have no KV cache and no engine: the runtime alone serves them.
    ``gate``: a server of several models computes one model at a time (edgeopt.server.models.compute_gate).
    ``draft``: the draft model (--draft) the engine speculates with.
    ``early``: the GGUF's model already loading since the command started (edgeopt.server.startup.early_load).
    ``kept``: llama.cpp models unloaded earlier, kept for a swap back (runtimes/llama_cpp/kept_models.py).
    """
    from edgeopt.runtimes import load_embedding_runtime, load_rerank_runtime, load_runtime

    if shape is None and options.chat_template is not None:
        raise ConfigError(f"--chat-template formats chats; {bundle_dir} is a {manifest.kind} model, which does "
                          "not chat", "drop --chat-template")
    if shape is None and manifest.kind == "rerank":
        reranker = load_rerank_runtime(manifest.runtime, bundle_dir, manifest, threads=options.threads)
        return ServedModel(context_length=reranker.info.context_length, tokenizer=reranker.tokenizer,
                           reranker=gate.reranker(reranker) if gate is not None else reranker)
    if shape is None:
        embedder = load_embedding_runtime(manifest.runtime, bundle_dir, manifest, threads=options.threads)
        return ServedModel(context_length=embedder.info.context_length, tokenizer=embedder.tokenizer,
                           embedder=gate.embedder(embedder) if gate is not None else embedder)
    split = {"offload": offload} if offload is not None else {}
    split |= {"early_model": early} if early is not None else {}
    split |= {"kept_models": kept} if kept is not None and manifest.runtime == "llama_cpp" else {}
    runtime = load_runtime(manifest.runtime, bundle_dir, manifest, threads=options.threads,
                           **shape.runtime_options(), **split)
    try:
        config = engine_config(runtime, shape, options)
        draft_model = (load_draft(draft, runtime, bundle_dir / manifest.model_file, options.threads)
                       if draft is not None else None)
        stepped = gate.runtime(runtime) if gate is not None else runtime
        engine = own_engine(manifest.format, runtime, config) or Engine(stepped, config, draft_model)
        template = ChatTemplate.from_bundle(bundle_dir, options.chat_template or manifest.chat_template,
                                            manifest.tokenizer_dir,
                                            manifest.export.get("special_tokens"))
    except BaseException:
        runtime.close()
        raise
    engine.start()
    if options.warm_file is not None:
        # With keys every request is a tenant's, reading the operator's entries beside its own: the warmed prompt
        # goes there. Without, it stays in the one shared namespace, where chats on it fold into its entry.
        namespace = OPERATOR_NAMESPACE if serves_with_keys(options) else SHARED_NAMESPACE
        _warm(engine, runtime, manifest, template, options.warm_file, namespace)
    log.info("engine ready: %d KV tokens, %d concurrent sequences, context %d", config.kv_capacity_tokens,
             config.max_running, engine.context_tokens)
    return ServedModel(context_length=engine.context_tokens, tokenizer=runtime.tokenizer, engine=engine,
                       runtime=runtime, chat_template=template)


def own_engine(fmt: str, runtime: Runtime, config: EngineConfig) -> ServingEngine | None:
    """The engine a runtime brings with its own scheduler (torch on CUDA: transformers' paged continuous
    batching, with our Engine's API), named by the format's backend entry; None: our Engine drives it."""
    target = backends.backend(fmt).serving.own_engine
    return backends.load_attr(target)(runtime, config) if target else None


def _warm(engine: ServingEngine, runtime: Runtime, manifest: Manifest, template: ChatTemplate | None,
          warm_file: Path, namespace: str) -> None:
    """--warm: put the system prompt's KV in the prefix cache (loaded from its saved state when it can)."""
    from edgeopt.server.startup.prompt_state import warm_prompt_cache

    try:
        if not runtime.info.saves_prefix_state:
            raise ConfigError(f"--warm needs the prefix cache of a llama.cpp (GGUF) bundle; this is {manifest.runtime}"
                              f"{' with --no-prefix-cache' if runtime.info.cache_slots == 0 else ''}",
                              "serve a GGUF bundle with the prefix cache on, or leave --warm out")
        result = warm_prompt_cache(engine, runtime, manifest, template, runtime.tokenizer, warm_file, namespace)
    except BaseException:
        engine.shutdown()
        raise
    log.info("--warm %s: %d prompt tokens %s in %.2f s", warm_file, result.tokens, result.source, result.seconds)


def engine_config(runtime: Runtime, shape: ServingShape, options: ServeOptions) -> EngineConfig:
    """The EngineConfig that matches the runtime (its batch buffer, see engine_config_for), bounded by the shape."""
    info = runtime.info
    return engine_config_for(runtime, kv_capacity_tokens=min(shape.kv_cells, info.kv_capacity_tokens),
                             max_running=min(shape.max_sequences, info.max_slots), max_waiting=options.max_waiting,
                             context_length=min(shape.context_length, info.context_length),
                             prefix_cache=shape.prefix_cache, stream_interval_s=options.stream_interval_ms / 1000,
                             speculative=options.speculative)


def model_names(bundle_dir: Path, manifest: Manifest) -> tuple[str, ...]:
    """The bundle's directory name is the model id; the source model's id is accepted as an alias."""
    return bundle_model_names(bundle_dir, manifest)


def uvicorn_config(app: Any, options: ServeOptions) -> Any:
    """The uvicorn.Config that ``edgeopt serve`` runs (tests start their servers with it too)."""
    import uvicorn

    # ws="none": no route is a WebSocket, and uvicorn's "auto" imports the websockets package (resident memory)
    return uvicorn.Config(app, host=options.host, port=options.port, log_level=options.log_level,
                          timeout_graceful_shutdown=5, timeout_keep_alive=KEEP_ALIVE_S, ws="none",
                          http=guarded_protocol(options.header_timeout_s, options.max_connections))


def inherited_sockets() -> list[socket.socket] | None:
    """The socket a supervised server (edgeopt.rpc.supervisor) serves: the one its supervisor bound and keeps,
    for ``uvicorn.Server.run(sockets=...)``; None otherwise (uvicorn binds --host/--port). Not uvicorn's
    ``Config(fd=...)``: that takes every descriptor for a Unix socket, so TCP_NODELAY was never set and each
    stream's first token waited in the kernel for the next write (Nagle): 20 ms more TTFT on a split model."""
    inherited_fd = os.environ.get(INHERITED_SOCKET_ENV)
    return [socket.socket(fileno=int(inherited_fd))] if inherited_fd else None


def shape_line(shape: ServingShape, resident: ResidentMemory) -> str:
    """The start line: KV cells by purpose and the resident memory `edgeopt plan` promises for this shape."""
    per_token = shape.sizing.kv_bytes_per_token
    return (f"KV cells: {shape.kv_live_cells} for {shape.max_sequences} live sequences of {shape.context_length} "
            f"tokens ({shape.kv_live_cells * per_token / MIB:.0f} MiB), {shape.kv_prefix_cells} for cached prefixes "
            f"only ({shape.kv_prefix_cells * per_token / MIB:.0f} MiB; --prefix-cache-memory sets it); planned "
            f"resident {resident.total_bytes / MIB:.0f} MiB (edgeopt plan)")


def serve_bundle(bundle_dir: Path, options: ServeOptions, early: EarlyLoad | None = None) -> None:
    """Serve a bundle directory, or a GGUF file where it lies (edgeopt.sources.model_source), until interrupted
    (Ctrl-C / SIGTERM). ``early``: its model, loading since the command started (early_load.py)."""
    import uvicorn

    from edgeopt.server.app import create_app
    from edgeopt.server.startup.heap_tuning import keep_freed_heap

    api_key, admin_key = server_keys(options)
    source = open_model_source(bundle_dir, verify=options.verify)
    bundle_dir, manifest = source.bundle_dir, source.manifest
    keep_freed_heap()  # before the first step allocates
    shape: ServingShape | None = None
    offload: RpcOffload | None = None
    draft: DraftSetup | None = None
    if options.draft is not None and (manifest.kind != "causal-lm" or options.workers):
        raise ConfigError(f"--draft drafts for one causal LM served alone; this is a {manifest.kind} bundle"
                          f"{' split across --workers' if options.workers else ''}", "leave --draft out")
    resident: ResidentMemory | None = None
    if manifest.kind == "causal-lm" and options.workers:  # split across llama.cpp RPC workers
        from edgeopt.rpc.head import prepare_split

        split = prepare_split(bundle_dir, manifest, options.shape_request(), options.workers, options.memory_bytes,
                              options.target)
        shape, offload = split.shape, split.offload
        resident = resident_memory(backends.backend(manifest.format), shape)
        kv_type, kv_layout, budget = shape.kv_type, shape.kv_layout, shape.sizing.usable_memory_bytes
    elif manifest.kind == "causal-lm":
        if options.draft is not None:
            shape, draft = plan_with_draft(bundle_dir, manifest, options.shape_request(), options.draft,
                                           options.draft_tokens, options.memory_bytes, options.target, options.verify)
            resident = resident_memory(backends.backend(manifest.format), shape)
        else:
            planned = served_plan(bundle_dir, manifest, options)
            shape, resident = planned.shape, planned.resident
            assert shape is not None  # a causal LM has a KV cache
        kv_type, kv_layout, budget = shape.kv_type, shape.kv_layout, shape.sizing.usable_memory_bytes
        log.info("KV sizing (%s KV cache, %s layout): %s", kv_type, kv_layout or "the runtime's",
                 shape.sizing.to_dict())
        log.info(shape_line(shape, resident))
    elif manifest.kind in ("embedding", "rerank") and options.workers:
        raise ConfigError("--workers splits a causal LM across llama.cpp RPC workers; this bundle is an encoder",
                          "leave --workers out")
    elif manifest.kind in ("embedding", "rerank"):
        # --kv-type and --kv-layout streams are refused here too (an encoder's runtime has neither)
        entry = backends.backend(manifest.format)
        check_shape_request(entry, options.shape_request())
        kv_type, kv_layout, budget = None, None, options.memory_bytes or 0
    else:
        raise ConfigError(f"bundle kind {manifest.kind!r} cannot be served",
                          "servable kinds: causal-lm, embedding, rerank")
    settings = ServerSettings(model_names=source.names, kind=manifest.kind, api_key=api_key,
                              api_keys=dict(options.api_keys), admin_key=admin_key,
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

    app = create_app(settings, loader=lambda: load_served_model(bundle_dir, manifest, shape, options, offload, draft=draft,
                                                                early=early),
                     on_load_error=stop_on_load_error)
    if shape is not None and resident is not None:
        app.state.server.metrics.describe_shape(shape.kv_live_cells, shape.kv_prefix_cells, resident.total_bytes)
    if offload is not None:  # each worker's memory and round trip on /metrics, and a heartbeat
        from edgeopt.rpc.lost_worker import LostWorker
        from edgeopt.rpc.metrics import WorkerWatch

        state = app.state.server
        lost = LostWorker(offload.endpoints, lambda: state.served.engine if state.served is not None else None)
        lost.install()  # a lost worker ends the requests in flight with an in-band error, then the head
        watch = WorkerWatch(offload, lambda: state.served is not None, options.worker_timeout_s, lost.head_lost)
        state.metrics.registry.register(watch)
        watch.start_heartbeat()
    server = uvicorn.Server(uvicorn_config(app, options))
    server.run(sockets=inherited_sockets())
    if failures:
        raise failures[0]
