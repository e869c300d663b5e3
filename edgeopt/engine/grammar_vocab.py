"""llguidance's view of a model's vocabulary, built from the runtime's own tokenizer.

One builder for every runtime (llama.cpp GGUF vocabularies, tokenizer.json for ONNX and torch): each
token's bytes are exactly what :meth:`edgeopt.runtimes.base.Tokenizer.token_bytes` gives, which are the bytes the
engine's detokenizer streams to the client. The grammar therefore constrains precisely the text the
client receives, whatever the vocabulary's conventions (byte-level BPE stand-ins, SentencePiece "▁" and
``<0xNN>`` byte pieces are already undone there).

Control tokens (``<|im_end|>``, ``<|python_tag|>``) carry llguidance's special-token marker (a 0xFF byte
before their text): a grammar may name them, plain text never produces them. End-of-generation tokens
are the runtime's ``eos_token_ids``; the mask allows them exactly when the grammar is complete.
"""

from __future__ import annotations

import llguidance

from edgeopt.runtimes.base import RuntimeInfo, Tokenizer

SPECIAL_MARKER = b"\xff"  # llguidance: a token whose bytes start with 0xFF is a special token


class _VocabularyView:
    """The duck-typed object ``llguidance.TokenizerWrapper`` reads (tokens, ids, and a tokenize call)."""

    def __init__(self, tokenizer: Tokenizer, info: RuntimeInfo) -> None:
        tokens = [tokenizer.token_bytes(i) for i in range(info.vocab_size)]
        for text, token_id in tokenizer.control_token_ids().items():
            if 0 <= token_id < info.vocab_size:
                tokens[token_id] = SPECIAL_MARKER + text.encode("utf-8")
        eos = sorted(info.eos_token_ids)
        self.tokens = tokens
        self.eos_token_id = eos[0] if eos else None
        self.bos_token_id = info.bos_token_id
        self.special_token_ids = sorted({*tokenizer.control_token_ids().values(), *eos})
        self._tokenizer = tokenizer

    def __call__(self, text: str | bytes) -> list[int]:
        # llguidance tokenizes only to heal or force tokens around fixed strings; plain text, no BOS.
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tokenizer.encode(text, add_special=False, parse_special=False)


def grammar_tokenizer(tokenizer: Tokenizer, info: RuntimeInfo) -> llguidance.LLTokenizer:
    """The llguidance tokenizer of this runtime (~1 s on a 150k vocabulary: build once per model)."""
    view = _VocabularyView(tokenizer, info)
    eos = sorted(info.eos_token_ids) or None
    built = llguidance.LLTokenizer(llguidance.TokenizerWrapper(view), n_vocab=info.vocab_size, eos_token=eos)
    # One entry per logits column (padded embedding rows included, as b""): a mask bit past the tokenizer's
    # vocabulary would otherwise stay set and let the sampler draw a token the grammar never saw.
    assert built.vocab_size == info.vocab_size, (built.vocab_size, info.vocab_size)
    return built
