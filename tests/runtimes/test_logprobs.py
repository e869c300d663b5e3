"""logprobs and prompt logprobs (echo) from the engine equal the runtime's own log-softmax, on a real GGUF
(llama.cpp), a real ONNX bundle and a torch bundle (CPU).

The runtime is wrapped to record every step's logits: each logprob the engine reports must equal the
float64 log-softmax of the row the runtime returned for that position (within 1e-4), top_logprobs must
be that row's best tokens, sorted, with the chosen token's value wherever it appears among them. A second
reference runs the runtime by hand, one token per step on a free slot: it proves the rows belong to the
right positions (llama.cpp's batched kernels differ from its one-token ones by ~1e-3, hence the looser
LOGIT_TOLERANCE there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.engine import Engine, SamplingParams
from edgeopt.engine.api import TokenLogprob
from edgeopt.engine.engine_config import engine_config_for
from edgeopt.engine.logprobs import log_softmax
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.base import Runtime, StepInput
from edgeopt.runtimes.llama_cpp import load_gguf
from tests.engine.helpers import run_engine

TOLERANCE = 1e-4
LOGIT_TOLERANCE = 2e-2  # one-token steps vs batched steps (tests/runtimes/test_llama_cpp.py)
TOP = 5
PROMPT = "def add(a, b):\n    return a + b\n\nclass Point:"
REFERENCE_SLOT = 3  # the engine below runs on slots 0..2


@pytest.fixture(scope="module", params=["llama_cpp", "onnxruntime", "torch"])
def runtime(request, tiny_gguf_factory, onnx_fp32_bundle, tiny_llama_dir, tmp_path_factory):
    if request.param == "llama_cpp":
        rt = load_gguf(tiny_gguf_factory("llama-gqa", "F16"), kv_capacity_tokens=1024, max_slots=4,
                       max_batch_tokens=128, threads=1, n_gpu_layers=0)
    elif request.param == "torch":
        from tests.runtimes.torch_bundles import make_torch_bundle

        bundle = make_torch_bundle(tiny_llama_dir, tmp_path_factory.mktemp("torch") / "bundle")
        rt = load_runtime("torch", bundle, load_bundle(bundle), kv_capacity_tokens=1024, max_slots=4,
                          context_length=256, threads=1, device="cpu")
    else:
        rt = load_runtime("onnxruntime", onnx_fp32_bundle, load_bundle(onnx_fp32_bundle), kv_capacity_tokens=1024,
                          max_slots=4, context_length=256, threads=1)
    yield rt
    rt.close()


class RecordingRuntime:
    """The runtime, recording which logits row each step returned for which (slot, position)."""

    def __init__(self, runtime: Runtime) -> None:
        self.inner = runtime
        self.info = runtime.info
        self.tokenizer = runtime.tokenizer
        self.max_batch_tokens = runtime.max_batch_tokens
        self.rows: dict[tuple[int, int], np.ndarray] = {}  # (slot, position of the token before) -> logits

    def step(self, batch: list[StepInput]) -> np.ndarray:
        logits = self.inner.step(batch)
        at = 0
        for item in batch:
            positions = range(item.start_pos, item.start_pos + len(item.tokens))
            wanted = list(positions) if item.all_logits else [positions[-1]] if item.want_logits else []
            for pos in wanted:
                self.rows[(item.slot, pos)] = logits[at].copy()
                at += 1
        return logits

    def release(self, slot: int) -> None:
        self.inner.release(slot)

    def close(self) -> None:
        pass


def engine_for(runtime: Runtime) -> Engine:
    return Engine(runtime, engine_config_for(runtime, max_running=3))


def reference_rows(runtime: Runtime, tokens: list[int]) -> np.ndarray:
    """Log-softmax after each token of ``tokens``, running the runtime one token per step."""
    rows = []
    for pos, token in enumerate(tokens):
        rows.append(log_softmax(runtime.step([StepInput(REFERENCE_SLOT, [token], pos, True)])[0]))
    runtime.release(REFERENCE_SLOT)
    return np.stack(rows)


def assert_matches(entry: TokenLogprob, expected: np.ndarray, token: int, tolerance: float = TOLERANCE) -> None:
    assert entry.token_id == token
    assert abs(entry.logprob - expected[token]) < tolerance
    values = [lp for _, lp in entry.top]
    assert values == sorted(values, reverse=True) and len(entry.top) == TOP
    best = np.sort(expected)[::-1][:TOP]
    assert np.allclose(values, best, atol=tolerance)
    for top_token, lp in entry.top:
        assert abs(lp - expected[top_token]) < tolerance
        if top_token == token:
            assert lp == entry.logprob


def test_generated_and_prompt_logprobs_match_the_runtime_log_softmax(runtime: Runtime) -> None:
    recording = RecordingRuntime(runtime)
    prompt = runtime.tokenizer.encode(PROMPT, add_special=False)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=TOP, prompt_logprobs=TOP)
    other = SamplingParams(max_tokens=12, temperature=0.8, seed=1, ignore_eos=True)  # shares the batched steps

    async def body(engine: Engine):
        streams = [engine.add_request("lp", prompt, params),
                   engine.add_request("other", runtime.tokenizer.encode("import os", add_special=False), other)]
        engine.start()  # both queued first: they share the batched steps
        return [await s.collect() for s in streams]

    out, _ = run_engine(engine_for(recording), body, autostart=False)
    assert out.finish_reason == "length" and len(out.logprobs or []) == 12
    tokens = prompt + out.token_ids
    slot = next(slot for (slot, pos) in recording.rows if pos == len(tokens) - 2)  # "lp" is the longer one
    stepped = {pos: log_softmax(row) for (s, pos), row in recording.rows.items() if s == slot}
    by_hand = reference_rows(runtime, tokens)
    for i, (token, entry) in enumerate(zip(out.token_ids, out.logprobs or [])):
        pos = len(prompt) - 1 + i  # the row after this position predicted output token i
        assert_matches(entry, stepped[pos], token)
        assert_matches(entry, by_hand[pos], token, LOGIT_TOLERANCE)
        assert token == int(np.argmax(stepped[pos]))  # greedy: the best token
    assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(prompt)
    assert out.prompt_logprobs[0] is None  # nothing predicts the first prompt token
    for pos in range(1, len(prompt)):
        entry = out.prompt_logprobs[pos]
        assert entry is not None
        assert_matches(entry, stepped[pos - 1], prompt[pos])
        assert_matches(entry, by_hand[pos - 1], prompt[pos], LOGIT_TOLERANCE)
