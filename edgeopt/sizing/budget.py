"""KV sizing: the one function (:func:`size_kv`) that the planner, ``edgeopt serve`` and every runtime's
sizes come from, on the one memory pool (:func:`memory_pool`), so that a plan that fits also serves.

    KV bytes/token = 2 (K and V) x layers x kv_heads x head_dim x bytes(KV element)
    budget         = pool x (1 - safety margin) - weights - runtime overhead
    runtime overhead = the runtime's fixed cost + what grows with the model's vocabulary and width
                       + its logits rows for every sequence asked for (edgeopt.backends.Backend)
    fits           = budget // KV bytes/token          (tokens, shared by all sequences)
    capacity       = fits, capped at max_sequences x context (no use holding more)

The pool: an explicit ``--memory``; else a device profile's memory, which on a discrete CUDA GPU is
the GPU's (weights and KV are offloaded there: llama.cpp puts every layer on a CUDA device, torch
runs on it) and on a unified-memory board (Jetson) is the one shared pool, counted once.

Runtimes receive these sizes; they never compute them. Dependency-free beyond the model's shape and
the profiles: the serving path calls it, and must not import exporters or passes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from edgeopt.errors import ConfigError, DoesNotFitError
from edgeopt.profiles import DeviceProfile, load_profile

if TYPE_CHECKING:  # profiles imports backends (through edgeopt.sizing.kv_types)
    from edgeopt.backends import Backend

MIB = 1024**2
SAFETY_MARGIN = 0.05  # of usable memory, for fragmentation and the Python process itself
DEFAULT_MAX_SEQUENCES = 16  # concurrent streams the server targets; preemption covers bursts beyond KV
MIN_TOKENS_PER_SEQUENCE = 256  # do not admit more sequences than can each hold this much KV


def kv_elements_per_token(layers: int, kv_heads: int, head_dim_k: int, head_dim_v: int | None = None) -> int:
    """Cached elements one token costs: K and V rows of every KV head of every layer."""
    return layers * kv_heads * (head_dim_k + (head_dim_k if head_dim_v is None else head_dim_v))


def kv_bytes_per_token(elements_per_token: int, element_bytes: float) -> int:
    """Bytes of KV one token costs; ``element_bytes`` may be fractional (a q8_0 block: 34 bytes / 32)."""
    return math.ceil(elements_per_token * element_bytes)


def after_margin(usable_bytes: int) -> int:
    """Usable memory less the safety margin: what weights, runtime and KV may share."""
    return usable_bytes - int(usable_bytes * SAFETY_MARGIN)


@dataclass(frozen=True)
class MemoryPool:
    bytes: int
    source: str  # "--memory", "profile <name>", "profile <name> (GPU memory)" or "host"


def memory_pool(profile: DeviceProfile | None = None, memory_bytes: int | None = None) -> MemoryPool:
    """The memory weights, runtime and KV share, by the one rule plan and serve both follow."""
    if memory_bytes is not None:
        if memory_bytes <= 0:
            raise ConfigError(f"--memory={memory_bytes} bytes is invalid", "pass a positive size such as 4GiB")
        return MemoryPool(memory_bytes, "--memory")
    if profile is None:
        return MemoryPool(load_profile("host").usable_memory_bytes, "host")
    offloaded = profile.platform.offload_memory_bytes  # a discrete CUDA GPU's own memory; 0: the CPU's
    if offloaded > 0:
        return MemoryPool(offloaded, f"profile {profile.name} (GPU memory)")
    return MemoryPool(profile.usable_memory_bytes, f"profile {profile.name}")


@dataclass(frozen=True)
class KvFacts:
    """What sizing needs to know about a model in a format: a few numbers, no model file."""

    weights_bytes: int
    kv_elements_per_token: int  # 0 for an encoder: it keeps no KV cache
    context_length: int  # the model's own window
    runtime_overhead_bytes: int  # Backend.model_overhead_bytes
    runtime_bytes_per_sequence: int = 0  # Backend.logits_bytes_per_sequence: counted for every sequence asked for
    kv_copies: float = 1.0  # Backend.kv_resident_copies: resident bytes of a KV cell, in cells
    prompt_kv_copies: float = 0.0  # Backend.prompt_kv_copies: the longest sequence's KV held this many times more
    attention_heads: int = 0  # query heads: plain attention's score buffer (edgeopt.sizing.attention); 0: unknown

    def overhead_bytes(self, sequences: int, context: int = 0, kv_bytes_per_token: int = 0) -> int:
        """The runtime's memory beside weights and KV when ``sequences`` sequences of ``context`` tokens are asked
        for (``context`` and ``kv_bytes_per_token`` matter to runtimes that copy a prompt's KV: prompt_kv_copies)."""
        prompt_copies = math.ceil(self.prompt_kv_copies * context * kv_bytes_per_token)
        return self.runtime_overhead_bytes + sequences * self.runtime_bytes_per_sequence + prompt_copies


def model_kv_facts(entry: Backend, *, vocab_size: int, intermediate_size: int, weights_bytes: int,
                   kv_elements_per_token: int, context_length: int, hidden_size: int = 0,
                   tied_embeddings: bool = False, attention_heads: int = 0) -> KvFacts:
    """What sizing needs of a model in ``entry``'s format: its weights and KV shape as given, and the
    runtime's memory for the model's vocabulary and feed-forward width, and for what it builds from the file
    (``hidden_size`` and ``tied_embeddings``: the vocabulary table's size and whether the output reads it)."""
    built = runtime_weights_extra(entry, weights_bytes, vocab_size, hidden_size, tied_embeddings)
    return KvFacts(weights_bytes=weights_bytes, kv_elements_per_token=kv_elements_per_token,
                   context_length=context_length,
                   runtime_overhead_bytes=entry.model_overhead_bytes(vocab_size, intermediate_size) + built,
                   runtime_bytes_per_sequence=entry.logits_bytes_per_sequence(vocab_size),
                   kv_copies=entry.memory.kv_resident_copies, prompt_kv_copies=entry.memory.prompt_kv_copies,
                   attention_heads=attention_heads)


def runtime_weights_extra(entry: Backend, weights_bytes: int, vocab_size: int, hidden_size: int,
                          tied_embeddings: bool) -> int:
    """Bytes ``entry``'s runtime builds from the model file beyond the file's own (0 for a runtime that maps it)."""
    if not entry.memory.weights_extra:
        return 0
    from edgeopt.backends import load_attr

    return int(load_attr(entry.memory.weights_extra)(weights_bytes, vocab_size, hidden_size, tied_embeddings))


@dataclass(frozen=True)
class KvSizing:
    memory_source: str
    usable_memory_bytes: int
    weights_bytes: int
    overhead_bytes: int
    margin_bytes: int
    kv_bytes_per_token: int
    kv_budget_bytes: int  # negative when the weights and runtime alone do not fit
    kv_fit_tokens: int  # every token the budget holds
    kv_capacity_tokens: int  # what to allocate: kv_fit_tokens capped at max_sequences x context_length
    max_sequences: int
    context_length: int  # the request limit: the requested context, lowered to what fits
    kv_copies: float = 1.0  # resident bytes of a KV cell in cells (KvFacts.kv_copies): the budget divides by it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def size_kv(facts: KvFacts, memory: MemoryPool, *, kv_element_bytes: float, context: int,
            max_sequences: int | None = None) -> KvSizing:
    """Size the KV cache of ``facts`` in ``memory`` at ``kv_element_bytes`` per cached element.

    ``max_sequences`` None: as many sequences (up to DEFAULT_MAX_SEQUENCES) as can each hold a fair share
    (MIN_TOKENS_PER_SEQUENCE or the context) of the cache. Never raises for lack of room: the planner
    reports it, and a server calls :func:`require_kv_room`.
    """
    if facts.weights_bytes < 0 or facts.kv_elements_per_token < 0 or context < 1 or kv_element_bytes <= 0:
        raise ConfigError(f"weights_bytes={facts.weights_bytes}, kv_elements_per_token={facts.kv_elements_per_token}, "
                          f"context={context}, kv_element_bytes={kv_element_bytes} are invalid",
                          "these come from the model's config and the format's backend entry")
    if max_sequences is not None and max_sequences < 1:
        raise ConfigError(f"max_sequences={max_sequences} is invalid",
                          "pass edgeopt serve --max-concurrency >= 1, or edgeopt plan or edgeopt optimize "
                          "--concurrency >= 1")
    per_token = kv_bytes_per_token(facts.kv_elements_per_token, kv_element_bytes)
    resident_per_token = math.ceil(per_token * facts.kv_copies)
    room = after_margin(memory.bytes)
    wanted = max_sequences or DEFAULT_MAX_SEQUENCES
    # Per-sequence runtime memory for the most sequences this can admit (fewer may fit; never more).
    overhead = facts.overhead_bytes(wanted, context, per_token)
    budget = room - facts.weights_bytes - overhead
    fits_tokens = max(budget, 0) // resident_per_token if per_token else 0
    context = min(context, fits_tokens) if per_token else context
    affordable = max(1, fits_tokens // max(1, min(context, MIN_TOKENS_PER_SEQUENCE)))
    sequences = wanted if max_sequences is not None else min(wanted, affordable)
    return KvSizing(memory.source, memory.bytes, facts.weights_bytes, overhead, memory.bytes - room, per_token,
                    budget, fits_tokens, min(fits_tokens, sequences * context), sequences, context, facts.kv_copies)


def require_kv_room(sizing: KvSizing) -> KvSizing:
    """``sizing`` when its cache holds at least two tokens; otherwise a DoesNotFitError with the numbers."""
    if sizing.kv_fit_tokens >= 2:
        return sizing
    raise DoesNotFitError(
        f"no memory left for the KV cache: {sizing.usable_memory_bytes / MIB:.0f} MiB usable "
        f"({sizing.memory_source}) - {sizing.weights_bytes / MIB:.0f} MiB weights - "
        f"{sizing.overhead_bytes / MIB:.0f} MiB runtime - {sizing.margin_bytes / MIB:.0f} MiB margin = "
        f"{sizing.kv_budget_bytes / MIB:.0f} MiB",
        "use a smaller quantization (edgeopt optimize --quant Q4_0), or if the memory is wrong give edgeopt "
        "serve a larger --memory")
