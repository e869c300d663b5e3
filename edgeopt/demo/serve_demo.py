"""The last leg of ``make demo``: serve a bundle, send one chat request, print the answer, stop.

Run as ``python -m edgeopt.demo.serve_demo BUNDLE [--question Q] [--expect WORD]``. The server runs as a
child process on a free loopback port; it is stopped on every exit path (success, error, Ctrl-C), and its
log is printed when it fails to come up. Prints the answer and the bundle's quality line (from its
manifest); with ``--expect`` the demo fails when the answer does not contain that word, so ``make demo``
checks itself. Uses only the stdlib and httpx: no torch on the serving side.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

from edgeopt.store.bundle import read_manifest
from edgeopt.errors import BackendError
from edgeopt.server.startup.serve_process import launched_server

DEFAULT_QUESTION = "What does json.dumps do?"
# The figures that say what quantization cost, against the original model (edgeopt.evaluation.causal_lm).
QUALITY_KEYS = ("perplexity", "perplexity_original", "kl_divergence", "top1_agreement")


def ask(base_url: str, question: str, max_tokens: int) -> str:
    """One non-streaming chat completion at temperature 0; returns the assistant's text."""
    models = httpx.get(f"{base_url}/v1/models", timeout=10.0).raise_for_status().json()["data"]
    body = {"model": models[0]["id"], "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0.0}
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=120.0)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def quality_line(bundle: Path) -> str:
    """The bundle's measured quality, as optimize printed it: the figures that compare it with the original."""
    manifest = read_manifest(bundle)
    metrics = manifest.metrics or {}
    shown = [f"{key}={metrics[key]:.4g}" for key in QUALITY_KEYS if isinstance(metrics.get(key), (int, float))]
    what = f"{manifest.format}:{manifest.quant}, {sum(info['bytes'] for info in manifest.files.values()) / 2**20:.0f} MiB"
    return f"quality ({what}): " + (", ".join(shown) if shown else "not measured (optimized with --no-eval)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--question", default=DEFAULT_QUESTION)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--expect", help="fail unless the answer contains this (case-insensitive)")
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=2, help="runtime CPU threads for the server")
    args = parser.parse_args(argv)
    log_path = args.bundle.parent / "serve.log"
    try:
        with launched_server(args.bundle, threads=args.threads, startup_timeout_s=args.startup_timeout,
                             log_path=log_path) as server:
            base_url = server.base_url
            started = time.perf_counter()
            answer = ask(base_url, args.question, args.max_tokens)
    except (BackendError, httpx.HTTPError) as exc:
        print(f"demo failed: {exc}\n--- server log ({log_path}) ---", file=sys.stderr)
        print(log_path.read_text()[-4000:] if log_path.is_file() else "(no log)", file=sys.stderr)
        return 1
    print(f"user:      {args.question}")
    print(f"assistant: {answer.strip()}")
    print(f"({time.perf_counter() - started:.2f}s, server on {base_url}, log {log_path})")
    print(quality_line(args.bundle))
    if args.expect and args.expect.casefold() not in answer.casefold():
        print(f"demo failed: the answer does not contain {args.expect!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
