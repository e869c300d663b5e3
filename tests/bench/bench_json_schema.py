"""Issue-13 benchmark: the cost of constrained decoding (response_format json_schema) at 16 streams.

    .venv/bin/python tests/bench/bench_json_schema.py [--model bench|qwen2.5-0.5b] [--work /tmp/edgeopt-bench-schema]

Builds (once, cached in --work) a Qwen2 checkpoint with the full 151,646-token vocabulary (the mask
covers every token, so vocabulary size is what makes masks expensive) and random weights, converts it
to a Q8_0 GGUF bundle, then runs ``edgeopt bench serve -n 16 --json-schema tests/bench/orders_schema.json``:
the same server decodes 16 streams without and with the schema, alternating rounds, and prints the ratio
and the grammar costs per step. The schema's shortest output (500 orders) is longer than
--max-tokens, so constrained streams decode as many tokens as free ones.

Models: ``bench`` (hidden 384, 6 layers: a ~20 ms forward at 16 streams, where masks weigh the most) and
``qwen2.5-0.5b`` (Qwen2.5-0.5B's shape: hidden 896, 24 layers, 14 heads over 2 KV heads, intermediate
4864, tied embeddings; the smallest realistic model with this vocabulary). Random weights make greedy
picks land outside the grammar far more often than a trained model's (at every JSON structure position),
so the refused-pick share, and with it the mask cost, is pessimistic here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: make `tests` importable

# name -> (hidden, layers, intermediate, transformers config overrides)
MODELS: dict[str, tuple[int, int, int, dict]] = {
    "bench": (384, 6, 384 * 3, {}),
    "qwen2.5-0.5b": (896, 24, 4864, {"num_attention_heads": 14, "num_key_value_heads": 2,
                                     "tie_word_embeddings": True}),
}


def build_bundle(work: Path, model: str) -> Path:
    hidden, layers, intermediate, overrides = MODELS[model]
    name = f"h{hidden}-l{layers}" if model == "bench" else model  # the bench model's cache keeps its old name
    bundle = work / f"bundle-151k-{name}-q8_0"
    if (bundle / "manifest.json").is_file():
        return bundle
    from edgeopt.exporters.gguf.exporter import GGUFExporter
    from tests.fixtures.big_vocab import write_big_bpe_tokenizer
    from tests.fixtures.tiny_models import build_tiny_model
    from tests.server.gguf_bundle import make_gguf_bundle

    tokenizer_dir = write_big_bpe_tokenizer(work / "tokenizer-151k")
    checkpoint = build_tiny_model(work / f"hf-151k-{name}", "qwen2", tokenizer_dir, hidden_size=hidden,
                                  num_layers=layers, intermediate_size=intermediate, config_overrides=overrides)
    config = json.loads((checkpoint / "config.json").read_text())
    config["max_position_embeddings"] = 2048
    (checkpoint / "config.json").write_text(json.dumps(config, indent=2))
    export_dir = work / f"export-{name}"
    result = GGUFExporter().export(checkpoint, export_dir, "Q8_0", {"threads": 2})
    return make_gguf_bundle(export_dir / result.model_file, checkpoint, bundle, quant="Q8_0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-schema"))
    parser.add_argument("--model", choices=sorted(MODELS), default="bench")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--memory", default="2GiB", help="the server's memory budget (--memory of edgeopt serve)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    bundle = build_bundle(args.work, args.model)
    subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "bench", "serve", str(bundle), "--concurrency", "16",
                    "--requests", str(args.requests), "--max-tokens", str(args.max_tokens), "--prompt-tokens", "32",
                    "--threads", str(args.threads), "--memory", args.memory, "--no-baseline", "--no-raw",
                    "--json-schema", str(ROOT / "tests" / "bench" / "orders_schema.json"),
                    "--json", str(args.work / f"results-{bundle.name}.json")], check=True)


if __name__ == "__main__":
    main()
