"""llama.cpp tokenizes our GGUF exactly like the Hugging Face tokenizer, for BPE and SentencePiece."""

from __future__ import annotations

from pathlib import Path

import pytest

# Unicode, runs of whitespace, digits, code, special tokens: where tokenizers usually disagree.
TEXTS = [
    "Hello world",
    " leading space and trailing space ",
    "def add(a, b):\n    return a + b\n\n\n",
    "tabs\tand\t\tmore\ttabs",
    "numbers: 3.14159 1234567890 42nd 1,000,000",
    "naïve café — 日本語のテキスト 🙂 émoji",
    "   \n\n  multiple   spaces    here\r\n",
    "x=[i**2 for i in range(10) if i%2==0]  # comment",
    "'s 't 're 've 'm 'll 'd I'm DON'T",
    "Ünïcödé ΑΒΓ абв ﬁ ligature",
    "",
]


def _llama_tokens(gguf_path: Path, texts: list[str]) -> list[list[int]]:
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
    try:
        return [llm.tokenize(t.encode("utf-8"), add_bos=False, special=True) for t in texts]
    finally:
        llm.close()


def _assert_same(hf_tokenizer, gguf_path: Path, texts: list[str]) -> None:
    ours = _llama_tokens(gguf_path, texts)
    for text, got in zip(texts, ours):
        expected = hf_tokenizer.encode(text, add_special_tokens=False)
        assert got == expected, f"{text!r}: llama.cpp {got} != HF {expected}"


def test_byte_level_bpe_matches_hf(tiny_model_factory, tiny_gguf_factory) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_model_factory("llama-gqa")))
    specials = ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "a<|endoftext|>b"]
    _assert_same(hf, tiny_gguf_factory("llama-gqa", "F16"), TEXTS + specials)


def test_sentencepiece_matches_hf(spm_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from edgeopt.exporters.gguf.exporter import GGUFExporter

    result = GGUFExporter().export(spm_model_dir, tmp_path, "F16", {})
    hf = AutoTokenizer.from_pretrained(str(spm_model_dir))
    _assert_same(hf, tmp_path / result.model_file, [t for t in TEXTS if t] + ["before</s>after", "<s>start"])


def test_sentencepiece_metadata(spm_model_dir: Path, tmp_path: Path) -> None:
    import gguf

    from edgeopt.exporters.gguf.exporter import GGUFExporter

    GGUFExporter().export(spm_model_dir, tmp_path, "F16", {})
    fields = {n: f.contents() for n, f in gguf.GGUFReader(tmp_path / "model.gguf").fields.items()}
    assert fields["tokenizer.ggml.model"] == "llama"
    assert fields["tokenizer.ggml.bos_token_id"] == 1 and fields["tokenizer.ggml.eos_token_id"] == 2
    assert fields["tokenizer.ggml.add_bos_token"] is True
    types = fields["tokenizer.ggml.token_type"]
    assert types.count(6) == 256, "every byte-fallback piece is typed BYTE"
    assert len(fields["tokenizer.ggml.scores"]) == len(fields["tokenizer.ggml.tokens"])


@pytest.mark.parametrize("pre", ["Whitespace", "Punctuation"])
def test_unknown_pre_tokenizer_is_refused(pre: str) -> None:
    from edgeopt.errors import ExportError
    from edgeopt.exporters.gguf.pretokenizer import pre_tokenizer_name

    with pytest.raises(ExportError, match=pre):
        pre_tokenizer_name({"pre_tokenizer": {"type": pre}}, Path("tokenizer.json"))


def test_known_pre_tokenizers_are_recognised() -> None:
    """Llama 3, Qwen2 and SmolLM spell their pre-tokenizers as tokenizer.json sequences; each maps to its name."""
    from edgeopt.exporters.gguf.pretokenizer import LLAMA3, QWEN2, pre_tokenizer_name

    def split(regex: str) -> dict:
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}

    smollm = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}
    where = Path("tokenizer.json")
    assert pre_tokenizer_name({"pre_tokenizer": split(LLAMA3)}, where) == "llama-bpe"
    assert pre_tokenizer_name({"pre_tokenizer": split(QWEN2)}, where) == "qwen2"
    assert pre_tokenizer_name({"pre_tokenizer": smollm}, where) == "smollm"


def _without_tokenizer_model(model_dir: Path, out_dir: Path) -> Path:
    """A copy of a checkpoint as hub repos that ship only tokenizer.json have it."""
    import shutil

    shutil.copytree(model_dir, out_dir)
    (out_dir / "tokenizer.model").unlink()
    return out_dir


def test_sentencepiece_tokenizer_json_only_matches_hf(spm_model_dir: Path, tmp_path: Path) -> None:
    """A Llama 2 style model shipping tokenizer.json without tokenizer.model: the SentencePiece vocabulary
    is derived from the JSON (scores ranked by its merges) and llama.cpp tokenizes like transformers."""
    from transformers import AutoTokenizer

    from edgeopt.exporters.gguf.exporter import GGUFExporter

    model_dir = _without_tokenizer_model(spm_model_dir, tmp_path / "model")
    result = GGUFExporter().export(model_dir, tmp_path / "out", "F16", {})
    hf = AutoTokenizer.from_pretrained(str(model_dir))
    _assert_same(hf, tmp_path / "out" / result.model_file, [t for t in TEXTS if t] + ["before</s>after", "<s>start"])


