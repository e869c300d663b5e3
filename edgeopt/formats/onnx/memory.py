"""What ONNX Runtime holds resident when ``edgeopt serve`` serves an ONNX bundle: the onnx entry's memory model
(edgeopt/formats/onnx/entry.py reads it from here; edgeopt.sizing.budget and .resident add it up).

Measured by serving real models at full load and sampling the server's resident set (VmHWM agrees):
SmolLM2-135M-Instruct fp32 (514 MiB file) and int8 (147 MiB), 4 x 256, 4 x 512 and 2 x 1,024 tokens;
all-MiniLM-L6-v2 fp32 (86 MiB) and int8 (56 MiB) embedding bundles, batches of 8 x 242-256 tokens; the
tiny test model for the process alone (tests/server/test_resident_memory.py holds the plan to them).

    process          the Python server with onnxruntime loaded: 117 MiB idle on the tiny model
    weights          the file, plus what onnxruntime builds from it: ~13% (prepacked and fused copies), and
                     for a tied output projection a float32 copy of the vocabulary table (graph optimization
                     folds the Transpose the lm_head reads it through: 108 MiB for SmolLM2's 49k x 576)
    KV, x3           every cached position three times at a decode step's peak: the live arrays the
                     runtime passes in as ``past``, onnxruntime's ``present`` outputs in its arena (which
                     keeps that size once reached) and their numpy copies the runtime keeps
    a prompt, x2     the longest sequence's KV twice more: a prompt prefilled chunk by chunk makes a new
                     present (past + chunk) each chunk while its past is alive
    logits           one prefill chunk's float32 logits (the graph computes a row per position)

The three multipliers are fitted to those measurements (planned/measured 1.02-1.06 at 4 x 512 and 2 x 1,024,
1.13 at 4 x 256: never under); the parts are the mechanisms we could name, not a breakdown onnxruntime
reports. Before the loaded session's freed parse buffers were returned (runtimes/onnxruntime/session.py),
SmolLM2 fp32 idled at 993 MiB instead of 809.
"""

from __future__ import annotations

MIB = 2**20

PROCESS_BYTES = 120 * MIB  # 117 MiB measured idle with the tiny model's session loaded
WEIGHTS_EXTRA_FRACTION = 0.13  # of the file: SmolLM2 fp32 +70 MiB over 514 + table, int8 +19 over 147 + table
TIED_TABLE_ELEMENT_BYTES = 4  # the folded Transpose of the vocabulary table is float32, whatever the quant
KV_COPIES = 3.0
PROMPT_KV_COPIES = 2.0
# The engine prefills a prompt in chunks of this many tokens (edgeopt.engine.api.DEFAULT_PREFILL_CHUNK; a test
# keeps the two equal), and the graph returns float32 logits for every one of them.
PREFILL_CHUNK_TOKENS = 256
LOGITS_BYTES_PER_VOCAB_ENTRY = PREFILL_CHUNK_TOKENS * 4

# Embedding bundles: the server batches up to this many padded tokens into one run
# (edgeopt.server.batching.length_batches.DEFAULT_MAX_TOKENS; a test keeps the two equal).
EMBEDDING_BATCH_TOKENS = 2048
# What one run of such a batch allocates per token, times this: onnxruntime's arena holds the attention scores
# and probabilities, the feed-forward and a few hidden-state buffers at once and rounds its growth up.
# Fitted: all-MiniLM-L6-v2 INT8, 4 requests of 16 inputs of 256 tokens (batches of 8 x 256), peaked at 345.8 MiB
# (1.8 left the plan 4% under it; fp32 at 8 x 242 tokens peaked at 361.5 MiB, planned 395.8).
EMBEDDING_ARENA_FACTOR = 2.2
EMBEDDING_PROCESS_EXTRA_BYTES = 20 * MIB  # the embedding server idled ~20 MiB above the decoder server's


def weights_extra_bytes(weights_bytes: int, vocab_size: int, hidden_size: int, tied_embeddings: bool) -> int:
    """What onnxruntime holds beyond the file's own bytes once the session is built."""
    table = vocab_size * hidden_size * TIED_TABLE_ELEMENT_BYTES if tied_embeddings else 0
    return int(weights_bytes * WEIGHTS_EXTRA_FRACTION) + table


def embedding_run_bytes(hidden_size: int, heads: int, intermediate_size: int, input_tokens: int) -> int:
    """Activations of the largest batch an embedding server runs: EMBEDDING_BATCH_TOKENS tokens in sequences of
    ``input_tokens`` (the longest input it accepts)."""
    per_token = 2 * heads * input_tokens * 4 + intermediate_size * 4 + 16 * hidden_size
    return int(EMBEDDING_BATCH_TOKENS * per_token * EMBEDDING_ARENA_FACTOR) + EMBEDDING_PROCESS_EXTRA_BYTES
