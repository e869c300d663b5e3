"""The llama.cpp tokenizer's vocabulary scan is made once per GGUF file and process: a server swapping models
loads the same files again and again (issue 42), and the scan costs 70 ms (49k tokens) to 0.5 s (150k) a load.
A file that changed (size or modification time) is scanned again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from edgeopt.runtimes.llama_cpp import load_gguf

def tokenizer_of(path: Path):
    runtime = load_gguf(path, kv_capacity_tokens=256, max_slots=1, max_batch_tokens=64, threads=1, n_gpu_layers=0)
    runtime.close()
    return runtime.tokenizer

def test_a_reloaded_file_reuses_its_scan_and_a_changed_one_is_scanned_again(tiny_gguf_factory, tmp_path):
    path = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf_factory("llama-gqa", "F16"), path)
    first, second = tokenizer_of(path), tokenizer_of(path)
    assert second._controls is first._controls  # the same scan, not a second pass over the vocabulary
    assert first.control_token_ids()  # the scan found the fixture's control tokens

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    third = tokenizer_of(path)
    assert third._controls is not first._controls
    assert third._controls == first._controls
    assert third.eog_token_ids() == first.eog_token_ids()


def test_a_later_process_reads_the_scan_from_the_user_cache(tiny_gguf_factory, tmp_path, monkeypatch):
    """Gemma 3's 262k tokens cost 1.2 s of CPU to scan: a second start of the same file reads it from disk."""
    from edgeopt.runtimes.llama_cpp import vocab_scan

    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf_factory("llama-gqa", "F16"), path)
    first = tokenizer_of(path)
    assert list((tmp_path / "cache" / "vocab").glob("*.json"))

    monkeypatch.setattr(vocab_scan, "_SCANS", vocab_scan._ScanCache(entries=16))  # as a new process starts
    monkeypatch.setattr(vocab_scan, "scan_vocab", lambda *_: (_ for _ in ()).throw(AssertionError("scanned")))
    second = tokenizer_of(path)
    assert second._controls == first._controls and second._controls is not first._controls
    assert second.eog_token_ids() == first.eog_token_ids()
    assert second.max_token_bytes() == first.max_token_bytes()


def test_an_unreadable_cache_entry_is_scanned_again_and_rewritten(tiny_gguf_factory, tmp_path, monkeypatch, caplog):
    from edgeopt.runtimes.llama_cpp import vocab_scan

    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf_factory("llama-gqa", "F16"), path)
    first = tokenizer_of(path)
    (entry,) = (tmp_path / "cache" / "vocab").glob("*.json")
    entry.write_text('{"controls": [')  # torn
    monkeypatch.setattr(vocab_scan, "_SCANS", vocab_scan._ScanCache(entries=16))
    second = tokenizer_of(path)
    assert "unreadable" in caplog.text
    assert second._controls == first._controls
    assert vocab_scan._read(entry) is not None  # rewritten whole


def _vocab_only(path: Path):
    import llama_cpp

    return llama_cpp.Llama(model_path=str(path), n_ctx=64, vocab_only=True, verbose=False)


def test_the_files_longest_token_text_bounds_the_scan_and_changes_nothing_else(tiny_gguf_factory, tiny_gemma_factory,
                                                                                tmp_path):
    """Measured from the file's token texts instead of every token's piece (3x fewer calls into llama.cpp on a 262k
    vocabulary): the same control tokens and end-of-generation tokens, and a bound on the longest piece that
    holds, on byte-level BPE (the tiny Llama, the real SmolLM2-135M-Instruct) and SentencePiece (Gemma 3)."""
    from edgeopt.demo.smollm2 import smollm2_gguf_path
    from edgeopt.exporters.gguf.exporter import GGUFExporter
    from edgeopt.runtimes.llama_cpp.vocab_scan import scan_vocab
    from edgeopt.sources.gguf_model import gguf_metadata

    gemma = GGUFExporter().export(tiny_gemma_factory("gemma3"), tmp_path, "F16", {})
    for path in (tiny_gguf_factory("llama-gqa", "F16"), tmp_path / gemma.model_file, smollm2_gguf_path()):
        llm = _vocab_only(path)
        try:
            import llama_cpp

            vocab = llama_cpp.llama_model_get_vocab(llm.model)
            exact = scan_vocab(vocab)
            longest_text = gguf_metadata(path).arrays["tokenizer.ggml.tokens"].longest
            bounded = scan_vocab(vocab, longest_text)
        finally:
            llm.close()
        assert bounded.controls == exact.controls and exact.controls, path
        assert bounded.eog == exact.eog and exact.eog, path
        assert exact.longest <= bounded.longest == longest_text, path
