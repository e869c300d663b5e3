"""Real tokenizers rebuilt from llama.cpp's tokenizer test vocabularies (no hub download).

llama.cpp ships ``models/ggml-vocab-llama-bpe.gguf`` (Llama 3: 128,256 tokens, 280k merges) and
``ggml-vocab-qwen2.gguf`` (Qwen2: 151,646 tokens). Their tokens, merges and token types are turned
back into a Hugging Face ``tokenizer.json`` with the model family's pre-tokenizer, so the fixture has
the real vocabulary size, the real merges and the real special tokens: llama.cpp's reference converter
recognises it by hashing its output on a probe text, which only the genuine tokenizer reproduces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgeopt.exporters.gguf.pretokenizer import LLAMA3, QWEN2
from tests.exporters.gguf_file import read_gguf
from tests.exporters.reference_converter import reference_vocab
from tests.exporters.spm_tokenizers import save_llama2_hf_files

CONTROL, UNUSED = 3, 5

# Chat templates of the two families' shapes, each taking `tools` (as the instruct models' do).
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<|start_header_id|>system<|end_header_id|>\n\n"
    "You may call these functions: {{ tools | tojson }}<|eot_id|>{% endif %}"
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class ByteLevelFamily:
    vocab: str  # llama.cpp's test vocabulary name
    split_regex: str
    ignore_merges: bool
    bos: str | None  # prepended by the post-processor (Llama 3) or not at all (Qwen2)
    eos: str
    pad: str | None
    normalizer: dict | None
    chat_template: str


FAMILIES = {
    "llama-bpe": ByteLevelFamily("llama-bpe", LLAMA3, True, "<|begin_of_text|>", "<|eot_id|>", None, None,
                                 LLAMA3_TEMPLATE),
    "qwen2": ByteLevelFamily("qwen2", QWEN2, False, None, "<|im_end|>", "<|endoftext|>", {"type": "NFC"},
                             CHATML_TOOLS_TEMPLATE),
}


def _post_processor(family: ByteLevelFamily, ids: dict[str, int]) -> dict:
    if family.bos is None:
        return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    bos = {"SpecialToken": {"id": family.bos, "type_id": 0}}
    return {"type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": family.bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {family.bos: {"id": family.bos, "ids": [ids[family.bos]], "tokens": [family.bos]}}}


def build_byte_level_tokenizer(name: str, out_dir: Path) -> Path:
    """Write tokenizer.json + tokenizer_config.json of the named family into out_dir; return out_dir."""
    family = FAMILIES[name]
    ref = read_gguf(reference_vocab(family.vocab)).fields
    tokens, types = ref["tokenizer.ggml.tokens"], ref["tokenizer.ggml.token_type"]
    # The test vocabulary pads the embedding rows with "[PADn]" entries: those are not tokenizer tokens.
    real = [i for i, t in enumerate(tokens) if not (t.startswith("[PAD") and types[i] != 1)]
    special = [i for i in real if types[i] == CONTROL]
    vocab = {tokens[i]: i for i in real if i not in special}
    ids = {tokens[i]: i for i in real}
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in special]
    data = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": family.normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": family.split_regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": _post_processor(family, ids),
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": family.ignore_merges, "vocab": vocab,
                  "merges": [m.split(" ") for m in ref["tokenizer.ggml.merges"]]},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": family.bos, "eos_token": family.eos,
              "pad_token": family.pad, "model_max_length": 131072, "clean_up_tokenization_spaces": False,
              "chat_template": family.chat_template, "model_input_names": ["input_ids", "attention_mask"],
              "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1))
    return out_dir


def token_ids(out_dir: Path, *texts: str) -> list[int]:
    """Ids of special tokens by their text, read from the written tokenizer.json."""
    added = {t["content"]: t["id"] for t in json.loads((out_dir / "tokenizer.json").read_text())["added_tokens"]}
    return [added[t] for t in texts]


def build_llama2_tokenizer(out_dir: Path) -> Path:
    """The real Llama 2 SentencePiece tokenizer (32,000 pieces with their scores and types), rebuilt as
    a ``tokenizer.model`` from llama.cpp's ``ggml-vocab-llama-spm.gguf``, plus the ``tokenizer.json``
    transformers derives from it; returns out_dir."""
    from sentencepiece import sentencepiece_model_pb2 as sp_model

    fields = read_gguf(reference_vocab("llama-spm")).fields
    proto = sp_model.ModelProto()
    for text, score, kind in zip(fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.scores"],
                                 fields["tokenizer.ggml.token_type"]):
        proto.pieces.add(piece=text, score=score, type=kind)  # gguf token types are SentencePiece's
    trainer = proto.trainer_spec
    trainer.model_type = sp_model.TrainerSpec.BPE
    trainer.vocab_size = len(proto.pieces)
    trainer.byte_fallback = True
    trainer.unk_id, trainer.bos_id, trainer.eos_id, trainer.pad_id = 0, 1, 2, -1
    normalizer = proto.normalizer_spec
    normalizer.name = "identity"
    normalizer.add_dummy_prefix, normalizer.remove_extra_whitespaces, normalizer.escape_whitespaces = True, False, True
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.model").write_bytes(proto.SerializeToString())
    save_llama2_hf_files(out_dir)
    return out_dir


def reference_tokenizations(vocab: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's tokenizer test strings for a vocabulary with the ids transformers gave each
    (``models/ggml-vocab-NAME.gguf.inp`` / ``.out``)."""
    path = reference_vocab(vocab)
    texts = path.with_name(path.name + ".inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    outputs = path.with_name(path.name + ".out").read_text(encoding="utf-8").split("\n")
    return [(text, [int(t) for t in out.split()]) for text, out in zip(texts, outputs)]
