"""The torch runtime (CPU path) through the Runtime protocol, against transformers' own forward."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import BackendError, ConfigError
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.base import StepInput
from tests.runtimes.torch_bundles import make_torch_bundle, reference_logits

ATOL = 2e-4  # float32 on CPU: batched/padded attention reorders sums, nothing more


@pytest.fixture(scope="module")
def bundles(tiny_model_factory, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """variant -> (source checkpoint, torch bundle); built lazily, once per module."""
    built: dict[str, tuple[Path, Path]] = {}

    class Lazy(dict):
        def __missing__(self, variant: str) -> tuple[Path, Path]:
            source = tiny_model_factory(variant)
            built[variant] = (source, make_torch_bundle(source, tmp_path_factory.mktemp("torch") / variant))
            return built[variant]

    return Lazy()


def open_runtime(bundle: Path, **options):
    return load_runtime("torch", bundle, load_bundle(bundle), threads=2, device="cpu", **options)


def prompt(n: int, offset: int = 0) -> list[int]:
    return [(37 * i + 11 + offset) % 400 + 3 for i in range(n)]


@pytest.mark.parametrize("variant", ["llama-gqa", "qwen2", "qwen3", "llama-tied"])
def test_chunked_prefill_then_decode_equals_one_full_forward(bundles, variant: str) -> None:
    source, bundle = bundles[variant]
    tokens = prompt(14)
    expected = reference_logits(source, tokens)
    rt = open_runtime(bundle)
    got = [rt.step([StepInput(0, tokens[:6], 0, True)])[0], rt.step([StepInput(0, tokens[6:11], 6, True)])[0]]
    for pos in range(11, 14):
        got.append(rt.step([StepInput(0, [tokens[pos]], pos, True)])[0])
    want = np.stack([expected[5], expected[10], expected[11], expected[12], expected[13]])
    np.testing.assert_allclose(np.stack(got), want, atol=ATOL)
    assert got[0].dtype == np.float32 and rt.kv_used_tokens == 14


@pytest.mark.parametrize("variant", ["llama-gqa", "qwen3"])
def test_batched_decode_of_slots_with_different_lengths_equals_single_slot_runs(bundles, variant: str) -> None:
    source, bundle = bundles[variant]
    prompts = {0: prompt(9), 3: prompt(4, 5), 5: prompt(17, 9)}
    rt = open_runtime(bundle, max_slots=6)
    for slot, ids in prompts.items():
        rt.step([StepInput(slot, ids[:-1], 0, False)])
    before = rt.forwards
    out = rt.step([StepInput(slot, [ids[-1]], len(ids) - 1, True) for slot, ids in prompts.items()])
    assert rt.forwards == before + 1, "decodes of several slots must share one forward"
    for row, ids in enumerate(prompts.values()):
        np.testing.assert_allclose(out[row], reference_logits(source, ids)[-1], atol=ATOL)
    # A second batched step keeps every slot's history intact.
    nxt = {slot: int(np.argmax(out[row])) for row, slot in enumerate(prompts)}
    out2 = rt.step([StepInput(slot, [nxt[slot]], len(ids), True) for slot, ids in prompts.items()])
    for row, (slot, ids) in enumerate(prompts.items()):
        np.testing.assert_allclose(out2[row], reference_logits(source, ids + [nxt[slot]])[-1], atol=ATOL)


def test_mixed_batch_returns_rows_only_for_inputs_that_want_logits_in_batch_order(bundles) -> None:
    source, bundle = bundles["llama-gqa"]
    rt = open_runtime(bundle)
    a, b, c = prompt(5), prompt(7, 1), prompt(3, 2)
    rt.step([StepInput(0, a[:-1], 0, False), StepInput(1, b[:-1], 0, False)])
    out = rt.step([StepInput(2, c, 0, True), StepInput(0, [a[-1]], 4, False), StepInput(1, [b[-1]], 6, True)])
    assert out.shape == (2, rt.info.vocab_size)
    np.testing.assert_allclose(out[0], reference_logits(source, c)[-1], atol=ATOL)
    np.testing.assert_allclose(out[1], reference_logits(source, b)[-1], atol=ATOL)
    assert rt.step([StepInput(0, [1], 5, False)]).shape == (0, rt.info.vocab_size)


def test_release_forgets_the_slot_and_position_zero_starts_again(bundles) -> None:
    source, bundle = bundles["llama-gqa"]
    rt = open_runtime(bundle, kv_capacity_tokens=12, max_slots=2)
    rt.step([StepInput(0, prompt(10), 0, False)])
    rt.release(0)
    assert rt.kv_used_tokens == 0
    out = rt.step([StepInput(0, prompt(10, 3), 0, True)])
    np.testing.assert_allclose(out[0], reference_logits(source, prompt(10, 3))[-1], atol=ATOL)


@pytest.mark.parametrize("batch, message", [
    ([StepInput(7, [5], 0, True)], "outside"),
    ([StepInput(0, [5], 3, True)], "start_pos 3"),
    ([StepInput(0, list(range(3, 20)), 0, True)], "KV overflow"),
    ([StepInput(1, [99999], 0, True)], "token ids"),
    ([], "empty batch"),
])
def test_contract_violations_raise_backend_errors(bundles, batch, message: str) -> None:
    rt = open_runtime(bundles["llama-gqa"][1], kv_capacity_tokens=16, max_slots=2)
    with pytest.raises(BackendError, match=message):
        rt.step(batch)


def test_runtime_info_comes_from_the_checkpoint_and_the_sizing(bundles) -> None:
    source, bundle = bundles["llama-gqa"]
    rt = open_runtime(bundle, kv_capacity_tokens=300, max_slots=3, context_length=100000)
    config = __import__("json").loads((source / "config.json").read_text())
    assert rt.info.vocab_size == config["vocab_size"]
    assert rt.info.context_length == config["max_position_embeddings"]  # capped by the model
    assert (rt.info.kv_capacity_tokens, rt.info.max_slots) == (300, 3)
    assert rt.info.eos_token_ids == frozenset({config["eos_token_id"]})
    assert rt.info.add_bos is False  # byte-level BPE with ChatML adds no BOS


def test_tokenizer_round_trips_raw_bytes_including_multibyte_text(bundles) -> None:
    rt = open_runtime(bundles["llama-gqa"][1])
    text = "def f(x):\n    return x  # é — ✓ 日本"
    ids = rt.tokenizer.encode(text, add_special=False)
    assert b"".join(rt.tokenizer.token_bytes(t) for t in ids) == text.encode("utf-8")
    im_end = rt.tokenizer.encode("<|im_end|>", add_special=False)
    assert len(im_end) == 1 and rt.tokenizer.token_bytes(im_end[0]) == b""


def test_unknown_option_is_refused_by_name(bundles) -> None:
    with pytest.raises(ConfigError, match="n_gpu_layers"):
        open_runtime(bundles["llama-gqa"][1], n_gpu_layers=99)
