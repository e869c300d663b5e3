"""Text for calibration, distillation and evaluation: a plain text file -> blocks of token ids.

One convention keeps training and evaluation apart: the *last* ``eval_tokens`` tokens of a data
file are held out for evaluation, everything before them is for training/calibration. Without any
file, evaluation falls back to the demo corpus (stdlib docs, present on every machine).

Batches are a pure function of (seed, step): a resumed run draws exactly the batches the
interrupted one would have, without saving a data-loader state.
"""

from __future__ import annotations

from pathlib import Path

import torch

from edgeopt.errors import PassError
from edgeopt.planning import HOLDOUT_TOKENS
from edgeopt.sources.textfile import read_text_file

SEQ_LEN = 256
_ENCODE_CHUNK_CHARS = 1 << 16


def read_data_file(path: Path | str) -> str:
    return read_text_file(path, "data file", "--distil-data", PassError)


def tokenize(model_dir: Path, text: str) -> torch.Tensor:
    """Token ids of ``text`` with the checkpoint's own tokenizer.json (no special tokens added)."""
    from edgeopt.runtimes.bundle_tokenizer import open_tokenizer

    tok_file = Path(model_dir) / "tokenizer.json"
    if not tok_file.is_file():
        raise PassError(f"{model_dir} has no tokenizer.json", "save the checkpoint with a fast tokenizer")
    tokenizer = open_tokenizer(tok_file)  # a file's own padding/truncation would pad or cut every chunk
    pieces, start = [], 0
    while start < len(text):  # cut at newlines so no token straddles a chunk boundary mid-word
        end = min(len(text), start + _ENCODE_CHUNK_CHARS)
        cut = text.rfind("\n", start, end) + 1 if end < len(text) else end
        end = cut if cut > start else end
        pieces.append(text[start:end])
        start = end
    ids: list[int] = []
    for enc in tokenizer.encode_batch(pieces, add_special_tokens=False):
        ids.extend(enc.ids)
    return torch.tensor(ids, dtype=torch.long)


def to_blocks(ids: torch.Tensor, seq_len: int = SEQ_LEN) -> torch.Tensor:
    n = ids.numel() // seq_len
    if n == 0:
        raise PassError(f"data has {ids.numel()} tokens, fewer than one block of {seq_len}",
                        "pass more text or a smaller sequence length")
    return ids[: n * seq_len].reshape(n, seq_len)


def split_tokens(model_dir: Path, data_file: Path | str, holdout_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(training ids, held-out ids): the held-out part is the file's last ``holdout_tokens`` tokens."""
    ids = tokenize(model_dir, read_data_file(data_file))
    holdout = min(holdout_tokens, ids.numel() // 5)  # never hold out more than a fifth of a small file
    return ids[: ids.numel() - holdout], ids[ids.numel() - holdout:]


def calibration_blocks(model_dir: Path, data_file: Path | str | None, max_tokens: int,
                       seq_len: int = SEQ_LEN, holdout_tokens: int = HOLDOUT_TOKENS) -> torch.Tensor | None:
    """Blocks for activation importance; None (-> magnitude importance) when there is no data."""
    if data_file is None:
        return None
    train, _ = split_tokens(model_dir, data_file, holdout_tokens)
    return to_blocks(train[:max_tokens], min(seq_len, max(train.numel(), 1)))


def eval_blocks(model_dir: Path, eval_file: Path | str | None, data_file: Path | str | None, max_tokens: int,
                seq_len: int = SEQ_LEN) -> tuple[torch.Tensor, str]:
    """(blocks, description): --eval-data, else the held-out tail of the data file, else the demo corpus."""
    if eval_file is not None:
        ids = tokenize(model_dir, read_data_file(eval_file))[:max_tokens]
        return to_blocks(ids, min(seq_len, ids.numel())), str(eval_file)
    if data_file is not None:
        _, held = split_tokens(model_dir, data_file, max_tokens)
        return to_blocks(held, min(seq_len, held.numel())), f"{data_file} (held-out tail)"
    from edgeopt.demo.corpus import stdlib_text

    text = stdlib_text(max_tokens * 8)  # ~4 chars/token, generous so max_tokens is reached
    ids = tokenize(model_dir, text)[-max_tokens:]
    return to_blocks(ids, min(seq_len, ids.numel())), "edgeopt demo corpus (stdlib docs)"


def batch_indices(num_blocks: int, global_batch: int, step: int, seed: int) -> list[int]:
    """Block indices of optimizer step ``step``: epochs are seeded permutations, consumed in order."""
    start = step * global_batch
    out: list[int] = []
    while len(out) < global_batch:
        epoch, offset = divmod(start + len(out), num_blocks)
        perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        take = min(global_batch - len(out), num_blocks - offset)
        out += perm[offset: offset + take].tolist()
    return out
