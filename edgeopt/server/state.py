"""What one running server holds: its settings, the loaded model (once ready) and its metrics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from edgeopt.engine.api import EngineStats, ServingEngine
from edgeopt.engine.grammar import GrammarCompiler
from edgeopt.engine.outputs import engine_stopped_message
from edgeopt.errors import ConfigError, ModelNameError, NotReadyError
from edgeopt.runtimes.base import EmbeddingRuntime, RerankRuntime, Runtime, Tokenizer
from edgeopt.runtimes.control_text import ControlTextFinder
from edgeopt.server.chat.reasoning.syntax import ReasoningFormat, reasoning_format
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.embedding_batcher import EmbeddingBatcher
from edgeopt.server.metrics import ServerMetrics
from edgeopt.server.prompt_worker import PromptWorker
from edgeopt.server.rerank_batcher import RerankBatcher
from edgeopt.server.text_fields import quoted

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_STORE_BYTES = 32 * 1024 * 1024  # edgeopt serve --responses-store (its default: 32MiB)


@dataclass(frozen=True)
class ServerSettings:
    model_names: tuple[str, ...]  # first: the id /v1/models shows; the others are accepted aliases
    kind: str = "causal-lm"  # manifest.kind: picks each face's routers (face.py)
    api_key: str | None = None  # --api-key: one tenant behind a key (edgeopt.server.callers has the rule)
    api_keys: Mapping[str, str] = field(default_factory=dict)  # --api-keys: caller name -> key
    admin_key: str | None = None  # --admin-key: sees request ids, empties the prefix cache
    memory_budget_bytes: int = 0
    # A request body is parsed in memory before anything else can refuse it; cap it.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # False (default): control-token text inside chat messages is tokenized as plain text, so a user
    # cannot forge a system turn; True restores the old behaviour (edgeopt serve --parse-special-in-content).
    parse_special_in_content: bool = False
    # The KV cache the launcher chose (shown in /metrics as edgeopt_kv_cache_info): its element type
    # (edgeopt.sizing.kv_types) and, where the runtime has a choice (llama.cpp), its layout; None: not known.
    kv_type: str | None = None
    kv_layout: str | None = None
    # What the model is, for APIs that describe it (Ollama's /api/tags, /api/show): format, quant,
    # architecture, weights_bytes, digest (sha256 of the model file), parameters; {}: unknown.
    model_card: Mapping[str, Any] = field(default_factory=dict)
    # Bytes of stored /v1/responses kept for previous_response_id and GET (edgeopt.server.responses.store).
    responses_store_bytes: int = DEFAULT_STORE_BYTES

    @property
    def has_keys(self) -> bool:
        return bool(self.api_key or self.api_keys or self.admin_key)

    @property
    def kv_labels(self) -> dict[str, str]:
        return {name: value for name, value in (("kv_type", self.kv_type), ("layout", self.kv_layout)) if value}


@dataclass
class ServedModel:
    """A loaded model ready to answer: the engine over its runtime (causal LMs), an embedding runtime, or a
    cross-encoder (rerank bundles)."""

    context_length: int
    tokenizer: Tokenizer
    engine: ServingEngine | None = None  # already started
    runtime: Runtime | None = None  # the runtime the engine was created from
    chat_template: ChatTemplate | None = None
    embedder: EmbeddingRuntime | None = None  # embedding models: no engine, no KV
    reranker: RerankRuntime | None = None  # cross-encoders: no engine, no KV

    def require_embedder(self) -> EmbeddingRuntime:
        if self.embedder is None:
            raise ConfigError("this model does not produce embeddings", "serve an embedding bundle for /v1/embeddings")
        return self.embedder

    @cached_property
    def embedding_batcher(self) -> EmbeddingBatcher:
        """Runs concurrent /v1/embeddings requests together (created on first use)."""
        return EmbeddingBatcher(self.require_embedder())

    def require_reranker(self) -> RerankRuntime:
        if self.reranker is None:
            raise ConfigError("this model does not rerank", "serve a rerank (cross-encoder) bundle for /v1/rerank")
        return self.reranker

    @cached_property
    def rerank_batcher(self) -> RerankBatcher:
        """Runs concurrent /v1/rerank requests together (created on first use)."""
        return RerankBatcher(self.require_reranker())

    @cached_property
    def control_text(self) -> ControlTextFinder:
        """Where the tokenizer's control-token texts occur in a string (built once per model)."""
        return ControlTextFinder(self.tokenizer.control_token_texts())

    @cached_property
    def reasoning(self) -> ReasoningFormat | None:
        """How this model thinks before answering, read from its chat template (None: it does not)."""
        return reasoning_format(self.chat_template)

    @cached_property
    def grammars(self) -> GrammarCompiler:
        """Compiles response_format schemas and tool-call grammars for this model's vocabulary."""
        return GrammarCompiler(self.runtime.tokenizer, self.runtime.info)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()  # stops the engine thread, then closes the runtime it drives
        elif self.runtime is not None:
            self.runtime.close()
        if self.embedder is not None:
            self.embedder.close()
        if self.reranker is not None:
            self.reranker.close()


class ServerState:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.served: ServedModel | None = None
        self.load_error: str | None = None
        self.created = int(time.time())
        self.metrics = ServerMetrics(self.engine_stats, settings.memory_budget_bytes, settings.kv_labels)
        self.prompt_worker = PromptWorker()  # rendering and tokenizing, off the event loop
        # What a face keeps for the server's lifetime, under its own key (the Responses store)
        self.face_state: dict[str, object] = {}

    @property
    def model_id(self) -> str:
        return self.settings.model_names[0]

    def model(self, name: str) -> ServedModel:
        """The served model a request names, ready to answer (the one model, by its id or an alias)."""
        if name not in self.settings.model_names:
            raise ModelNameError(f"model {quoted(name)} is not served here", f"use model={self.model_id!r} "
                                 "(GET /v1/models lists it)", param="model")
        return self.ready_model()

    def ready_model(self) -> ServedModel:
        if self.served is not None:
            problem = self.engine_problem()
            if problem is not None:
                raise NotReadyError(problem, "restart the server; the cause is in its log")
            return self.served
        if self.load_error:
            raise NotReadyError(f"the model failed to load: {self.load_error}", "see the server log")
        raise NotReadyError("the model is still loading", "retry when GET /health returns 200")

    def engine_problem(self) -> str | None:
        """Why a loaded model cannot generate (its engine thread is gone), or None when it can."""
        engine = self.served.engine if self.served else None
        if engine is None or engine.is_running:
            return None
        return engine_stopped_message(engine.failure)

    def engine_stats(self) -> EngineStats | None:
        engine = self.served.engine if self.served else None
        return engine.stats() if engine is not None else None
