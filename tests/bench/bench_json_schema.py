"""Issue-13 benchmark: the cost of constrained decoding (response_format json_schema) at 16 streams.

    .venv/bin/python tests/bench/bench_json_schema.py [--hidden 384] [--layers 6] [--work /tmp/edgeopt-bench-schema]

Builds (once, cached in --work) a Qwen2 checkpoint with the full 151,646-token vocabulary (the mask
covers every token, so vocabulary size is what makes masks expensive) and random weights, converts it
to a Q8_0 GGUF bundle, then runs ``edgeopt bench serve -n 16 --json-schema tests/bench/orders_schema.json``:
the same server decodes 16 streams without and with the schema, alternating rounds, and prints the ratio
and the grammar mask time per step. The schema's shortest output (500 orders) is longer than
--max-tokens, so constrained streams decode as many tokens as free ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: make `tests` importable


def build_bundle(work: Path, hidden: int, layers: int) -> Path:
    bundle = work / f"bundle-151k-h{hidden}-l{layers}-q8_0"
    if (bundle / "manifest.json").is_file():
        return bundle
    from exporters.gguf.exporter import GGUFExporter
    from tests.fixtures.big_vocab import write_big_bpe_tokenizer
    from tests.fixtures.tiny_models import build_tiny_model
    from tests.server.gguf_bundle import make_gguf_bundle

    tokenizer_dir = write_big_bpe_tokenizer(work / "tokenizer-151k")
    checkpoint = build_tiny_model(work / f"hf-151k-h{hidden}-l{layers}", "qwen2", tokenizer_dir, hidden_size=hidden,
                                  num_layers=layers, intermediate_size=hidden * 3)
    config = json.loads((checkpoint / "config.json").read_text())
    config["max_position_embeddings"] = 2048
    (checkpoint / "config.json").write_text(json.dumps(config, indent=2))
    export_dir = work / f"export-h{hidden}-l{layers}"
    result = GGUFExporter().export(checkpoint, export_dir, "Q8_0", {"threads": 2})
    return make_gguf_bundle(export_dir / result.model_file, checkpoint, bundle, quant="Q8_0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-schema"))
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    bundle = build_bundle(args.work, args.hidden, args.layers)
    subprocess.run([sys.executable, "-m", "edgeopt.cli", "bench", "serve", str(bundle), "--concurrency", "16",
                    "--requests", str(args.requests), "--max-tokens", str(args.max_tokens), "--prompt-tokens", "32",
                    "--threads", str(args.threads), "--memory", "2GiB", "--no-baseline", "--no-raw",
                    "--json-schema", str(ROOT / "tests" / "bench" / "orders_schema.json"),
                    "--json", str(args.work / f"results-h{args.hidden}-l{args.layers}.json")], check=True)


if __name__ == "__main__":
    main()
