"""What ``edgeopt serve`` is asked: its flags as one frozen value (:class:`ServeOptions`), the serving shape they ask
for, and the API keys they (or the environment) give once the exposure they allow is checked."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from edgeopt.rpc.endpoints import Endpoint
from edgeopt.server.http.auth import check_exposure
from edgeopt.server.http.connection_guard import DEFAULT_HEADER_TIMEOUT_S
from edgeopt.server.models.keep_alive import DEFAULT_KEEP_ALIVE_S
from edgeopt.server.state import DEFAULT_STORE_BYTES
from edgeopt.sizing.layout import AUTO
from edgeopt.sizing.shape import ShapeRequest
from edgeopt.speculation_modes import DEFAULT_DRAFT_TOKENS, DEFAULT_MODE, longest_draft

log = logging.getLogger("edgeopt.server")


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    api_keys: Mapping[str, str] = field(default_factory=dict)  # --api-keys: a key per caller (server.callers)
    admin_key: str | None = None  # --admin-key: the operator's (request ids, emptying the prefix cache)
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
    kv_type: str | None = None  # llama.cpp KV cache type (gguf only); None: the bundle's (edgeopt.sizing.shape)
    prefix_cache: bool = True  # reuse the KV of cached prompt prefixes (--no-prefix-cache turns it off)
    warm_file: Path | None = None  # --warm: a system prompt whose KV is stored and loaded (prompt_store)
    kv_layout: str = AUTO  # llama.cpp (gguf) only: unified, streams, or auto (edgeopt.sizing.layout)
    flash_attention: str = AUTO  # llama.cpp (gguf) only: auto, on, off (edgeopt.sizing.attention)
    stream_interval_ms: float = 50.0  # streamed text at most this often when tokens come faster (engine.stream)
    responses_store_bytes: int = DEFAULT_STORE_BYTES  # stored /v1/responses (edgeopt.server.responses.store)
    speculative: str = DEFAULT_MODE  # speculative decoding mode (edgeopt.engine.speculation): off, ngram, auto, draft
    workers: tuple[Endpoint, ...] = ()  # llama.cpp RPC workers the model is split across (edgeopt.rpc.head)
    worker_timeout_s: float = 60.0  # a worker silent this long is dead (edgeopt.rpc.metrics.WorkerWatch)
    prefix_cache_bytes: int | None = None  # --prefix-cache-memory: KV for cached prefixes (edgeopt.sizing.shape)
    # Several models (edgeopt.server.startup.launch_many): idle unload, models kept loaded, prefix caches on disk
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S
    pins: tuple[str, ...] = ()
    swap_space_bytes: int = 0
    draft: Path | None = None  # --draft: a draft model for speculative decoding (edgeopt.server.startup.draft)
    draft_tokens: int = DEFAULT_DRAFT_TOKENS  # --draft-tokens: tokens it drafts a step
    chat_template: str | None = None  # --chat-template: a Jinja chat template's text, used instead of the model's

    def shape_request(self) -> ShapeRequest:
        return ShapeRequest(context=self.context, max_sequences=self.max_concurrency, kv_type=self.kv_type,
                            kv_layout=self.kv_layout, prefix_cache=self.prefix_cache,
                            flash_attention=self.flash_attention,
                            prefix_cache_bytes=self.prefix_cache_bytes,
                            draft_rows=longest_draft(self.speculative,
                                                     self.draft_tokens if self.draft is not None else None))


def _flag_or_environment_keys(options: ServeOptions) -> tuple[str | None, str | None]:
    return (options.api_key or os.environ.get("EDGEOPT_API_KEY") or None,
            options.admin_key or os.environ.get("EDGEOPT_ADMIN_KEY") or None)


def serves_with_keys(options: ServeOptions) -> bool:
    """Whether any key is configured: then every request is a caller's (edgeopt.server.http.callers)."""
    return any(_flag_or_environment_keys(options)) or bool(options.api_keys)


def server_keys(options: ServeOptions) -> tuple[str | None, str | None]:
    """(API key, admin key), from the flags or the environment, once the exposure they allow is checked."""
    api_key, admin_key = _flag_or_environment_keys(options)
    check_exposure(options.host, options.port, api_key or admin_key or next(iter(options.api_keys.values()), None),
                   options.insecure_no_auth)
    if not (api_key or admin_key or options.api_keys):
        log.info("no API key: one tenant. Every client shares the stored responses and sees every request id on "
                 "/v1/edgeopt/requests (--api-keys FILE gives each caller its own; docs/api.md)")
    if options.parse_special_in_content:  # an operator must be able to see from the log that this is off
        log.warning("--parse-special-in-content: control-token text in chat messages becomes control tokens, "
                    "so a user message can forge a system turn")
    return api_key, admin_key


