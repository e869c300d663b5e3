"""Conformance of our GGUF writer to llama.cpp's own converter, as one reusable check.

``check_conformance(model_dir, work_dir)`` converts the same checkpoint with ``edgeopt.exporters.gguf`` and
with ``convert_hf_to_gguf.py`` (the oracle, see reference_converter.py) and asserts that llama.cpp
would see the same model: the same tensors (names, shapes, types; equal values for F32), the same
metadata keys and values (tokenizer included), and the same logits on a prompt once both are loaded
by llama.cpp. Any architecture's test calls it with a checkpoint whose tokenizer the reference knows
(tests/exporters/conformance_models.py builds those).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.exporters.gguf_file import F32, GGUFFile, read_gguf
from tests.exporters.reference_converter import convert_with_reference

# Keys the reference writes whose values legitimately differ from ours, and why.
EXCLUDED_KEYS: dict[str, str] = {
    "general.name": "a display name: the reference title-cases the directory name, we keep it as is",
    "general.size_label": "a display label ('164K') derived from the parameter count for file naming; "
                          "llama.cpp never reads it",
    "general.type": "'model' vs 'adapter' for file naming; llama.cpp only reads it for LoRA adapters",
    "general.basename": "file-naming metadata the reference guesses from the directory name",
    "general.version": "file-naming metadata the reference guesses from the directory name ('m-llama-2' -> '2')",
    "general.finetune": "file-naming metadata the reference guesses from the directory name",
}
# Keys llama.cpp reads with a default when absent (src/llama-vocab.cpp, src/llama-model.cpp): one side
# writing the value llama.cpp would assume and the other leaving the key out is the same model.
# Each entry computes that default from the file's other fields.
LLAMA_CPP_DEFAULTS: dict[str, Callable[[dict[str, Any], str], Any]] = {
    # false for the SPM and BPE vocabulary types
    "tokenizer.ggml.add_sep_token": lambda f, arch: False,
    "tokenizer.ggml.add_eos_token": lambda f, arch: False,
    # n_embd_head_k = n_embd / n_head unless given; n_rot = n_embd_head_k unless given
    "attention.key_length": lambda f, arch: f[f"{arch}.embedding_length"] // f[f"{arch}.attention.head_count"],
    "attention.value_length": lambda f, arch: f[f"{arch}.embedding_length"] // f[f"{arch}.attention.head_count"],
    "rope.dimension_count": lambda f, arch: f.get(f"{arch}.attention.key_length",
                                                  f[f"{arch}.embedding_length"] // f[f"{arch}.attention.head_count"]),
    # hparams.rope_freq_base_train = 10000 unless given (the reference's gemma2 never writes it)
    "rope.freq_base": lambda f, arch: 10000.0,
    # SentencePiece vocabularies default to Llama 2's ids: <unk> 0, <s> 1, </s> 2
    "tokenizer.ggml.bos_token_id": lambda f, arch: 1 if f["tokenizer.ggml.model"] == "llama" else None,
    "tokenizer.ggml.eos_token_id": lambda f, arch: 2 if f["tokenizer.ggml.model"] == "llama" else None,
    "tokenizer.ggml.unknown_token_id": lambda f, arch: 0 if f["tokenizer.ggml.model"] == "llama" else None,
    # SentencePiece vocabularies prepend a space unless told otherwise; BPE ones never do
    "tokenizer.ggml.add_space_prefix": lambda f, arch: f["tokenizer.ggml.model"] == "llama",
    # informational: llama.cpp takes the vocabulary size from the token list
    "vocab_size": lambda f, arch: len(f["tokenizer.ggml.tokens"]),
}
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                  "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.bos_token_id",
                  "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                  "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template")
PROMPT = "The quick brown fox jumps over the lazy dog. 12345 naïve café"
LOGITS_TOLERANCE = 1e-3  # F32 both sides; ours and the reference's differ only in summation order


@dataclass
class ConformanceResult:
    tensors: int
    metadata_keys: int
    tokens: int
    max_logit_diff: float


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


def _list_difference(ours: list, ref: list) -> str:
    if len(ours) != len(ref):
        return f"length {len(ours)} vs reference {len(ref)}"
    wrong = [i for i, (a, b) in enumerate(zip(ours, ref)) if a != b]
    return f"{len(wrong)} entries differ, first at {[(i, ours[i], ref[i]) for i in wrong[:4]]}"


def _is_llama_cpp_default(key: str, value: Any, fields: dict[str, Any]) -> bool:
    """Whether ``value`` is what llama.cpp assumes for ``key`` in the file (``fields``) that lacks it."""
    arch = fields["general.architecture"]
    short = key.removeprefix(f"{arch}.")
    default = LLAMA_CPP_DEFAULTS.get(short if short != key else key)
    return default is not None and default(fields, arch) == value


def metadata_differences(ours: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    """Every key llama.cpp reads whose value differs (or that one side lacks), as readable lines."""
    problems = []
    for key in sorted(set(ours) | set(ref)):
        if key in EXCLUDED_KEYS or key.startswith("GGUF."):
            continue
        missing = object()
        a, b = ours.get(key, missing), ref.get(key, missing)
        if a is missing or b is missing:
            present = b if a is missing else a
            if _is_llama_cpp_default(key, present, ours if a is missing else ref):
                continue
            side = "ours lacks" if a is missing else "the reference lacks"
            problems.append(f"{key}: {side} it (other side: {_describe(present)})")
        elif isinstance(a, float) or isinstance(b, float):
            if not np.isclose(a, b, rtol=1e-6):
                problems.append(f"{key}: ours {a!r} vs reference {b!r}")
        elif a != b:
            detail = _list_difference(a, b) if isinstance(a, list) and isinstance(b, list) else \
                f"ours {_describe(a)} vs reference {_describe(b)}"
            problems.append(f"{key}: {detail}")
    return problems


def tensor_differences(ours: GGUFFile, ref: GGUFFile, compare_types: bool) -> list[str]:
    problems = []
    if set(ours.tensors) != set(ref.tensors):
        problems.append(f"tensor names: only ours {sorted(set(ours.tensors) - set(ref.tensors))}, "
                        f"only reference {sorted(set(ref.tensors) - set(ours.tensors))}")
    for name in sorted(set(ours.tensors) & set(ref.tensors)):
        a, b = ours.tensors[name], ref.tensors[name]
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} vs reference {b.shape}")
        elif compare_types and a.ggml_type != b.ggml_type:
            problems.append(f"{name}: ggml type {a.ggml_type} vs reference {b.ggml_type}")
        elif a.ggml_type == F32 and b.ggml_type == F32:
            diff = float(np.max(np.abs(ours.tensor_f32(name) - ref.tensor_f32(name))))
            if diff > 1e-6:
                problems.append(f"{name}: values differ by up to {diff:.3g}")
    return problems


def _llama(path: Path):
    from llama_cpp import Llama

    return Llama(model_path=str(path), n_ctx=128, n_batch=128, logits_all=True, verbose=False, n_threads=2)


def _tokenize_and_score(path: Path, prompt: str, token_ids: list[int]) -> tuple[list[int], np.ndarray]:
    """llama.cpp's own tokenization of ``prompt`` and its logits for ``token_ids``."""
    llm = _llama(path)
    try:
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
        llm.eval(token_ids)
        return tokens, np.array(llm.scores[: len(token_ids)], dtype=np.float64)
    finally:
        llm.close()


