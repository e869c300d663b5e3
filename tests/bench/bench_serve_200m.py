"""Issue-4 serving benchmark on a ~200M-parameter Q8_0 model (random weights: speed does not care).

    .venv/bin/python tests/bench/bench_serve_200m.py [--shape deep|wide] [--work /tmp/edgeopt-bench-200m]

Builds (once, cached in --work) a Llama checkpoint of ~200M parameters with the demo BPE tokenizer,
converts it with edgeopt's GGUF exporter to Q8_0, wraps it in a bundle, then runs ``edgeopt bench
serve`` on it: the server at 16 streams, the same server with --max-concurrency 1, and llama.cpp's
raw batched decode of 16 sequences. Prints the table and writes results.json into --work.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

# Two ~0.20B-parameter shapes; the vocabulary is the tokenizer's own (4096), so every sampled token has
# text and streamed chunks time each token (ITL, decode rate). How much batching can buy depends on the
# shape: on this 2-core machine llama.cpp's raw decode of 16 sequences is ~2.0-2.3x one sequence for
# "deep" (many narrow layers) and ~2.8x for "wide" (few wide layers, weight reads dominate), the figure
# issue 4 quotes for Q8_0.
SHAPES = {
    "deep": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=17, num_attention_heads=16,
                 num_key_value_heads=4),
    "wide": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=32,
                 num_key_value_heads=8),
}
COMMON = dict(vocab_size=4096, max_position_embeddings=2048, tie_word_embeddings=False)


def build_checkpoint(out_dir: Path, shape: str = "deep") -> Path:
    if (out_dir / "config.json").is_file():
        return out_dir
    import torch
    import transformers

    from edgeopt.demo.tokenizer import special_token_ids
    from tests.fixtures.tiny_models import build_tokenizer

    build_tokenizer(out_dir, vocab_size=4096)
    ids = special_token_ids(out_dir)
    config = transformers.LlamaConfig(**COMMON, **SHAPES[shape], bos_token_id=ids["<|endoftext|>"],
                                      eos_token_id=ids["<|im_end|>"])
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M")
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def checkpoint_dir(work: Path, shape: str) -> Path:
    return work / ("hf-200m" if shape == "deep" else f"hf-200m-{shape}")


def build_bundle(work: Path, shape: str) -> Path:
    suffix = "" if shape == "deep" else f"-{shape}"
    bundle = work / f"bundle-200m{suffix}-q8_0"
    if (bundle / "manifest.json").is_file():
        return bundle
    from edgeopt.exporters.gguf.exporter import GGUFExporter
    from tests.server.gguf_bundle import make_gguf_bundle

    checkpoint = build_checkpoint(checkpoint_dir(work, shape), shape)
    export_dir = work / f"export{suffix}"
    result = GGUFExporter().export(checkpoint, export_dir, "Q8_0", {"threads": 2})
    return make_gguf_bundle(export_dir / result.model_file, checkpoint, bundle, quant="Q8_0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-200m"))
    parser.add_argument("--shape", choices=sorted(SHAPES), default="deep")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    bundle = build_bundle(args.work, args.shape)
    subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "bench", "serve", str(bundle), "--concurrency", "16",
                    "--requests", str(args.requests), "--max-tokens", str(args.max_tokens), "--prompt-tokens", "32",
                    "--threads", str(args.threads), "--memory", "2GiB",
                    "--json", str(args.work / f"results-{args.shape}.json")], check=True)


if __name__ == "__main__":
    main()
