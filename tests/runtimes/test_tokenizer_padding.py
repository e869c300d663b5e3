"""A tokenizer.json that switches on padding and truncation (all-MiniLM-L6-v2's pads to a fixed 128 and
truncates at 128) must not pad or cut what BundleTokenizer returns, for encoders and decoders alike;
truncation happens only where a caller asks, as transformers does it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer, open_tokenizer
from tests.fixtures.encoder_tokenizers import FIXED_PADDING, build_encoder_tokenizer

LONG = "The collections module provides specialized container datatypes such as deque and Counter. " * 12


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bert-tok")
    build_encoder_tokenizer(out, "bert")
    return out


def unpadded_reference(tokenizer_json: Path, texts: list[str], add_special: bool = True) -> list[list[int]]:
    """What the `tokenizers` library gives once the file's padding and truncation are removed by hand."""
    spec = json.loads(tokenizer_json.read_text())
    spec["padding"] = spec["truncation"] = None
    tok = Tokenizer.from_str(json.dumps(spec))
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=add_special)]


def test_the_fixture_file_pads_and_truncates_like_the_real_one(bert_dir: Path) -> None:
    spec = json.loads((bert_dir / "tokenizer.json").read_text())
    assert spec["padding"]["strategy"] == {"Fixed": FIXED_PADDING} and spec["padding"]["pad_token"] == "[PAD]"
    assert spec["padding"]["pad_id"] == 0 and spec["truncation"]["max_length"] == FIXED_PADDING
    raw = Tokenizer.from_file(str(bert_dir / "tokenizer.json"))
    assert len(raw.encode("hi").ids) == FIXED_PADDING  # the trap: the library obeys the file
    assert len(raw.encode(LONG).ids) == FIXED_PADDING


def test_encoder_texts_are_neither_padded_nor_cut(bert_dir: Path) -> None:
    tok = BundleTokenizer(bert_dir / "tokenizer.json")
    texts = ["hi", LONG]
    expected = unpadded_reference(bert_dir / "tokenizer.json", texts)
    assert tok.encode_batch(texts) == expected
    assert [tok.encode(t) for t in texts] == expected
    assert len(expected[1]) > FIXED_PADDING and 0 not in expected[0]  # no [PAD] anywhere
    assert tok.padding["strategy"] == {"Fixed": FIXED_PADDING}  # the file's settings stay readable


def test_truncation_on_request_keeps_the_special_tokens_like_transformers(bert_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = BundleTokenizer(bert_dir / "tokenizer.json")
    reference = AutoTokenizer.from_pretrained(str(bert_dir))
    for limit in (5, 40, 96):
        got = tok.encode_batch(["hi", LONG], max_length=limit)
        want = reference(["hi", LONG], truncation=True, max_length=limit)["input_ids"]
        assert got == want and len(got[1]) == limit


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta", "mpnet"])
def test_other_families_match_transformers(family: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    build_encoder_tokenizer(tmp_path, family)
    tok = BundleTokenizer(tmp_path / "tokenizer.json")
    reference = AutoTokenizer.from_pretrained(str(tmp_path))
    texts = ["hi there", LONG]
    assert tok.encode_batch(texts) == reference(texts)["input_ids"]
    assert tok.encode_batch(texts, max_length=50) == reference(texts, truncation=True, max_length=50)["input_ids"]


def test_a_causal_lm_tokenizer_json_with_padding_does_not_pad_prompts(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """Decoders (ONNX and torch runtimes) share BundleTokenizer: a prompt must come back as written."""
    raw = open_tokenizer(tiny_llama_dir / "tokenizer.json")
    prompt = "def read_config(path):\n    return json.load(open(path))\n" * 4
    plain = raw.encode(prompt, add_special_tokens=False).ids
    raw.enable_padding(length=len(plain) + 20, pad_id=0, pad_token=raw.id_to_token(0), direction="left")
    raw.enable_truncation(max_length=8)
    raw.save(str(tmp_path / "tokenizer.json"))
    tok = BundleTokenizer(tmp_path / "tokenizer.json")
    assert tok.encode(prompt, add_special=False) == plain
    assert tok.encode_batch([prompt], add_special=False) == [plain]
