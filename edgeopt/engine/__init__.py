"""The serving core (pure Python + numpy; never imports torch or transformers).

Entry point: :class:`Engine` (continuous batching over a :class:`edgeopt.runtimes.base.Runtime`). The engine never
measures memory: it receives a KV capacity sized by :func:`edgeopt.sizing.budget.size_kv`.
"""

from edgeopt.engine.api import ActiveRequest, EngineConfig, EngineStats, RequestOutput, SamplingParams
from edgeopt.engine.engine import Engine
from edgeopt.engine.engine_config import engine_config_for
from edgeopt.engine.stream import RequestStream

__all__ = [
    "ActiveRequest", "Engine", "EngineConfig", "EngineStats", "RequestOutput", "RequestStream", "SamplingParams",
    "engine_config_for",
]
