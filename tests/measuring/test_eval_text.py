"""The evaluation text the original model writes: batched greedy decoding gives each prompt's own greedy
continuation, and the text is generated once per model (the cache), then read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.measuring.scorers import HFScorer
from edgeopt.measuring.eval_text import SEED_PROMPTS, generated_eval_rows


@pytest.fixture(scope="module")
def qwen2_dir(tiny_model_factory) -> Path:
    return tiny_model_factory("qwen2")


def _one_by_one(reference: HFScorer, prompt: list[int], tokens: int) -> list[int]:
    """transformers' greedy generate of one prompt alone: what the batch must reproduce."""
    import torch

    model = reference._model
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                             pad_token_id=model.config.eos_token_id)
    return out[0].tolist()


def test_prompts_decoded_as_one_batch_get_their_own_greedy_continuations(qwen2_dir: Path) -> None:
    reference = HFScorer(qwen2_dir, threads=1)
    prompts = [[5, 17, 33], [9], [40, 41, 42, 43, 44, 45]]  # different lengths: the batch is left-padded
    steps: list[int] = []
    rows = reference.greedy_continuations(prompts, 12, on_step=lambda: steps.append(1))
    assert rows == [_one_by_one(reference, p, 12) for p in prompts]
    assert all(row[:len(p)] == p for row, p in zip(rows, prompts))
    assert len(steps) >= 11  # the load-following callback runs every decode step


def test_generated_text_is_made_once_per_model_and_read_back(qwen2_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path / "cache"))
    tokenizer = AutoTokenizer.from_pretrained(str(qwen2_dir))
    prompt_ids = [tokenizer.encode(p, add_special_tokens=False) for p in SEED_PROMPTS]
    reference = HFScorer(qwen2_dir, threads=1)
    first, cached_first = generated_eval_rows(qwen2_dir, reference, prompt_ids, tokens_per_prompt=8)
    calls: list[int] = []
    monkeypatch.setattr(reference, "greedy_continuations", lambda *a, **k: calls.append(1) or [])
    again, cached_again = generated_eval_rows(qwen2_dir, reference, prompt_ids, tokens_per_prompt=8)
    assert (cached_first, cached_again) == (False, True) and again == first and not calls
    assert [row[:len(p)] for row, p in zip(first, prompt_ids)] == prompt_ids  # a row per prompt, after it
    assert all(len(p) < len(row) <= len(p) + 8 for row, p in zip(first, prompt_ids))
    # other text asked for (more tokens) is generated anew, not mistaken for the cached one
    monkeypatch.undo()
    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path / "cache"))
    longer, cached_longer = generated_eval_rows(qwen2_dir, reference, prompt_ids, tokens_per_prompt=10)
    assert not cached_longer and sum(map(len, longer)) > sum(map(len, first))
