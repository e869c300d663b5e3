"""Flash or plain attention on llama.cpp (runtimes/llama_cpp/attention.py): the real SmolLM2-135M-Instruct
greedy-decodes the same text with either, ``measured`` takes the faster one as timed (and remembers the
timing per model file and device, measured by a child process once the model serves, never during the load), and
keeps llama.cpp's choice where plain attention cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp import attention, load_gguf
from edgeopt.runtimes.llama_cpp.attention import AttentionTiming

from edgeopt.demo.smollm2 import smollm2_gguf_path
from edgeopt.errors import BackendError
from edgeopt.store.file_stamp import file_stamp
from tests.runtimes.test_llama_cpp import THREADS, assert_same_greedy, greedy_alone


def open_streams(path: Path, flash_attention: str, kv_type: str = "f16", n_gpu_layers: int = 0):
    return load_gguf(path, kv_capacity_tokens=2048, max_slots=1, max_batch_tokens=128, threads=THREADS,
                     n_gpu_layers=n_gpu_layers, cache_slots=0, context_length=1024, kv_layout="streams",
                     kv_type=kv_type, flash_attention=flash_attention)


@pytest.fixture(scope="module")
def tiny_gguf(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory("llama-gqa", "F16")


def test_plain_attention_decodes_the_real_models_text_as_flash_attention_does() -> None:
    path = smollm2_gguf_path()
    flash, plain = open_streams(path, "on"), open_streams(path, "off")
    try:
        assert (flash.flash_attention, plain.flash_attention) == (True, False)
        prompt = flash.tokenizer.encode("The three primary colours are red, yellow and blue. Mixing red and blue "
                                        "gives purple; mixing yellow and blue gives")
        # Every prompt position's logits (scores over up to 30 cells), then 32 greedy tokens
        rows = [runtime.step([StepInput(0, prompt, 0, True, all_logits=True)]) for runtime in (flash, plain)]
        for runtime in (flash, plain):
            runtime.release(0)
        # Flash attention accumulates in f16 on the CPU, so the two differ by more than a batch layout does
        # (measured: mean 0.18 on logits whose spread is 5.2), in the token a position ranks first only at a
        # near-tie (an AMD EPYC: one position of 23, its two tokens 0.29 apart under flash, 0.11 under plain).
        assert np.abs(rows[0] - rows[1]).mean() < 0.1 * rows[0].std()
        near_tie = 0.1 * rows[0].std()
        for position in np.nonzero(rows[0].argmax(axis=1) != rows[1].argmax(axis=1))[0]:
            a, b = rows[0][position].argmax(), rows[1][position].argmax()
            gaps = (rows[0][position, a] - rows[0][position, b], rows[1][position, b] - rows[1][position, a])
            assert max(gaps) < near_tie, f"position {position}: flash ranks {a} first, plain {b}, gaps {gaps}"
        expected, expected_rows = greedy_alone(flash, prompt, 32)
        got, _ = greedy_alone(plain, prompt, 32)
        assert_same_greedy(expected, got, expected_rows, tolerance=near_tie)
    finally:
        flash.close()
        plain.close()


def test_measured_takes_plain_attention_only_when_clearly_faster(tiny_gguf: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def timings(plain_step: float):
        return lambda *args: (AttentionTiming(0.5, 0.010), AttentionTiming(0.5, plain_step))

    # A request of 384 + 128 tokens: 0.5 + 128 x 10 ms with flash attention
    for plain_step, flash in ((0.007, False), (0.0097, True), (0.013, True)):
        monkeypatch.setattr(attention, "saved_timings", timings(plain_step))
        runtime = open_streams(tiny_gguf, "measured")
        assert runtime.flash_attention is flash, plain_step
        runtime.close()


def test_the_timing_waits_for_the_model_to_serve_and_the_next_load_takes_it(tiny_gguf: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path))  # nothing timed by another test
    real_probe = attention.probe

    def must_not_time(*args):
        raise AssertionError("timed")

    monkeypatch.setattr(attention, "probe", must_not_time)
    first = open_streams(tiny_gguf, "measured")  # nothing timed yet: llama.cpp's choice, the load never times
    assert first.flash_attention is None and first.attention_timing is not None
    assert first.attention_timing.thread is None  # not before the server says the model serves
    monkeypatch.setattr(attention, "probe", real_probe)
    first.after_ready()
    first.attention_timing.thread.join(timeout=120)
    first.close()
    saved = attention._timing_file(file_stamp(tiny_gguf), THREADS, 128)
    timings = json.loads(saved.read_text())
    assert timings["flash"]["step_seconds"] > 0 and timings["plain"]["prefill_seconds"] > 0
    assert first.attention_timing.flash_next is not None

    monkeypatch.setattr(attention, "probe", must_not_time)
    again = open_streams(tiny_gguf, "measured")
    assert again.flash_attention == first.attention_timing.flash_next and again.attention_timing is None
    again.after_ready()  # nothing left to time
    again.close()


def test_a_timing_that_fails_or_is_killed_leaves_the_model_serving(tiny_gguf: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    def killed(command, **kwargs):  # the child ended by a signal (OOM killer, an operator's kill)
        return subprocess.CompletedProcess(command, -9, "", "")

    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path))
    monkeypatch.setattr(attention.subprocess, "run", killed)
    runtime = open_streams(tiny_gguf, "measured")
    try:
        runtime.after_ready()
        runtime.attention_timing.thread.join(timeout=30)
        assert runtime.attention_timing.flash_next is None  # nothing learnt, nothing kept: a later load times again
        assert attention.saved_timings(THREADS, 128, file_stamp(tiny_gguf)) is None
        prompt = runtime.tokenizer.encode("hello there")
        assert runtime.step([StepInput(0, prompt, 0, True)]).shape[0] == 1  # still serving
    finally:
        runtime.close()


def test_llama_cpps_choice_stays_where_plain_attention_cannot_run(tiny_gguf: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_measure(*args):
        raise AssertionError("measured")

    monkeypatch.setattr(attention, "measured_timings", must_not_measure)
    monkeypatch.setattr(attention, "saved_timings", must_not_measure)
    # (the tiny model's 16-wide heads cannot hold a q8_0 cache: SmolLM2's 64 can)
    for runtime in (open_streams(tiny_gguf, "llama-auto"), open_streams(smollm2_gguf_path(), "measured", kv_type="q8_0")):
        assert runtime.flash_attention is None
        runtime.close()
    choice = attention.resolve_flash_attention("measured", tiny_gguf, on_cpu=False, kv_quantized=False, threads=1,
                                               batch_tokens=128, model_key=())
    assert choice == attention.AttentionChoice(None)  # a GPU or RPC workers: nothing to time either


def test_a_file_the_probe_cannot_time_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(BackendError) as caught:
        attention.measured_timings(broken, 1, 128, file_stamp(broken))
    assert "timing flash against plain attention on" in caught.value.message and str(broken) in caught.value.message
    assert "--flash-attention on" in caught.value.hint


def test_a_saved_kv_state_names_the_v_layout_it_was_saved_in(tiny_gguf: Path) -> None:
    # Plain attention stores V transposed: llama.cpp reads a sequence state back only into the same layout, so
    # `--warm` and the swap space refuse (and recompute) a state saved under the other kernel.
    from types import SimpleNamespace

    from edgeopt.server.models.swap_index import fingerprint_differences
    from edgeopt.server.startup.prompt_state import fingerprint

    manifest = SimpleNamespace(files={}, model_file=tiny_gguf.name)
    flash, plain = open_streams(tiny_gguf, "on"), open_streams(tiny_gguf, "off")
    try:
        saved, served = fingerprint(manifest, flash), fingerprint(manifest, plain)
        assert (saved["v_transposed"], served["v_transposed"]) == (False, True)
        assert fingerprint_differences(saved, served) == ["v_transposed False (this server: True)"]
    finally:
        flash.close()
        plain.close()
