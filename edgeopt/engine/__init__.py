"""The serving core (pure Python + numpy; never imports torch or transformers).

Entry points: :class:`Engine` (continuous batching over a :class:`runtimes.base.Runtime`) and
:func:`kv_capacity_for` (KV cache sizing from memory).
"""

from edgeopt.engine.api import ActiveRequest, EngineConfig, EngineStats, RequestOutput, SamplingParams
from edgeopt.engine.engine import Engine
from edgeopt.engine.memory import KvSizing, kv_capacity_for
from edgeopt.engine.stream import RequestStream

__all__ = [
    "ActiveRequest", "Engine", "EngineConfig", "EngineStats", "KvSizing", "RequestOutput", "RequestStream",
    "SamplingParams", "kv_capacity_for",
]
