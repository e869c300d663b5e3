"""``edgeopt bench serve BUNDLE``: load-test the server and compare it with its two baselines;
``edgeopt bench embed BUNDLE``: load-test /v1/embeddings of an embedding bundle.

Prints one line per concurrency level, then the ratios: server at the top concurrency over
llama.cpp's raw batched decode of as many sequences (the cost of HTTP + engine), and over the same
server answering one request at a time (the gain of continuous batching). ``--json`` writes it all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgeopt.cli.options import BundleArg, JsonFile, Threads

bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)


@bench_app.command("serve")
def serve(
    bundle: BundleArg,
    concurrency: Annotated[str, typer.Option("--concurrency", "-n", help="Comma-separated stream counts.")] = "1,4,16",
    requests: Annotated[int, typer.Option("--requests", min=0, help="Requests per level (0: twice the level).")] = 0,
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", min=1, help="Approximate prompt length.")] = 32,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Tokens generated per request.")] = 64,
    threads: Threads = None,
    memory: Annotated[Optional[str], typer.Option("--memory", help="Server memory budget, e.g. 4GiB.")] = None,
    baseline: Annotated[bool, typer.Option("--baseline/--no-baseline", help="Also run a --max-concurrency 1 server.")] = True,
    raw: Annotated[bool, typer.Option("--raw/--no-raw", help="Also time llama.cpp's raw batched decode.")] = True,
    json_schema: Annotated[Optional[Path], typer.Option(
        "--json-schema", exists=True, dir_okay=False,
        help="Also measure decode at the top concurrency with this response_format schema vs without.")] = None,
    json_out: JsonFile = None,
) -> None:
    """HTTP load generator: TTFT / ITL / end-to-end percentiles and aggregate tokens/s per concurrency."""
    from edgeopt.bench.serve_bench import ServeBenchConfig, run_serve_bench

    cfg = ServeBenchConfig(bundle=bundle, concurrency=_levels(concurrency), requests_per_level=requests,
                           prompt_tokens=prompt_tokens, max_tokens=max_tokens, threads=threads, memory=memory,
                           baseline=baseline, raw=raw, json_schema=json_schema)
    result = run_serve_bench(cfg, report=typer.echo)
    print_table(result)
    _write_json(result, json_out)


@bench_app.command("embed")
def embed(
    bundle: BundleArg,
    concurrency: Annotated[str, typer.Option("--concurrency", "-n", help="Comma-separated client counts.")] = "1,8,32",
    requests: Annotated[int, typer.Option("--requests", min=0, help="Requests per level (0: four per client).")] = 0,
    texts: Annotated[int, typer.Option("--texts", min=1, help="Texts per request.")] = 1,
    words: Annotated[int, typer.Option("--words", min=1, help="Words per text.")] = 24,
    threads: Threads = None,
    json_out: JsonFile = None,
) -> None:
    """Load-test /v1/embeddings of an embedding bundle: texts/s and latency percentiles per client count."""
    from edgeopt.bench.embed_bench import EmbedBenchConfig, run_embed_bench

    cfg = EmbedBenchConfig(bundle=bundle, concurrency=_levels(concurrency), requests_per_level=requests,
                           texts_per_request=texts, words=words, threads=threads)
    result = run_embed_bench(cfg, report=typer.echo)
    typer.echo(f"\n{'clients':>8} {'texts/s':>9} {'req/s':>8} {'p50':>8} {'p90':>8} {'p99':>8} {'errors':>6}")
    for r in result["levels"]:
        lat = r["latency"]
        typer.echo(f"{r['concurrency']:>8} {r['texts_per_s']:>9.1f} {r['requests_per_s']:>8.1f} "
                   f"{lat.get('p50_ms', 0):>6.1f}ms {lat.get('p90_ms', 0):>6.1f}ms {lat.get('p99_ms', 0):>6.1f}ms "
                   f"{r['errors']:>6}")
    typer.echo(f"server RSS: {result['server_rss_bytes'] / 2**20:.0f} MiB")
    _write_json(result, json_out)


def _write_json(result: dict, path: Path | None) -> None:
    if path is not None:
        path.write_text(json.dumps(result, indent=2))
        typer.echo(f"results written to {path}")


def _levels(concurrency: str) -> tuple[int, ...]:
    from edgeopt.errors import ConfigError

    try:
        levels = tuple(sorted({int(x) for x in concurrency.split(",") if x.strip()}))
    except ValueError:
        raise ConfigError(f"--concurrency {concurrency!r} is not a list of integers", "write e.g. 1,4,16") from None
    if not levels or levels[0] < 1:
        raise ConfigError(f"--concurrency {concurrency!r} needs positive levels", "write e.g. 1,4,16")
    return levels


def print_table(result: dict) -> None:
    typer.echo(f"\n{'streams':>8} {'tok/s':>9} {'decode':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} "
               f"{'e2e p50':>8} {'errors':>6}")
    rows = [(str(r["concurrency"]), r) for r in result["server"]]
    if result.get("baseline"):
        rows.append((f"{result['baseline']['concurrency']}@1", result["baseline"]))
    for label, r in rows:
        typer.echo(f"{label:>8} {r['tokens_per_s']:>9.1f} {r['decode_tokens_per_s']:>9.1f} {r['ttft'].get('p50_ms', 0):>8.0f}ms "
                   f"{r['ttft'].get('p99_ms', 0):>7.0f}ms {r['itl'].get('p50_ms', 0):>6.1f}ms "
                   f"{r['itl'].get('p99_ms', 0):>6.1f}ms {r['e2e'].get('p50_ms', 0):>6.0f}ms {r['errors']:>6}")
    if result.get("raw"):
        typer.echo(f"{'raw':>8} {'':>9} {result['raw']['tokens_per_s']:>9.1f}  (llama.cpp batched decode, "
                   f"{result['raw']['sequences']} sequences)")
    ratios = result["ratios"]
    typer.echo(f"decode tok/s, server / raw llama.cpp:          {ratios['server_over_raw']}")
    typer.echo(f"decode tok/s, server / one-request-at-a-time:  {ratios['server_over_one_at_a_time']}")
    if ratios.get("raw_batched_over_raw_single"):
        typer.echo(f"decode tok/s, raw batched / raw 1 sequence:   {ratios['raw_batched_over_raw_single']}"
                   "  (the most batching can buy on this model and machine)")
    if result.get("json_schema"):
        schema = result["json_schema"]
        typer.echo(f"decode tok/s, with --json-schema / without:   {schema['schema_over_free']}  (median of "
                   f"{schema['rounds']} paired rounds at {schema['streams']} streams; per step: masks "
                   f"{schema['mask_ms_per_step']} ms beside the forward, {schema['wait_ms_per_step']} ms waited, "
                   f"{schema['apply_ms_per_step']} ms applied incl. {schema['redo_ms_per_step']} ms masks of refused "
                   f"picks; picks refused: {schema['refused_per_step']} of {schema['checked_per_step']} checked "
                   f"per step, share {schema['refused_share']})")
    rss, limit = result["server_rss_bytes"], result["rss_limit_bytes"]
    typer.echo(f"server RSS: {rss / 2**20:.0f} MiB; bundle + KV + 120 MB = {limit / 2**20:.0f} MiB "
               f"({'within' if rss <= limit else 'OVER'} budget)")
