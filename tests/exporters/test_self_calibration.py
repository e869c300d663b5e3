"""Calibration text the model writes itself: sampled from the unquantized GGUF with llama.cpp,
reproducible by its seed, exactly the token budget asked for, and named as such in the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt.store.bundle import sha256_file
from edgeopt.errors import ConfigError
from edgeopt.exporters.gguf import self_calibration
from edgeopt.exporters.gguf.imatrix_file import read_imatrix
from edgeopt.exporters.gguf.self_calibration import SEED_PROMPTS, generate_calibration


@pytest.fixture(scope="module")
def tiny_f16(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory("llama-gqa", "F16")


def _prompt_ids(gguf: Path, prompt: str) -> list[int]:
    from edgeopt.runtimes.llama_cpp.tokenizer import gguf_vocabulary

    with gguf_vocabulary(gguf) as tokenizer:
        return tokenizer.encode(prompt, add_special=True)


def test_same_seed_same_text_and_the_budget_is_exact(tiny_f16: Path):
    first = generate_calibration(tiny_f16, chunks=3, chunk_size=48, seed=7, threads=1)
    again = generate_calibration(tiny_f16, chunks=3, chunk_size=48, seed=7, threads=1)
    other = generate_calibration(tiny_f16, chunks=3, chunk_size=48, seed=8, threads=1)
    assert first.chunks == again.chunks and first.sha256() == again.sha256()
    assert other.chunks != first.chunks
    assert [len(c) for c in first.chunks] == [48, 48, 48] and first.tokens == 144
    assert first.source == "generated: 144 tokens from 3 seed prompts"
    for chunk, prompt in zip(first.chunks, SEED_PROMPTS):  # chunk i continues seed prompt i (half a chunk at most)
        start = _prompt_ids(tiny_f16, prompt)[:24]
        assert chunk[:len(start)] == start


def test_more_chunks_than_run_at_once_cycle_the_prompts(tiny_f16: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(self_calibration, "MAX_PARALLEL", 2)  # three rounds: 2 + 2 + 1 sequences
    text = generate_calibration(tiny_f16, chunks=5, chunk_size=32, seed=0, prompts=SEED_PROMPTS[:3], threads=1)
    assert [len(c) for c in text.chunks] == [32] * 5 and text.prompts == 3
    for i, chunk in enumerate(text.chunks):
        start = _prompt_ids(tiny_f16, SEED_PROMPTS[i % 3])[:16]
        assert chunk[:len(start)] == start


def test_end_of_generation_tokens_are_never_sampled(tiny_f16: Path):
    from edgeopt.runtimes.llama_cpp.tokenizer import gguf_vocabulary

    with gguf_vocabulary(tiny_f16) as tokenizer:
        eog = tokenizer.eog_token_ids()
    assert eog  # the tiny vocabulary has an end token to avoid
    text = generate_calibration(tiny_f16, chunks=2, chunk_size=64, seed=3, temperature=5.0, min_p=0.0, threads=1)
    assert not eog & {t for c in text.chunks for t in c}


def test_impossible_budgets_are_refused(tiny_f16: Path):
    with pytest.raises(ConfigError, match="chunks=0"):
        generate_calibration(tiny_f16, chunks=0)
    with pytest.raises(ConfigError, match="holds"):
        generate_calibration(tiny_f16, chunks=1, chunk_size=4096)  # the tiny model's context is 512


def test_k_quant_without_calibration_text_gets_a_generated_matrix(tiny_llama_dir: Path, tmp_path: Path):
    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize

    import torch

    threads = torch.get_num_threads()  # the matrix pass may run on fewer (the cores left free), then restores it
    out = tmp_path / "bundle"
    manifest = run_optimize(OptimizeOptions(model=str(tiny_llama_dir), output=out, format="gguf", quant="Q4_K_M",
                                            evaluate=False), report=lambda _m: None)
    facts = manifest.export["imatrix"]
    sequences, length = self_calibration.DEFAULT_CHUNKS, self_calibration.SEQUENCE_TOKENS
    assert facts["source"] == f"generated: {sequences * length} tokens from 8 seed prompts"
    assert facts["tokens"] == sequences * length and facts["chunks"] == sequences and facts["chunk_size"] == length
    assert facts["generated"]["seed"] == self_calibration.DEFAULT_SEED and len(facts["tokens_sha256"]) == 64
    assert facts["sha256"] == sha256_file(out / "imatrix.gguf")
    assert read_imatrix(out / "imatrix.gguf").datasets == [facts["source"]]
    assert "imatrix.gguf" in json.loads((out / "manifest.json").read_text())["files"]
    assert torch.get_num_threads() == threads


def test_self_calibration_off_writes_no_matrix_and_types_needing_one_are_refused(tiny_llama_dir: Path,
                                                                                  tmp_path: Path):
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    result = GGUFExporter().export(tiny_llama_dir, tmp_path / "plain", "Q4_K_M", {"self_calibration": False})
    assert "imatrix" not in result.details and not (tmp_path / "plain" / "imatrix.gguf").exists()
    with pytest.raises(ConfigError, match="importance matrix"):
        GGUFExporter().export(tiny_llama_dir, tmp_path / "iq", "IQ2_XXS", {"self_calibration": False})


def test_types_without_a_matrix_generate_nothing(tiny_llama_dir: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    def refuse(*_args, **_kwargs):
        raise AssertionError("Q8_0 ignores an importance matrix: nothing should be generated for it")

    monkeypatch.setattr(self_calibration, "generate_calibration", refuse)
    result = GGUFExporter().export(tiny_llama_dir, tmp_path / "q8", "Q8_0", {})
    assert "imatrix" not in result.details


def test_generation_decodes_on_the_free_cores_whatever_threads_the_quantizer_gets(tiny_llama_dir: Path,
                                                                                   tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    """``threads`` is the quantizer's: fixed llama.cpp decode threads beside a busy neighbour spin at every
    barrier (170 s instead of 7 s measured on 2 cores), so generation always follows the load."""
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    asked: list[int | None] = []
    real = self_calibration.generate_calibration

    def recording(*args, **kwargs):
        asked.append(kwargs.get("threads"))
        return real(*args, **kwargs)

    monkeypatch.setattr(self_calibration, "generate_calibration", recording)
    result = GGUFExporter().export(tiny_llama_dir, tmp_path / "q4", "Q4_K_M", {"threads": 2, "calibration_chunks": 1})
    assert asked == [None] and result.details["imatrix"]["chunks"] == 1


def test_prompts_that_overflow_one_batch_go_in_several_steps() -> None:
    from edgeopt.exporters.generated_text import _within
    from edgeopt.runtimes.base import StepInput

    prompts = [StepInput(slot, [1] * 40, 0, want_logits=True) for slot in range(32)]  # 1,280 tokens
    steps = _within(prompts, 512)
    assert [sum(len(i.tokens) for i in step) for step in steps] == [480, 480, 320]
    assert [i.slot for step in steps for i in step] == list(range(32))
    assert _within(prompts, None) == [prompts]


def _whole_row_min_p(logits, rng, banned, temperature: float, min_p: float) -> int:
    """Min-p sampling written out over the whole vocabulary: what the candidate-only sampler must equal."""
    import numpy as np

    scaled = logits.astype(np.float64) / temperature
    scaled[banned] = -np.inf
    probs = np.exp(scaled - scaled.max())
    probs[probs < min_p * probs.max()] = 0.0
    probs /= probs.sum()
    return int(rng.choice(probs.size, p=probs))


def test_min_p_sampling_over_the_candidates_draws_what_the_whole_row_draws():
    import numpy as np

    from edgeopt.exporters.generated_text import _sample

    rows = np.random.default_rng(3).standard_normal((400, 4096)).astype(np.float32)
    rows *= np.repeat([0.5, 2.0, 8.0, 30.0], 100)[:, None]  # flat to peaked distributions
    banned = np.array([0, 17])
    rows[::7, 17] = 1e4  # a banned token that would otherwise win
    ours, whole = np.random.default_rng(9), np.random.default_rng(9)
    drawn = [_sample(row, ours, banned, 0.9, 0.02) for row in rows]
    assert drawn == [_whole_row_min_p(row, whole, banned, 0.9, 0.02) for row in rows]
    assert 17 not in drawn and len(set(drawn)) > 100
    assert ours.random() == whole.random()  # one draw each: the generators stay in step
