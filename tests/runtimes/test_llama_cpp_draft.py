"""A draft model on llama.cpp: greedy output with a draft is plain greedy decoding's on two models (the tiny
GGUF with its Q8_0 copy as draft; SmolLM2-135M-Instruct with a Q4_0 copy as draft), with several sequences
drafting together; the draft's KV follows each sequence; a draft with another vocabulary is refused.

llama.cpp may use other kernels for a verify pass than for a one-token decode, so the comparison allows
near-ties, as tests/runtimes/test_llama_cpp_speculation.py does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import edgeopt.engine.speculation.calibration as calibration_module
from edgeopt.demo.smollm2 import smollm2_gguf_path
from edgeopt.engine import Engine, RequestOutput, SamplingParams, engine_config_for
from edgeopt.engine.speculation.draft_model import DraftModel
from edgeopt.engine.speculation.draft_vocab import check_same_vocabulary
from edgeopt.errors import ConfigError
from edgeopt.runtimes.llama_cpp import LlamaCppRuntime, load_gguf
from tests.engine.helpers import run_engine
from tests.fixtures.draft_models import requantized_smollm2
from tests.runtimes.test_llama_cpp import THREADS, assert_same_greedy, greedy_alone


@pytest.fixture(autouse=True)
def prior_step_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check what verification does with drafts; whether drafting pays on this host is the
    controller's business (tests/engine/test_speculation_controller.py, test_speculation_calibration.py), so
    they keep its prior cost model instead of one timed on a shared CI core."""
    monkeypatch.setattr(calibration_module, "measure_pass_cost", lambda runtime: None)

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def open_runtime(path: Path, slots: int, cache_slots: int) -> LlamaCppRuntime:
    return load_gguf(path, kv_capacity_tokens=4096, max_slots=slots, max_batch_tokens=128, threads=THREADS,
                     n_gpu_layers=0, cache_slots=cache_slots, context_length=1024)


def serve_with_draft(target: LlamaCppRuntime, draft: DraftModel, prompts: dict[str, list[int]],
                     max_tokens: int) -> tuple[dict[str, RequestOutput], Engine]:
    engine = Engine(target, engine_config_for(target, speculative="draft"), draft)
    greedy = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)

    async def body(e: Engine) -> dict[str, RequestOutput]:
        streams = {rid: e.add_request(rid, ids, greedy) for rid, ids in prompts.items()}
        e.start()
        return dict(zip(streams, await asyncio.gather(*(s.collect() for s in streams.values()))))

    return run_engine(engine, body, autostart=False), engine


def check_greedy_equality(target_path: Path, draft_path: Path, texts: list[str], max_tokens: int) -> Engine:
    target = open_runtime(target_path, slots=len(texts), cache_slots=len(texts))
    draft_runtime = open_runtime(draft_path, slots=len(texts), cache_slots=0)
    reference = open_runtime(target_path, slots=1, cache_slots=0)
    draft = DraftModel(draft_runtime, draft_tokens=4)
    try:
        check_same_vocabulary(target, draft_runtime, str(target_path), str(draft_path))
        prompts = {f"r{i}": target.tokenizer.encode(text) for i, text in enumerate(texts)}
        results, engine = serve_with_draft(target, draft, prompts, max_tokens)
        for rid, ids in prompts.items():
            want, rows = greedy_alone(reference, ids, max_tokens)
            assert_same_greedy(want, results[rid].token_ids, rows)
        # Each draft slot holds what it was fed, which is a prefix of its sequence's tokens and guesses.
        for slot in range(len(texts)):
            fed = draft._slots[slot].fed  # noqa: SLF001 - the bookkeeping under test
            assert fed is not None and draft_runtime.held_tokens(slot) == len(fed)
        assert draft.failures == 0 and target.kv_cells_used() == 0
        return engine
    finally:
        target.close()
        draft_runtime.close()
        reference.close()


def test_greedy_with_a_q8_0_draft_of_the_tiny_model_is_plain_greedy(tiny_gguf_factory) -> None:
    texts = [f"def function_{i}(value):\n    return value * {i}\n" for i in range(4)]
    engine = check_greedy_equality(tiny_gguf_factory("llama-gqa", "F16"), tiny_gguf_factory("llama-gqa", "Q8_0"),
                                   texts, 32)
    stats = engine.stats()
    # A Q8_0 copy of the same weights agrees with the target on nearly every token.
    assert stats.speculative_accepted_total["draft"] > 0.8 * stats.speculative_drafted_total["draft"]


def test_greedy_with_a_q4_0_draft_of_smollm2_is_plain_greedy(tmp_path_factory: pytest.TempPathFactory) -> None:
    draft = requantized_smollm2(tmp_path_factory.mktemp("smollm2-draft"), "Q4_0")
    texts = [CHAT.format("Write a short poem about the sea."), CHAT.format("List three uses of Python.")]
    engine = check_greedy_equality(smollm2_gguf_path(), draft, texts, 24)
    stats = engine.stats()
    assert 0 < stats.speculative_accepted_total["draft"] < stats.speculative_drafted_total["draft"]


def test_a_draft_with_another_vocabulary_is_refused(tiny_gguf_factory) -> None:
    tiny = tiny_gguf_factory("llama-gqa", "F16")
    target = open_runtime(smollm2_gguf_path(), slots=1, cache_slots=0)
    draft = open_runtime(tiny, slots=1, cache_slots=0)
    try:
        with pytest.raises(ConfigError) as refused:
            check_same_vocabulary(target, draft, "SmolLM2.gguf", "tiny.gguf")
        message = str(refused.value)
        assert "SmolLM2.gguf" in message and "tiny.gguf" in message
        assert f"{draft.info.vocab_size}-token" in message and f"{target.info.vocab_size}-token" in message
    finally:
        target.close()
        draft.close()