@pytest.fixture(scope="session")
def llama2_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with the real Llama 2 tokenizer (32,000 pieces, rebuilt from llama.cpp's
    test vocabulary) as tokenizer.model + tokenizer.json."""
    from tests.exporters.conformance_models import CASES, build_conformance_checkpoint
    from tests.exporters.real_tokenizers import build_llama2_tokenizer

    tokenizer_dir = build_llama2_tokenizer(tmp_path_factory.mktemp("llama2-tokenizer"))
    return build_conformance_checkpoint(tmp_path_factory.mktemp("llama2"), CASES["llama-2"], tokenizer_dir)


@pytest.mark.parametrize("files", ["tokenizer.model", "tokenizer.json only"])
def test_llama2_vocabulary_matches_llama_cpp_reference_tokenizations(llama2_checkpoint: Path, tmp_path: Path,
                                                                     files: str) -> None:
    """llama.cpp's own tokenizer test strings for Llama 2 (models/ggml-vocab-llama-spm.gguf.inp/.out, the ids
    transformers gives the published tokenizer) come out of our GGUF, from either tokenizer file."""
    from edgeopt.exporters.gguf.writer import convert_checkpoint
    from tests.exporters.real_tokenizers import reference_tokenizations

    model_dir = llama2_checkpoint if files == "tokenizer.model" else _without_tokenizer_model(
        llama2_checkpoint, tmp_path / "model")
    convert_checkpoint(model_dir, tmp_path / "model.gguf", "F16")
    cases = [(text, ids) for text, ids in reference_tokenizations("llama-spm") if text]
    got = _llama_tokens(tmp_path / "model.gguf", [text for text, _ in cases])
    wrong = [(text, ids, g) for (text, ids), g in zip(cases, got) if g != ids]
    assert len(cases) > 40 and not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. {wrong[:3]}"


@pytest.mark.parametrize("content", [b"", b"IQ== 0\nIg== 1\nIw== 2\n", b"\x00\x01not a protobuf\xff" * 8])
def test_tokenizer_model_that_is_not_sentencepiece_is_an_export_error(spm_model_dir: Path, tmp_path: Path,
                                                                      content: bytes) -> None:
    """An empty file, a tiktoken rank file (what Llama 3 ships as original/tokenizer.model) or garbage
    named tokenizer.model: an edgeopt error naming the file and the fix, not a sentencepiece traceback."""
    import shutil

    from edgeopt.errors import ExportError
    from edgeopt.exporters.gguf.writer import convert_checkpoint

    model_dir = tmp_path / "model"
    shutil.copytree(spm_model_dir, model_dir)
    (model_dir / "tokenizer.model").write_bytes(content)
    with pytest.raises(ExportError) as info:
        convert_checkpoint(model_dir, tmp_path / "model.gguf", "F16")
    assert str(model_dir / "tokenizer.model") in str(info.value) and "not a SentencePiece model" in str(info.value)
    assert "delete it" in info.value.hint
    assert not (tmp_path / "model.gguf").exists()


@pytest.mark.parametrize("case, vocab", [("llama-3.2", "llama-bpe"), ("qwen2", "qwen2")])
def test_real_byte_level_vocabularies_match_llama_cpp_reference_tokenizations(case: str, vocab: str,
                                                                             tmp_path: Path) -> None:
    """The Llama 3 (128,256 tokens) and Qwen2 (151,646) tokenizers, rebuilt from llama.cpp's test
    vocabularies: our GGUF tokenizes llama.cpp's test strings into the ids transformers gave the
    published tokenizers (models/ggml-vocab-NAME.gguf.inp/.out)."""
    from edgeopt.exporters.gguf.writer import convert_checkpoint
    from tests.exporters.conformance_models import CASES, build_conformance_checkpoint, build_tokenizer_files
    from tests.exporters.real_tokenizers import reference_tokenizations

    tokenizer_dir = build_tokenizer_files(vocab, tmp_path / "tokenizer")
    model_dir = build_conformance_checkpoint(tmp_path / "model", CASES[case], tokenizer_dir)
    convert_checkpoint(model_dir, tmp_path / "model.gguf", "F16")
    cases = [(text, ids) for text, ids in reference_tokenizations(vocab) if text]
    got = _llama_tokens(tmp_path / "model.gguf", [text for text, _ in cases])
    wrong = [(text, ids, g) for (text, ids), g in zip(cases, got) if g != ids]
    assert len(cases) > 40 and not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. {wrong[:3]}"


def test_bos_follows_the_post_processor_when_the_tokenizer_class_ignores_add_bos_token(
        tiny_model_factory, tmp_path: Path) -> None:
    """tokenizer_config.json says add_bos_token, but a PreTrainedTokenizerFast runs tokenizer.json's
    post-processor as saved (no BOS): llama.cpp must add exactly what transformers adds."""
    import json
    import shutil

    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from edgeopt.exporters.gguf.writer import convert_checkpoint

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_factory("llama-gqa"), model_dir)
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    (model_dir / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": True}))
    convert_checkpoint(model_dir, tmp_path / "model.gguf", "F16")
    expected = AutoTokenizer.from_pretrained(str(model_dir)).encode("Hello world")
    llm = Llama(model_path=str(tmp_path / "model.gguf"), vocab_only=True, verbose=False)
    try:
        assert llm.tokenize(b"Hello world", add_bos=True) == expected
    finally:
        llm.close()
