"""``edgeopt plan BUNDLE``: the serve-time plan of a bundle ``edgeopt optimize`` wrote, on a target.

What a user holds on the device is the bundle, not the checkpoint it came from, so this plans what
``edgeopt serve BUNDLE`` with the same flags would size: ``-n`` is serve's ``--max-concurrency`` (left out:
what the KV budget affords, as serve decides), ``-c`` its ``--context``, ``--kv-type`` and ``--memory`` the
same. The shape comes from :func:`edgeopt.sizing.bundle_facts.planned_bundle_shape`, the function serve's
own :func:`~edgeopt.sizing.bundle_facts.bundle_serving_shape` calls; the plan only reports what serve refuses
(a memory too small for the KV cache). Embedding bundles keep no KV cache: weights and runtime overhead only.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt import backends
from edgeopt.store.bundle import Manifest, read_manifest
from edgeopt.speculation_modes import DEFAULT_MODE, longest_draft
from edgeopt.sources.architectures import encoder_input_limit
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.planning.plan import Candidate, Plan, candidate_from_shape
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.budget import after_margin, memory_pool, runtime_weights_extra
from edgeopt.sizing.resident import ResidentMemory
from edgeopt.sizing.bundle_facts import bundle_model_spec, planned_bundle_shape, weights_bytes
from edgeopt.sizing.shape import ShapeRequest


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
                           prefix_cache_bytes=prefix_cache_bytes, draft_rows=longest_draft(DEFAULT_MODE))
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


def _embedding_run_bytes(entry: backends.Backend, bundle_dir: Path, manifest: Manifest, spec: ModelSpec) -> int:
    """Activations of the largest batch the embedding server runs, in sequences as long as it accepts."""
    if not entry.memory.embedding_run:
        return 0
    return int(backends.load_attr(entry.memory.embedding_run)(spec.hidden_size, spec.num_heads, spec.intermediate_size,
                                                        embedding_input_tokens(bundle_dir, manifest)))


def embedding_input_tokens(bundle_dir: Path, manifest: Manifest) -> int:
    """The longest input an embedding bundle's server accepts (its position table, or sentence-transformers'
    max_seq_length when smaller: edgeopt.runtimes.onnxruntime.load_embedding)."""
    model_dir = (Path(bundle_dir) / manifest.model_file).parent
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        return bundle_model_spec(Path(bundle_dir), manifest).max_position_embeddings
    from edgeopt.encoders.pooling import load_pooling  # numpy: `edgeopt --help` imports this module and must stay cheap

    return encoder_input_limit(json.loads(config_path.read_text()), load_pooling(model_dir).max_seq_length)


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
    weights = weights_bytes(bundle_dir, manifest)
    # vocab_size 0: an encoder computes no logits rows (the per-vocabulary cost of a decoder's)
    overhead = (entry.model_overhead_bytes(0, spec.intermediate_size)
                + runtime_weights_extra(entry, weights, spec.vocab_size, spec.hidden_size, tied_embeddings=False)
                + _embedding_run_bytes(entry, bundle_dir, manifest, spec))
    process = min(entry.memory.process_bytes, overhead)
    return ResidentMemory(weights_bytes=weights, kv_live_cells=0, kv_prefix_cells=0, kv_bytes_per_token=0,
                          runtime_buffer_bytes=overhead - process, process_bytes=process)
