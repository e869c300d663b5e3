"""(query, document) pairs tokenized as a cross-encoder reads them, on `tokenizers` alone.

transformers' ``tokenizer(queries, documents, truncation=True, max_length=n)``, which
``CrossEncoder.predict`` calls, uses the tokenizer.json's pair template (BERT: ``[CLS] q [SEP] d [SEP]``,
token types 0 then 1) and cuts the longer side first until the pair fits ``n`` tokens; the file's own
padding and truncation (all-MiniLM-L6-v2's pads to 128) are switched off, as for every bundle tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from edgeopt.errors import BundleError
from edgeopt.runtimes.base import EncodedPair
from edgeopt.runtimes.bundle_tokenizer import open_tokenizer


class PairTokenizer:
    def __init__(self, tokenizer_json: Path, max_length: int) -> None:
        if not tokenizer_json.is_file():
            raise BundleError(f"tokenizer file {tokenizer_json} is missing",
                              "re-run edgeopt optimize; the bundle needs tokenizer/tokenizer.json")
        self.max_length = max_length
        self._tok = open_tokenizer(tokenizer_json)
        self._tok.enable_truncation(max_length, strategy="longest_first")

    def encode(self, query: str, documents: list[str]) -> list[EncodedPair]:
        encodings = self._tok.encode_batch([(query, document) for document in documents])
        return [EncodedPair(list(e.ids), list(e.type_ids)) for e in encodings]
