"""A loaded model ready to answer: its engine (causal LMs), embedding runtime or cross-encoder, and what the
API faces derive from it once (its grammar compiler, reasoning format, control-token finder)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from edgeopt.engine.api import ServingEngine
from edgeopt.engine.grammar import GrammarCompiler
from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import EmbeddingRuntime, RerankRuntime, Runtime, Tokenizer
from edgeopt.runtimes.control_text import ControlTextFinder
from edgeopt.server.chat.reasoning.syntax import ReasoningFormat, reasoning_format
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.batching.embedding_batcher import EmbeddingBatcher
from edgeopt.server.batching.rerank_batcher import RerankBatcher


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
    name: str = ""  # the model's name on this server (set when it is loaded), the label of its metrics

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

    def after_ready(self) -> None:
        """It answers requests now: its runtime may start what it left off the load's path (Runtime.after_ready)."""
        if self.runtime is not None:
            self.runtime.after_ready()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()  # stops the engine thread, then closes the runtime it drives
        elif self.runtime is not None:
            self.runtime.close()
        if self.embedder is not None:
            self.embedder.close()
        if self.reranker is not None:
            self.reranker.close()
