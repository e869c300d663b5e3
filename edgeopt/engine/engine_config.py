"""The engine's configuration against the runtime it drives: the config that uses all of a runtime, and
the check that a given config fits it (both engines share them)."""

from __future__ import annotations

from typing import Any

from edgeopt.engine.api import DEFAULT_PREFILL_CHUNK, EngineConfig
from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import Runtime
from edgeopt.speculation_modes import check_mode


def engine_config_for(runtime: Runtime, **overrides: Any) -> EngineConfig:
    """The EngineConfig that uses all of ``runtime``: its KV cells, every slot, its context; a runtime with a
    fixed batch buffer also bounds the tokens per step (and the prefill chunk) by it. ``overrides`` win."""
    info = runtime.info
    values: dict[str, Any] = dict(kv_capacity_tokens=info.kv_capacity_tokens, max_running=info.max_slots,
                                  context_length=info.context_length)
    if runtime.max_batch_tokens is not None:
        values.update(step_token_budget=runtime.max_batch_tokens,
                      prefill_chunk=min(DEFAULT_PREFILL_CHUNK, runtime.max_batch_tokens))
    return EngineConfig(**(values | overrides))


def check_config(config: EngineConfig, runtime: Runtime) -> None:
    info = runtime.info
    problems = [
        (config.max_running <= info.max_slots, "max_running", config.max_running, f"<= runtime slots ({info.max_slots})"),
        (config.max_running >= 1, "max_running", config.max_running, ">= 1"),
        (0 < config.kv_capacity_tokens <= info.kv_capacity_tokens, "kv_capacity_tokens", config.kv_capacity_tokens,
         f"in 1..{info.kv_capacity_tokens} (the runtime's KV cells)"),
        (config.step_token_budget >= config.max_running, "step_token_budget", config.step_token_budget,
         f">= max_running ({config.max_running}) so every running sequence can decode each step"),
        (config.prefill_chunk >= 1, "prefill_chunk", config.prefill_chunk, ">= 1"),
        (config.max_waiting >= 0, "max_waiting", config.max_waiting, ">= 0"),
        (config.context_length >= 2, "context_length", config.context_length, ">= 2"),
        (config.stream_interval_s >= 0, "stream_interval_s", config.stream_interval_s, ">= 0"),
    ]
    check_mode(config.speculative)
    max_batch = runtime.max_batch_tokens  # runtimes with a fixed batch buffer
    if max_batch is not None:
        problems.append((config.step_token_budget <= max_batch, "step_token_budget", config.step_token_budget,
                         f"<= the runtime's batch size ({max_batch})"))
    for ok, name, value, rule in problems:
        if not ok:
            raise ConfigError(f"engine {name}={value} is invalid", f"it must be {rule}")
