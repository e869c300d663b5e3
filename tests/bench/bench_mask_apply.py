"""Issue-13 micro-benchmark: CPU time to apply one step's grammar masks to 16 greedy rows over a
151,646-token vocabulary, old way (unpack the packed masks into a 16 x 151k bool array, masked argmax of
the whole batch) against the sampler's way (raw argmax, one bit test per row, masked argmax only for rows
whose pick is forbidden), side by side in one process.

    .venv/bin/python tests/bench/bench_mask_apply.py [--forbidden-rows 4] [--steps 200]

Masks: dense rows (90% of tokens allowed, as inside JSON strings) whose top token is allowed, and
--forbidden-rows sparse rows (64 allowed tokens, as at JSON structure) whose top token is not.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.sampler import sample_next_tokens
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.token_bitmask import allowed_tokens

VOCAB = 151_646


def step_inputs(rng: np.random.Generator, forbidden_rows: int) -> tuple[np.ndarray, np.ndarray]:
    logits = rng.standard_normal((16, VOCAB)).astype(np.float32)
    allowed = rng.random((16, VOCAB)) < 0.9
    top = logits.argmax(axis=1)
    allowed[np.arange(16), top] = True
    for r in range(forbidden_rows):
        allowed[r] = False
        allowed[r, rng.choice(VOCAB, 64, replace=False)] = True
        allowed[r, top[r]] = False
    padded = np.ones((16, -(-VOCAB // 32) * 32), dtype=bool)
    padded[:, :VOCAB] = allowed
    return logits, np.packbits(padded, axis=-1, bitorder="little").view(np.int32)


def old_way(logits: np.ndarray, bitmask: np.ndarray) -> list[int]:
    allowed = allowed_tokens(bitmask, VOCAB)
    return np.argmax(np.where(allowed, logits, np.float32(-np.inf)), axis=1).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forbidden-rows", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    inputs = [step_inputs(rng, args.forbidden_rows) for _ in range(8)]
    seqs = [Sequence(f"r{i}", [0], SamplingParams(temperature=0.0)) for i in range(16)]
    cpu = {"old": 0.0, "new": 0.0}
    for step in range(args.steps):
        logits, bitmask = inputs[step % len(inputs)]
        for name in (("old", "new") if step % 2 else ("new", "old")):  # alternate which goes first
            start = time.process_time()
            tokens = old_way(logits, bitmask) if name == "old" else sample_next_tokens(logits, seqs, bitmask)
            cpu[name] += time.process_time() - start
            if name == "new":
                assert tokens == old_way(logits, bitmask)
    old, new = (cpu[k] / args.steps * 1e3 for k in ("old", "new"))
    print(f"16 greedy rows x {VOCAB} tokens, {args.forbidden_rows} rows with a forbidden top token: CPU per step "
          f"old {old:.3f} ms, new {new:.3f} ms, new / old {new / old:.3f}")


if __name__ == "__main__":
    main()
