"""The demo model's data: corpus split, token streams, and deterministic training batches.

The last ``eval_fraction`` of the corpus (cut at a line end) is held out; chat samples are
drawn only from modules whose docs lie wholly in the training part, so eval.txt stays unseen.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgeopt.demo.chat_samples import isolated_chat_samples
from edgeopt.demo.corpus import stdlib_documents

if TYPE_CHECKING:
    import torch

DOCUMENT_SEPARATOR = "\n\n"


@dataclass
class CorpusSplit:
    train_documents: list[str]
    train_modules: list[str]
    chat_samples: list[str]
    eval_text: str
    sha256: str  # of the corpus *and* the chat samples: everything the weights are trained on


def split_corpus(eval_fraction: float, max_chars: int | None = None) -> CorpusSplit:
    """Hold out the corpus tail; the cut moves forward to the next line end so no line is split."""
    documents = stdlib_documents(max_chars)
    full = DOCUMENT_SEPARATOR.join(text for _, text in documents)
    cut = full.find("\n", int(len(full) * (1.0 - eval_fraction)))
    cut = len(full) if cut < 0 else cut
    train_documents: list[str] = []
    train_modules: list[str] = []
    position = 0
    for name, text in documents:
        end = position + len(text)
        if end <= cut:
            train_documents.append(text)
            train_modules.append(name)
        elif position < cut:
            train_documents.append(text[: cut - position])  # the module the cut falls in: its head trains
        position = end + len(DOCUMENT_SEPARATOR)
    chats = isolated_chat_samples(train_modules)
    sha = hashlib.sha256("\0".join([full, *chats]).encode()).hexdigest()
    return CorpusSplit(train_documents, train_modules, chats, full[cut:].lstrip("\n"), sha)


@dataclass
class TokenStreams:
    documents: "torch.Tensor"  # 1-D int64: every training document, each followed by <|endoftext|>
    chats: "torch.Tensor"  # 1-D int64: every ChatML sample, each followed by <|endoftext|>
    eval: "torch.Tensor"  # 1-D int64: eval.txt


def encode_streams(tokenizer_dir: Path, split: CorpusSplit, end_of_text_id: int) -> TokenStreams:
    import torch
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))

    def stream(texts: list[str]) -> torch.Tensor:
        ids: list[int] = []
        for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
            ids.extend(encoding.ids)
            ids.append(end_of_text_id)
        return torch.tensor(ids, dtype=torch.long)

    eval_ids = tokenizer.encode(split.eval_text, add_special_tokens=False).ids
    return TokenStreams(stream(split.train_documents), stream(split.chat_samples),
                        torch.tensor(eval_ids, dtype=torch.long))


class BatchSampler:
    """Random fixed-length windows from the two streams, in an order fixed by the seed."""

    def __init__(self, streams: TokenStreams, seq_len: int, batch_size: int, chat_fraction: float, seed: int):
        import torch

        self.streams = streams
        self.seq_len = seq_len
        self.chat_rows = round(batch_size * chat_fraction)
        self.document_rows = batch_size - self.chat_rows
        self.generator = torch.Generator().manual_seed(seed)

    def _windows(self, stream: "torch.Tensor", rows: int) -> "torch.Tensor":
        import torch

        starts = torch.randint(0, len(stream) - self.seq_len - 1, (rows,), generator=self.generator)
        return torch.stack([stream[s: s + self.seq_len + 1] for s in starts.tolist()])

    def next_batch(self) -> "torch.Tensor":
        """(batch, seq_len + 1) token ids: inputs are [:, :-1], targets [:, 1:]."""
        import torch

        parts = [self._windows(self.streams.documents, self.document_rows)]
        if self.chat_rows:
            parts.append(self._windows(self.streams.chats, self.chat_rows))
        return torch.cat(parts)