def check_conformance(model_dir: Path, work_dir: Path, out_type: str = "F32",
                      allowed: dict[str, str] | None = None) -> ConformanceResult:
    """Convert ``model_dir`` both ways into ``work_dir`` and assert llama.cpp sees the same model.

    ``allowed`` names metadata keys (or "tokenization") where this checkpoint's reference output is
    known to be wrong, each with the reason; the test proving that belongs next to the entry.
    """
    from transformers import AutoTokenizer

    from edgeopt.exporters.gguf.writer import convert_checkpoint

    allowed = allowed or {}
    work_dir.mkdir(parents=True, exist_ok=True)
    ours_path, ref_path = work_dir / "ours.gguf", work_dir / "reference.gguf"
    convert_checkpoint(model_dir, ours_path, out_type)
    convert_with_reference(model_dir, ref_path, out_type.lower())
    ours, ref = read_gguf(ours_path), read_gguf(ref_path)

    problems = tensor_differences(ours, ref, compare_types=True) + [
        p for p in metadata_differences(ours.fields, ref.fields) if p.split(":")[0] not in allowed]
    assert not problems, f"{model_dir.name}: our GGUF differs from llama.cpp's converter:\n  " + "\n  ".join(problems)

    hf_ids = AutoTokenizer.from_pretrained(str(model_dir)).encode(PROMPT)
    our_tokens, our_logits = _tokenize_and_score(ours_path, PROMPT, hf_ids)
    ref_tokens, ref_logits = _tokenize_and_score(ref_path, PROMPT, hf_ids)
    assert our_tokens == hf_ids, f"llama.cpp tokenizes our GGUF as {our_tokens}, transformers as {hf_ids}"
    if "tokenization" not in allowed:
        assert ref_tokens == our_tokens, f"llama.cpp tokenizes the reference as {ref_tokens}, ours as {our_tokens}"
    diff = float(np.max(np.abs(our_logits - ref_logits)))
    assert diff <= LOGITS_TOLERANCE, f"{model_dir.name}: logits differ by up to {diff:.3g} (> {LOGITS_TOLERANCE})"
    return ConformanceResult(len(ours.tensors), len(ours.fields), len(ours.fields["tokenizer.ggml.tokens"]), diff)
