"""Benchmark: reading what `edgeopt serve FILE.gguf` needs from a GGUF with a 262,144-token vocabulary
(Gemma 3's size): edgeopt.sources.gguf_metadata (walks the header, skips the vocabulary) against the `gguf`
library's GGUFReader (parses every field), side by side in one run.

Run:  .venv/bin/python tests/bench/bench_gguf_metadata.py [--repeat N]

The file is synthetic (tokens "tok{i}", scores, token types, 262k merges, no tensors): only its header
matters here. Target: the metadata part of a cold start well under the 3 s budget.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

VOCAB = 262_144


def write_big_vocab_gguf(path: Path) -> Path:
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    for key, value in (("block_count", 2), ("context_length", 8192), ("embedding_length", 64),
                       ("feed_forward_length", 128)):
        getattr(writer, f"add_{key}")(value)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_file_type(1)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(VOCAB)])
    writer.add_token_scores(np.zeros(VOCAB, dtype=np.float32).tolist())
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges([f"t{i} o{i}" for i in range(VOCAB)])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(VOCAB - 1)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def seconds(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from gguf import GGUFReader

    from edgeopt.sources.gguf_metadata import read_gguf_metadata

    with tempfile.TemporaryDirectory() as work:
        path = write_big_vocab_gguf(Path(work) / "big-vocab.gguf")
        ours, manifest, library = [], [], []
        for _ in range(args.repeat):  # alternated, so both see the same machine load
            ours.append(seconds(lambda: read_gguf_metadata(path)))
            manifest.append(seconds(lambda: _uncached_manifest(path)))
            library.append(seconds(lambda: GGUFReader(path)))
        mine, whole, theirs = (statistics.median(x) for x in (ours, manifest, library))
        print(f"{VOCAB} tokens + {VOCAB} merges, {path.stat().st_size / 2**20:.1f} MiB header")
        print(f"edgeopt.sources.gguf_metadata   {mine * 1000:8.1f} ms")
        print(f"manifest (+ BOS/EOS)    {whole * 1000:8.1f} ms")
        print(f"gguf.GGUFReader         {theirs * 1000:8.1f} ms   ratio {theirs / mine:.1f}x")


def _uncached_manifest(path: Path) -> None:
    from edgeopt.sources import gguf_model

    gguf_model._cached_metadata.cache_clear()
    gguf_model.gguf_manifest(path)


if __name__ == "__main__":
    main()
