"""Our GGUF writer against llama.cpp's own converter (convert_hf_to_gguf.py), per architecture.

Each case converts one tiny random checkpoint both ways and checks tensors, metadata, tokenizer and
logits (gguf_conformance.check_conformance). The oracle comes from ``make setup``; without it these
tests fail and say how to fetch it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.exporters.conformance_models import CASES, build_conformance_checkpoint, build_tokenizer_files
from tests.exporters.gguf_conformance import check_conformance


@pytest.fixture(scope="session")
def conformance_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``make(kind) -> dir`` with that tokenizer's files, built once per session."""
    built: dict[str, Path] = {}

    def make(kind: str) -> Path:
        if kind not in built:
            built[kind] = build_tokenizer_files(kind, tmp_path_factory.mktemp(f"tokenizer-{kind}"))
        return built[kind]

    return make


# Llama 3.2 / Mistral / Qwen3 / Phi / Granite / SmolLM3 at F32: tests/architectures/test_conformance.py.
# Here: the tokenizer cases (SentencePiece from tokenizer.model and from tokenizer.json alone) and
# Qwen2's embedding rows beyond its 151,646-token vocabulary.
@pytest.mark.parametrize("case", ["llama-2", "llama-2-tokenizer-json", "qwen2"])
def test_gguf_matches_llama_cpp_converter(case: str, tmp_path: Path, conformance_tokenizer) -> None:
    spec = CASES[case]
    model_dir = build_conformance_checkpoint(tmp_path / case, spec, conformance_tokenizer(spec.tokenizer))
    result = check_conformance(model_dir, tmp_path / "gguf", allowed=spec.reference_errors)
    assert result.max_logit_diff <= 1e-3


def test_f16_tensor_types_match_llama_cpp_converter(tmp_path: Path, conformance_tokenizer) -> None:
    """F16: which tensors stay F32 (norms, rope factors) is decided the same way as the reference."""
    spec = CASES["llama-3.2"]
    model_dir = build_conformance_checkpoint(tmp_path / "llama-3.2", spec, conformance_tokenizer(spec.tokenizer))
    check_conformance(model_dir, tmp_path / "gguf", out_type="F16")


def test_missing_oracle_fails_naming_the_setup_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without the fetched converter the conformance tests fail (never skip) and say how to fetch it."""
    import sys

    from tests.exporters.reference_converter import reference_root

    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="make setup"):
        reference_root()
