"""The original as the evaluation's reference, read by llama.cpp from the unquantized GGUF: the logits it keeps
while it writes the evaluation text are the ones scoring that text gives, so the evaluation runs the original
over its text only when the text came from the cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.exporters.gguf.reference import GGUFReference
from edgeopt.exporters.gguf.unquantized import unquantized_gguf
from edgeopt.measuring.eval_text import SEED_PROMPTS
from edgeopt.measuring.metrics import mean_kl
from edgeopt.measuring.reference_logits import stored_logits


@pytest.fixture(scope="module")
def f16_gguf(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unquantized_gguf(tiny_llama_dir, tmp_path_factory.mktemp("workbench"))[0]


def test_logits_kept_while_writing_are_the_logits_scoring_the_rows_gives(f16_gguf: Path, tmp_path: Path) -> None:
    reference = GGUFReference(f16_gguf, context=64, threads=1)
    prompts = [[1, 5, 17, 33], [1, 9], [1, 40, 41, 42, 43, 44, 45]]  # different lengths, decoded together
    try:
        plain = reference.greedy_continuations(prompts, 12)
        with stored_logits(tmp_path) as stored:
            rows = reference.greedy_continuations(prompts, 12, logits=stored)
            assert rows == plain and stored.count == len(rows)  # keeping logits changes no token
            for index, row in enumerate(rows):
                kept, scored = stored[index], reference.score(row[:-1])
                assert kept.shape == scored.shape == (len(row) - 1, reference._scorer.vocab_size)
                np.testing.assert_allclose(kept, scored, rtol=0, atol=1e-3 * float(np.abs(scored).max()))
                assert mean_kl(scored, kept) < 1e-6
                assert (kept.argmax(axis=1)[len(prompts[index]) - 1:] == row[len(prompts[index]):]).all()
    finally:
        reference.close()


def test_the_original_scores_the_text_only_when_the_text_came_from_the_cache(
        tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeopt.evaluation.causal_lm import evaluate_bundle
    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize

    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path / "cache"))
    manifest = run_optimize(OptimizeOptions(model=str(tiny_llama_dir), output=tmp_path / "bundle", format="gguf",
                                            quant="Q8_0", evaluate=False), report=lambda _m: None)
    scored: list[int] = []
    score = GGUFReference.score
    monkeypatch.setattr(GGUFReference, "score", lambda self, ids: scored.append(len(ids)) or score(self, ids))
    written = evaluate_bundle(tmp_path / "bundle", manifest, tiny_llama_dir, None, tmp_path / "bench")
    assert scored == []  # the logits were kept as the text was written
    cached = evaluate_bundle(tmp_path / "bundle", manifest, tiny_llama_dir, None, tmp_path / "bench")
    assert len(scored) == len(SEED_PROMPTS) and all(n > 10 for n in scored)  # a window per seed prompt
    assert written["eval_tokens"] == cached["eval_tokens"] > 100
    assert written["kl_divergence"] == pytest.approx(cached["kl_divergence"], rel=1e-3, abs=1e-6)
    assert written["top1_agreement"] == cached["top1_agreement"]
