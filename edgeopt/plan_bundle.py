"""``edgeopt plan BUNDLE``: the serve-time plan of a bundle ``edgeopt optimize`` wrote, on a target.

What a user holds on the device is the bundle, not the checkpoint it came from, so this plans what
``edgeopt serve BUNDLE`` with the same flags would size: ``-n`` is serve's ``--max-concurrency`` (left out:
what the KV budget affords, as serve decides), ``-c`` its ``--context``, ``--kv-type`` and ``--memory`` the
same. The shape comes from :func:`edgeopt.sizing.bundle_facts.planned_bundle_shape`, the function serve's
own :func:`~edgeopt.sizing.bundle_facts.bundle_serving_shape` calls; the plan only reports what serve refuses
(a memory too small for the KV cache). Embedding bundles keep no KV cache: weights and runtime overhead only.
"""

from __future__ import annotations

from pathlib import Path

from edgeopt import backends
from edgeopt.bundle import MANIFEST, Manifest, read_manifest
from edgeopt.plan import Candidate, Plan, candidate_from_shape
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.budget import after_margin, memory_pool
from edgeopt.sizing.resident import ResidentMemory
from edgeopt.sizing.bundle_facts import bundle_model_spec, planned_bundle_shape, weights_bytes
from edgeopt.sizing.shape import ShapeRequest


def is_bundle_dir(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def plan_bundle(bundle_dir: Path, profile: DeviceProfile, context: int | None = None,
                concurrency: int | None = None, memory_bytes: int | None = None,
                kv_type: str | None = None, prefix_cache_bytes: int | None = None) -> Plan:
    """One candidate: the bundle as ``serve`` would size it on ``profile`` (or in ``memory_bytes``)."""
    bundle_dir = Path(bundle_dir)
    manifest = read_manifest(bundle_dir)
    if manifest.kind in ("embedding", "rerank"):  # encoders: no KV cache
        candidate = _embedding_candidate(bundle_dir, manifest, profile, memory_bytes)
        pool = memory_pool(None if memory_bytes else profile, memory_bytes)
        context = context or candidate_context(bundle_dir, manifest)
        return Plan(str(bundle_dir), profile.name, pool.bytes, context, 1, [candidate],
                    candidate if candidate.fits else None)
    request = ShapeRequest(context=context, max_sequences=concurrency, kv_type=kv_type,
                           prefix_cache_bytes=prefix_cache_bytes)
    shape = planned_bundle_shape(bundle_dir, manifest, request, memory_bytes, profile)
    sequences, served_context = shape.max_sequences, context or shape.context_length
    candidate = candidate_from_shape(manifest.format, manifest.quant, shape, served_context, sequences, encoder=False)
    return Plan(str(bundle_dir), profile.name, shape.sizing.usable_memory_bytes, served_context, sequences,
                [candidate], candidate if candidate.fits else None)


def bundle_parameters(bundle_dir: Path) -> int:
    """Parameters of the bundle's model (its config), for the plan's heading."""
    return bundle_model_spec(Path(bundle_dir), read_manifest(Path(bundle_dir))).num_parameters


def candidate_context(bundle_dir: Path, manifest: Manifest) -> int:
    return bundle_model_spec(bundle_dir, manifest).max_position_embeddings


def _embedding_candidate(bundle_dir: Path, manifest: Manifest, profile: DeviceProfile,
                         memory_bytes: int | None) -> Candidate:
    """An encoder keeps no KV cache: it fits when weights and runtime overhead stay within the pool."""
    resident = encoder_resident(bundle_dir, manifest)
    pool = memory_pool(None if memory_bytes else profile, memory_bytes)
    overhead = resident.runtime_buffer_bytes + resident.process_bytes
    budget = after_margin(pool.bytes) - resident.weights_bytes - overhead
    return Candidate(format=manifest.format, quant=manifest.quant, weight_bytes=resident.weights_bytes, kv_type=None,
                     kv_layout=None, kv_bytes_per_token=0, overhead_bytes=overhead, kv_budget_bytes=budget,
                     kv_token_capacity=0, max_concurrency=0, fits=budget >= 0, resident=resident)


def encoder_resident(bundle_dir: Path, manifest: Manifest) -> ResidentMemory:
    """What serving an encoder (embedding, rerank) bundle holds resident: weights, runtime buffers, process."""
    entry = backends.backend(manifest.format)
    spec = bundle_model_spec(bundle_dir, manifest)
    overhead = entry.model_overhead_bytes(spec.vocab_size, spec.intermediate_size)
    process = min(entry.process_bytes, overhead)
    return ResidentMemory(weights_bytes=weights_bytes(bundle_dir, manifest), kv_live_cells=0, kv_prefix_cells=0,
                          kv_bytes_per_token=0, runtime_buffer_bytes=overhead - process, process_bytes=process)
