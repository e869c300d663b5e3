"""The swap space on the real SmolLM2-135M-Instruct GGUF: a conversation whose model was unloaded and loaded
again reads its prefix from the restored cache (and answers as it would have without the swap); the states
of all models stay within the capacity, the least recently saved going first; a corrupt, truncated or
foreign state is ignored with a warning naming its file, never loaded, and removed."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.engine import SamplingParams
from edgeopt.errors import ConfigError
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
from edgeopt.server.models.swap_index import INDEX, STATE_SUFFIX, folder_name
from edgeopt.server.models.swap_space import SwapSpace
from edgeopt.server.state import ServedModel
from tests.engine.helpers import make_engine
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.gguf_bundle import smollm2_bundle

SYSTEM = "You are the assistant of a robotics lab. Answer in one short paragraph. " * 3
QUESTIONS = ("What is a servo motor?", "How do I calibrate a lidar?", "Why does my robot drift left?")


@pytest.fixture(scope="module")
def bundle(smollm2_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return smollm2_bundle(smollm2_checkpoint, tmp_path_factory.mktemp("swap") / "smollm2")


def load(bundle: Path, kv_layout: str = "unified") -> ServedModel:
    manifest = load_bundle(bundle)
    # (speculation off: answers are compared across loads, and a drafted step moves the logits' last bits)
    options = ServeOptions(memory_bytes=1 << 30, context=1024, max_concurrency=2, threads=1, kv_layout=kv_layout,
                           speculative="off")
    return load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)


@pytest.fixture(scope="module")
def served(bundle: Path):
    """One loaded model for the tests that do not need a fresh one (each empties its prefix cache first)."""
    model = load(bundle)
    yield model
    model.close()


def turn(model: ServedModel, messages: list[dict[str, str]]) -> tuple[str, int, int]:
    """One greedy chat turn: (answer, its prompt tokens, prompt tokens the prefix cache served)."""
    prompt = model.tokenizer.encode(model.chat_template.render(messages))

    async def run():
        return await model.engine.add_request(f"turn-{len(prompt)}", prompt,
                                              SamplingParams(max_tokens=8, temperature=0.0)).collect()

    out = asyncio.run(run())
    return out.text, len(prompt), out.cached_tokens


def first_turns(model: ServedModel, count: int) -> list[list[dict[str, str]]]:
    """``count`` conversations' first turns (the last one most recently used); returns their second turns."""
    model.engine.clear_prefix_cache()
    follow_ups = []
    for question in QUESTIONS[:count]:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        answer, _, _ = turn(model, messages)
        follow_ups.append(messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Why?"}])
    return follow_ups


def space_for(tmp_path: Path, model: ServedModel, bundle: Path, capacity: int = 1 << 30) -> tuple[SwapSpace, dict]:
    space = SwapSpace(tmp_path / "swap", capacity)
    return space, space.fingerprint(bundle, load_bundle(bundle), model.runtime)


@pytest.mark.parametrize("kv_layout", ["unified", "streams"])
def test_the_next_turn_after_a_swap_reads_its_prefix_from_the_restored_cache(bundle, tmp_path, kv_layout) -> None:
    model = load(bundle, kv_layout)
    try:
        space, fingerprint = space_for(tmp_path, model, bundle)
        second, = first_turns(model, 1)
        record = space.save("smollm2", model.engine, model.runtime, fingerprint)
        expected_answer, prompt_tokens, cached_unswapped = turn(model, second)  # what it answers never swapped
    finally:
        model.close()
    assert record.entries == 1 and record.skipped == 0 and cached_unswapped == record.tokens > 60
    folder = tmp_path / "swap" / "smollm2"
    index = json.loads((folder / INDEX).read_text())
    assert index["fingerprint"] == fingerprint and len(index["entries"][0]["tokens"]) == record.tokens
    assert [p.suffix for p in folder.iterdir() if p.name != INDEX] == [STATE_SUFFIX]

    model = load(bundle, kv_layout)  # the model loads again: a fresh runtime and engine
    try:
        assert space.restore("smollm2", model.engine, model.runtime, fingerprint) == 1
        answer, _, cached = turn(model, second)
        stats = model.engine.stats()
    finally:
        model.close()
    assert cached == record.tokens and answer == expected_answer
    assert stats.prefill_tokens_total == prompt_tokens - cached  # only the new turn was computed


def test_capacity_keeps_the_most_recent_entries_and_evicts_the_least_recently_saved_model(served, bundle,
                                                                                         tmp_path) -> None:
    first_turns(served, 3)
    space, fingerprint = space_for(tmp_path, served, bundle)
    assert space.save("measure", served.engine, served.runtime, fingerprint).entries == 3
    sizes = [e["bytes"] for e in json.loads((tmp_path / "swap" / "measure" / INDEX).read_text())["entries"]]
    capacity = sizes[0] + sizes[1] + 4096  # the two most recent entries and an index; not the third
    space = SwapSpace(tmp_path / "capped", capacity)
    first = space.save("first", served.engine, served.runtime, fingerprint)
    assert (first.entries, first.skipped) == (2, 1) and space.used_bytes() <= capacity
    saved = json.loads((tmp_path / "capped" / "first" / INDEX).read_text())["entries"]
    assert [e["tokens"] for e in saved] == [p.tokens for p in served.engine.cached_prefixes()[:2]]  # the most recently used two

    second = space.save("second", served.engine, served.runtime, fingerprint)
    assert (second.entries, second.evicted) == (2, 2) and space.used_bytes() <= capacity
    assert not (tmp_path / "capped" / "first").exists()  # the least recently saved model went first, whole


def test_conversations_on_one_system_prompt_come_back_sharing_its_cells(served, bundle, tmp_path) -> None:
    second_turns = first_turns(served, 3)
    cached_before = served.engine.stats().kv_cached_tokens
    space, fingerprint = space_for(tmp_path, served, bundle)
    assert space.save("smollm2", served.engine, served.runtime, fingerprint).entries == 3
    served.engine.clear_prefix_cache()
    assert space.restore("smollm2", served.engine, served.runtime, fingerprint) == 3
    assert served.engine.stats().kv_cached_tokens == cached_before  # the system prompt's cells are kept once
    _, _, cached = turn(served, second_turns[0])  # the least recently used conversation resumes too
    assert cached > len(served.tokenizer.encode(SYSTEM))


@pytest.fixture(scope="module")
def saved_once(served, bundle, tmp_path_factory) -> tuple[Path, dict]:
    """A swap space holding one conversation's entry, saved once; each test damages its own copy."""
    first_turns(served, 1)
    space, fingerprint = space_for(tmp_path_factory.mktemp("pristine"), served, bundle)
    assert space.save("smollm2", served.engine, served.runtime, fingerprint).entries == 1
    return space.directory, fingerprint


def truncated_state(folder: Path) -> str:
    state = next(folder.glob(f"*{STATE_SUFFIX}"))
    state.write_bytes(state.read_bytes()[:1000])
    return state.name


def altered_state(folder: Path) -> str:
    state = next(folder.glob(f"*{STATE_SUFFIX}"))
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one KV byte: llama.cpp itself would load it without a word
    state.write_bytes(bytes(data))
    return state.name


def bad_json(folder: Path) -> str:
    (folder / INDEX).write_text('{"format": 2, "entries": [')
    return INDEX


def other_tokens(folder: Path) -> str:
    index = json.loads((folder / INDEX).read_text())
    index["entries"][0]["tokens"][-1] += 1  # the state itself is whole: llama.cpp reads other tokens back
    (folder / INDEX).write_text(json.dumps(index))
    return index["entries"][0]["file"]


def other_model(folder: Path) -> str:
    index = json.loads((folder / INDEX).read_text())
    index["fingerprint"]["model_sha256"] = "0" * 64
    (folder / INDEX).write_text(json.dumps(index))
    return INDEX


def other_kv_type(folder: Path) -> str:
    index = json.loads((folder / INDEX).read_text())
    index["fingerprint"]["kv_type"] = "q8_0"
    (folder / INDEX).write_text(json.dumps(index))
    return INDEX


@pytest.mark.parametrize("damage, says", [
    (truncated_state, r"holds 1000 bytes, not the \d+ saved"), (altered_state, "does not match the sha256"),
    (bad_json, "unreadable"), (other_tokens, "tokens are not the"),
    (other_model, "another model.*model_sha256 '0000"),
    (other_kv_type, r"another model.*kv_type 'q8_0' \(this server: 'f16'\)")],
    ids=["truncated", "altered", "bad-json", "other-tokens", "other-model", "other-kv-type"])
def test_a_corrupt_or_foreign_state_is_ignored_with_a_warning_and_removed(served, saved_once, tmp_path, caplog,
                                                                          damage, says) -> None:
    pristine, fingerprint = saved_once
    shutil.copytree(pristine, tmp_path / "swap")
    folder = tmp_path / "swap" / "smollm2"
    named = damage(folder)
    space = SwapSpace(tmp_path / "swap", 1 << 30)
    served.engine.clear_prefix_cache()
    caplog.set_level("INFO", logger="edgeopt.server")
    assert space.restore("smollm2", served.engine, served.runtime, fingerprint) == 0
    warning, = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert str(folder / named) in warning and "removed" in warning
    assert re.search(says, warning), warning
    assert served.engine.stats().kv_cached_tokens == 0  # nothing was loaded
    assert not folder.exists() and space.used_bytes() == 0


def test_a_runtime_without_sequence_state_saves_and_restores_nothing_and_says_so_once(tmp_path, caplog) -> None:
    engine, runtime = make_engine(FakeRuntime(cache_slots=4))  # like ONNX Runtime: a prefix cache, no state files
    space = SwapSpace(tmp_path / "swap", 1 << 20)
    caplog.set_level("INFO", logger="edgeopt.server")
    fingerprint = {"model_sha256": "f" * 64}
    assert space.save("onnx-model", engine, runtime, fingerprint).entries == 0
    assert space.restore("onnx-model", engine, runtime, fingerprint) == 0
    told = [r.getMessage() for r in caplog.records if "keeps no prefix-cache state" in r.getMessage()]
    assert len(told) == 1 and "onnx-model" in told[0] and space.used_bytes() == 0


def test_a_restart_removes_what_an_interrupted_save_left_and_keeps_the_saved_states(saved_once, tmp_path) -> None:
    pristine, _ = saved_once
    shutil.copytree(pristine, tmp_path / "swap")
    kept = sorted(p.name for p in (tmp_path / "swap" / "smollm2").iterdir())
    strays = [tmp_path / "swap" / "smollm2" / name for name in ("1-0.kvstate", "2-0.kvstate.partial")]
    interrupted = tmp_path / "swap" / "other-model"  # states written, index not yet
    interrupted.mkdir()
    for path in [*strays, interrupted / "3-0.kvstate"]:
        path.write_bytes(b"half a state")
    space = SwapSpace(tmp_path / "swap", 1 << 30)
    assert sorted(p.name for p in (tmp_path / "swap" / "smollm2").iterdir()) == kept
    assert not interrupted.exists() and space.used_bytes() == sum(p.stat().st_size for p in
                                                                   (tmp_path / "swap" / "smollm2").iterdir())


def test_a_directory_holding_other_files_is_not_taken_over(tmp_path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "keep-me.gguf").write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match=r"swap space .*models is a directory that holds other files.*new or empty"):
        SwapSpace(tmp_path / "models", 1 << 30)
    with pytest.raises(ConfigError, match=r"--swap-space -1 bytes is negative"):
        SwapSpace(tmp_path / "swap", -1)
    assert (tmp_path / "models" / "keep-me.gguf").exists()


def test_a_model_key_becomes_one_plain_folder_name() -> None:
    assert folder_name("smollm2") == "smollm2"
    assert folder_name("library/smollm2:latest") == "library%2Fsmollm2%3Alatest"
    assert folder_name("..") == "%2E." and folder_name(".hidden") == "%2Ehidden"


def test_the_fingerprint_of_a_bundle_and_of_its_gguf_served_where_it_lies(served, bundle, tmp_path) -> None:
    space = SwapSpace(tmp_path / "swap", 1 << 30)
    manifest = load_bundle(bundle)
    of_bundle = space.fingerprint_of(bundle, served.runtime)
    assert of_bundle == space.fingerprint(bundle, manifest, served.runtime)
    assert of_bundle["kv_type"] == "f16" and of_bundle["kv_streams"] == 1  # unified: one stream
    # A bare GGUF's manifest records no sha256: the file is hashed (the same bytes as the bundle's record).
    of_file = space.fingerprint_of(bundle / "model.gguf", served.runtime)
    assert of_file["model_sha256"] == manifest.files["model.gguf"]["sha256"] == of_bundle["model_sha256"]
