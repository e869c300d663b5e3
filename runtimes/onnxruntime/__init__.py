"""ONNX Runtime backend: ``load(bundle_dir, manifest, **options)`` for decoder bundles and
``load_embedding(bundle_dir, manifest, **options)`` for embedding bundles and
``load_rerank(bundle_dir, manifest, **options)`` for rerank (cross-encoder) bundles.

Options (all optional): ``kv_capacity_tokens``, ``max_slots``, ``context_length``, ``cache_slots``
(decoders; prefix-cache entries, default as many as slots, 0 turns the cache off),
``threads``, ``providers`` (e.g. ["cuda"]) and ``profile`` (a DeviceProfile or name; default: the
bundle's target when this machine can load it, else the host). Options meant for other backends are
ignored. Nothing here imports torch, transformers or optimum.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt.errors import BundleError, ConfigError, UnknownTargetError
from edgeopt.sources.architectures import encoder_input_limit
from edgeopt.profiles import DeviceProfile
from edgeopt.profiles.host import usable_cpu_count
from edgeopt.runtimes.base import EmbeddingRuntime, RerankRuntime, Runtime, RuntimeInfo

if TYPE_CHECKING:
    from edgeopt.store.bundle import Manifest
    from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer

DEFAULT_SLOTS = 8
DEFAULT_CONTEXT = 4096


def load(bundle_dir: Path, manifest: Manifest, kv_capacity_tokens: int | None = None, max_slots: int | None = None,
         context_length: int | None = None, threads: int | None = None, providers: list[str] | None = None,
         profile: DeviceProfile | str | None = None, cache_slots: int | None = None,
         **_other_backends_options: Any) -> Runtime:
    _check_kind(manifest, "causal-lm", "edgeopt.runtimes.load_embedding_runtime")
    bundle_dir = Path(bundle_dir)
    session, tokenizer, config = _open(bundle_dir, manifest, threads, providers, profile)
    return _decoder_runtime(session, tokenizer, config, bundle_dir / manifest.tokenizer_dir,
                            kv_capacity_tokens, max_slots, context_length, cache_slots)


def open_decoder(model_path: Path, tokenizer_dir: Path, max_slots: int, context_length: int,
                 threads: int | None = None) -> Runtime:
    """A decoder runtime over an ONNX file outside any bundle (an exporter's intermediate fp32 graph, with the
    checkpoint's tokenizer files in ``tokenizer_dir``), on this machine's CPU, without a prefix cache."""
    from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer
    from edgeopt.runtimes.onnxruntime.session import create_session, resolve_threads

    session = create_session(Path(model_path), min(resolve_threads(threads, None), usable_cpu_count()),
                             ["CPUExecutionProvider"])
    tokenizer = BundleTokenizer(Path(tokenizer_dir) / "tokenizer.json")
    return _decoder_runtime(session, tokenizer, _model_config(Path(model_path).parent), Path(tokenizer_dir),
                            context_length * max_slots, max_slots, context_length, cache_slots=0)


def load_embedding(bundle_dir: Path, manifest: Manifest, threads: int | None = None,
                   providers: list[str] | None = None, profile: DeviceProfile | str | None = None,
                   **_other_backends_options: Any) -> EmbeddingRuntime:
    _check_kind(manifest, "embedding", "edgeopt.runtimes.load_runtime")
    session, tokenizer, config = _open(Path(bundle_dir), manifest, threads, providers, profile)
    return _embedding_runtime(session, tokenizer, config, Path(bundle_dir) / manifest.model_file)


def load_rerank(bundle_dir: Path, manifest: Manifest, threads: int | None = None,
                providers: list[str] | None = None, profile: DeviceProfile | str | None = None,
                **_other_backends_options: Any) -> RerankRuntime:
    from edgeopt.encoders.cross_encoder import load_cross_encoder_config
    from edgeopt.runtimes.onnxruntime.reranker import OnnxRerankRuntime

    _check_kind(manifest, "rerank", "edgeopt.runtimes.load_runtime")
    bundle_dir = Path(bundle_dir)
    session, tokenizer, config = _open(bundle_dir, manifest, threads, providers, profile)
    scoring = load_cross_encoder_config((bundle_dir / manifest.model_file).parent)
    info = RuntimeInfo(vocab_size=tokenizer.vocab_size, kv_capacity_tokens=0, max_slots=0,
                       context_length=scoring.max_length)
    pad = config.get("pad_token_id")
    return OnnxRerankRuntime(session, tokenizer, bundle_dir / manifest.tokenizer_dir / "tokenizer.json", scoring, info,
                             int(pad) if pad is not None else 0)


def _check_kind(manifest: Manifest, kind: str, other_loader: str) -> None:
    if manifest.kind != kind:
        raise ConfigError(f"this loader takes {kind} bundles; the bundle is a {manifest.kind!r} bundle",
                          f"load it with {other_loader}")


def _open(bundle_dir: Path, manifest: Manifest, threads: int | None, providers: list[str] | None,
          profile: DeviceProfile | str | None) -> tuple[Any, BundleTokenizer, dict]:
    """The session (providers and threads from the profile), the tokenizer and config.json of a bundle."""
    from edgeopt.runtimes.onnxruntime.session import create_session, resolve_providers, resolve_threads
    from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer

    model_path = bundle_dir / manifest.model_file
    chosen = _profile(profile, manifest)
    # A profile describes the target board; never ask for more threads than this machine has.
    n_threads = (resolve_threads(threads, None) if threads is not None
                 else min(resolve_threads(None, chosen), usable_cpu_count()))
    session = create_session(model_path, n_threads, resolve_providers(providers, chosen))
    tokenizer = BundleTokenizer(bundle_dir / manifest.tokenizer_dir / "tokenizer.json")
    return session, tokenizer, _model_config(model_path.parent)


def _embedding_runtime(session: Any, tokenizer: BundleTokenizer, config: dict, model_path: Path) -> EmbeddingRuntime:
    from edgeopt.runtimes.onnxruntime.encoder import OnnxEmbeddingRuntime
    from edgeopt.encoders.pooling import load_pooling

    pad = config.get("pad_token_id")
    pooling = load_pooling(model_path.parent)
    # sentence-transformers never feeds more than max_seq_length tokens; neither do we (encoder.py).
    context = encoder_input_limit(config, pooling.max_seq_length)
    info = RuntimeInfo(vocab_size=tokenizer.vocab_size, kv_capacity_tokens=0, max_slots=0, context_length=context)
    return OnnxEmbeddingRuntime(session, tokenizer, pooling, info, int(pad) if pad is not None else 0)


def _decoder_runtime(session: Any, tokenizer: BundleTokenizer, config: dict, tokenizer_dir: Path,
                     kv_capacity: int | None, max_slots: int | None, context: int | None,
                     cache_slots: int | None = None) -> Runtime:
    from edgeopt.runtimes.bundle_tokenizer import eos_token_ids

    from edgeopt.runtimes.onnxruntime.decoder import OnnxDecoderRuntime
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession

    model_max = int(config.get("max_position_embeddings", DEFAULT_CONTEXT))
    if context is not None and context > model_max:
        raise ConfigError(f"context_length {context} exceeds the model's max_position_embeddings {model_max}",
                          f"serve with --context {model_max} or less")
    context = context or min(model_max, DEFAULT_CONTEXT)
    slots = max_slots or DEFAULT_SLOTS
    cache_slots = slots if cache_slots is None else cache_slots
    if slots < 1 or cache_slots < 0:
        raise ConfigError(f"max_slots={slots}, cache_slots={cache_slots} are invalid",
                          "pass a positive concurrency and cache_slots >= 0")
    decoder = DecoderSession(session)
    tok_config = _read_json(tokenizer_dir / "tokenizer_config.json")
    bos = config.get("bos_token_id")
    info = RuntimeInfo(
        vocab_size=decoder.vocab_size, kv_capacity_tokens=kv_capacity or context * slots, max_slots=slots,
        context_length=context, eos_token_ids=eos_token_ids(config, _read_json(tokenizer_dir / "generation_config.json"),
                                    tok_config, tokenizer),
        bos_token_id=int(bos) if bos is not None else None, add_bos=bool(tok_config.get("add_bos_token", False)),
        cache_slots=cache_slots, shares_kv_cells=False,  # a slot's KV is its own arrays: sharing copies
        position_logits=True,
    )
    return OnnxDecoderRuntime(decoder, tokenizer, info)


def _model_config(model_dir: Path) -> dict:
    config = _read_json(model_dir / "config.json")
    if not config:
        raise BundleError(f"{model_dir / 'config.json'} is missing or empty", "re-run edgeopt optimize --format onnx")
    return config


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _profile(profile: DeviceProfile | str | None, manifest: Manifest) -> DeviceProfile:
    from edgeopt.profiles import load_profile

    if isinstance(profile, DeviceProfile):
        return profile
    try:
        return load_profile(profile or manifest.target or "host")
    except (UnknownTargetError, ConfigError):
        return load_profile("host")
