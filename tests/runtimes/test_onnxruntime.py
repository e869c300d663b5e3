"""The ONNX Runtime backend: per-slot KV, batched decode equal to single runs, tokenizer bytes."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import BackendError, ConfigError
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer, byte_level_decoder_table
from tests.fixtures.import_probe import banned_modules_after


@pytest.fixture()
def runtime(onnx_fp32_bundle):
    manifest = load_bundle(onnx_fp32_bundle)
    rt = load_runtime("onnxruntime", onnx_fp32_bundle, manifest, kv_capacity_tokens=1024, max_slots=4,
                      context_length=256, threads=1)
    yield rt
    rt.close()


def full_logits(rt, ids: list[int]) -> np.ndarray:
    return rt.decoder.logits_for(ids)


def test_byte_level_table_is_a_bijection_over_bytes():
    table = byte_level_decoder_table()
    assert sorted(table.values()) == list(range(256))
    assert table["Ġ"] == 0x20 and table["Ċ"] == 0x0A and table["a"] == ord("a")


def test_tokenizer_token_bytes_rebuild_utf8_text(onnx_fp32_bundle):
    tok = BundleTokenizer(onnx_fp32_bundle / "tokenizer" / "tokenizer.json")
    text = "def f(x):\n    return 'héllo → wörld' ✓"
    ids = tok.encode(text, add_special=False)
    assert b"".join(tok.token_bytes(i) for i in ids).decode("utf-8") == text
    eos = tok.token_id("<|im_end|>")
    assert tok.token_bytes(eos) == b""  # control tokens never reach the text stream


def test_runtime_info_from_bundle(runtime):
    info = runtime.info
    assert info.vocab_size == 512 and info.max_slots == 4 and info.kv_capacity_tokens == 1024
    assert info.context_length == 256
    assert runtime.tokenizer.token_id("<|im_end|>") in info.eos_token_ids


def test_prefill_then_decode_matches_one_full_pass(runtime):
    ids = runtime.tokenizer.encode("The function returns a list of the keys in the dictionary", add_special=False)
    reference = full_logits(runtime, ids)
    out = runtime.step([StepInput(slot=0, tokens=ids[:5], start_pos=0, want_logits=False)])
    assert out.shape == (0, 512)
    out = runtime.step([StepInput(slot=0, tokens=ids[5:9], start_pos=5, want_logits=True)])  # chunked prefill
    np.testing.assert_allclose(out[0], reference[8], atol=1e-4)
    for pos in range(9, len(ids)):
        out = runtime.step([StepInput(slot=0, tokens=[ids[pos]], start_pos=pos, want_logits=True)])
        np.testing.assert_allclose(out[0], reference[pos], atol=1e-4)


def test_batched_decode_of_unequal_slots_equals_single_runs(runtime):
    prompts = [runtime.tokenizer.encode(t, add_special=False) for t in
               ("import json", "Open the file in binary mode before reading it", "x")]
    refs = [full_logits(runtime, p + [7, 8, 9]) for p in prompts]
    runtime.step([StepInput(slot=s, tokens=p, start_pos=0, want_logits=True) for s, p in enumerate(prompts)])
    for k, token in enumerate([7, 8, 9]):
        batch = [StepInput(slot=s, tokens=[token], start_pos=len(p) + k, want_logits=True)
                 for s, p in enumerate(prompts)]
        out = runtime.step(batch)
        for s, p in enumerate(prompts):
            np.testing.assert_allclose(out[s], refs[s][len(p) + k], atol=1e-4)


def test_decode_group_survives_joins_leaves_and_rewinds(runtime):
    """The batched KV kept between decode steps splits and re-forms without changing any result."""
    texts = {0: "import json", 1: "Open the file in binary mode", 2: "x"}
    seqs = {s: runtime.tokenizer.encode(t, add_special=False) for s, t in texts.items()}
    runtime.step([StepInput(slot=s, tokens=ids, start_pos=0, want_logits=False) for s, ids in seqs.items()])

    def decode(slots, token):
        batch = [StepInput(slot=s, tokens=[token], start_pos=len(seqs[s]), want_logits=True) for s in slots]
        out = runtime.step(batch)
        for row, s in enumerate(slots):
            seqs[s] = seqs[s] + [token]
            np.testing.assert_allclose(out[row], full_logits(runtime, seqs[s])[-1], atol=1e-4)

    decode([0, 1, 2], 7)
    decode([0, 1, 2], 8)  # continues the group
    runtime.release(1)  # a slot leaves
    assert runtime.cached_tokens(1) == 0 and runtime.cached_tokens(0) == len(seqs[0])
    decode([2, 0], 9)  # re-formed, in another order
    seqs[3] = runtime.tokenizer.encode("class", add_special=False)
    out = runtime.step([StepInput(slot=3, tokens=seqs[3], start_pos=0, want_logits=True)])  # a slot joins
    decode([2, 0, 3], 10)
    seqs[0] = seqs[0][:2]  # rewind a grouped slot: recompute from position 2
    out = runtime.step([StepInput(slot=0, tokens=[11], start_pos=2, want_logits=True)])
    seqs[0] = seqs[0] + [11]
    np.testing.assert_allclose(out[0], full_logits(runtime, seqs[0])[-1], atol=1e-4)
    decode([0, 2, 3], 12)


def test_mixed_batch_returns_rows_in_batch_order(runtime):
    a = runtime.tokenizer.encode("hello world", add_special=False)
    b = runtime.tokenizer.encode("class documentation", add_special=False)
    runtime.step([StepInput(slot=1, tokens=a, start_pos=0, want_logits=False)])
    out = runtime.step([StepInput(slot=2, tokens=b, start_pos=0, want_logits=True),
                        StepInput(slot=1, tokens=[5], start_pos=len(a), want_logits=True)])
    np.testing.assert_allclose(out[0], full_logits(runtime, b)[-1], atol=1e-4)
    np.testing.assert_allclose(out[1], full_logits(runtime, a + [5])[-1], atol=1e-4)


def test_release_and_rewind(runtime):
    ids = [11, 12, 13, 14, 15, 16]
    runtime.step([StepInput(slot=3, tokens=ids, start_pos=0, want_logits=False)])
    assert runtime.cached_tokens(3) == 6
    # Recompute from position 3 with different tokens: the KV beyond start_pos is dropped.
    out = runtime.step([StepInput(slot=3, tokens=[40, 41], start_pos=3, want_logits=True)])
    np.testing.assert_allclose(out[0], full_logits(runtime, ids[:3] + [40, 41])[-1], atol=1e-4)
    runtime.release(3)
    assert runtime.cached_tokens(3) == 0


def test_contradictory_steps_are_refused(runtime):
    with pytest.raises(BackendError, match="start_pos 4 but only 0"):
        runtime.step([StepInput(slot=0, tokens=[1], start_pos=4, want_logits=True)])
    with pytest.raises(BackendError, match="slot 9 is out of range"):
        runtime.step([StepInput(slot=9, tokens=[1], start_pos=0, want_logits=True)])
    with pytest.raises(BackendError, match="exceed the context length 256"):
        runtime.step([StepInput(slot=0, tokens=[1] * 257, start_pos=0, want_logits=True)])


def test_greedy_generation_matches_transformers(runtime, tiny_llama_dir):
    import torch
    from transformers import AutoModelForCausalLM

    prompt = runtime.tokenizer.encode("The function returns", add_special=False)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir), dtype=torch.float32)
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                              pad_token_id=0)[0, len(prompt):].tolist()
    logits = runtime.step([StepInput(slot=0, tokens=prompt, start_pos=0, want_logits=True)])
    got, pos = [], len(prompt)
    for _ in range(12):
        got.append(int(logits[0].argmax()))
        logits = runtime.step([StepInput(slot=0, tokens=[got[-1]], start_pos=pos, want_logits=True)])
        pos += 1
    assert got == expected


def test_unknown_provider_and_bad_context_are_clear_errors(onnx_fp32_bundle):
    manifest = load_bundle(onnx_fp32_bundle)
    with pytest.raises(BackendError, match="not in this onnxruntime build"):
        load_runtime("onnxruntime", onnx_fp32_bundle, manifest, providers=["tensorrt"])
    with pytest.raises(ConfigError, match="exceeds the model's max_position_embeddings 512"):
        load_runtime("onnxruntime", onnx_fp32_bundle, manifest, context_length=4096)


def test_serving_path_does_not_import_torch(onnx_fp32_bundle):
    code = ("from edgeopt.store.bundle import load_bundle; from edgeopt.runtimes import load_runtime; "
            f"b = {str(onnx_fp32_bundle)!r}; rt = load_runtime('onnxruntime', b, load_bundle(b), threads=1); "
            "import edgeopt.server.openai.embeddings")
    assert banned_modules_after(code, must_load=("onnxruntime", "edgeopt.server.openai.embeddings")) == []


def test_engine_continuous_batching_matches_requests_run_alone(runtime):
    """Real engine scheduling (joins, finishes, mixed prefill + decode steps) over the decode group."""
    from edgeopt.engine import SamplingParams
    from tests.engine.helpers import make_engine, run_engine

    texts = ["import json", "Open the file in binary mode", "x", "The function returns a list", "class A:"]
    prompts = {f"r{i}": runtime.tokenizer.encode(t, add_special=False) for i, t in enumerate(texts)}
    lengths = {rid: 3 + 2 * i for i, rid in enumerate(prompts)}  # requests finish at different steps

    def alone(ids: list[int], n: int) -> list[int]:
        out, logits = [], runtime.step([StepInput(slot=0, tokens=ids, start_pos=0, want_logits=True)])
        for pos in range(len(ids), len(ids) + n):
            out.append(int(logits[0].argmax()))
            logits = runtime.step([StepInput(slot=0, tokens=[out[-1]], start_pos=pos, want_logits=True)])
        runtime.release(0)
        return out

    expected = {rid: alone(ids, lengths[rid]) for rid, ids in prompts.items()}
    engine, _ = make_engine(runtime, max_running=3)  # 5 requests on 3 slots: slots are reused

    async def body(engine):  # queue all five, then start, so they compete for the three slots
        streams = {rid: engine.add_request(rid, ids, SamplingParams(max_tokens=lengths[rid], temperature=0.0,
                                                                    ignore_eos=True)) for rid, ids in prompts.items()}
        engine.start()
        return {rid: await stream.collect() for rid, stream in streams.items()}

    got = run_engine(engine, body, autostart=False)
    assert {rid: out.token_ids for rid, out in got.items()} == expected
