"""``edgeopt serve BUNDLE``: an OpenAI-compatible server over the continuous-batching engine.

The server stack is imported inside the command, so other commands never pay for FastAPI, and
serving a GGUF bundle never imports torch or transformers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgeopt.byte_sizes import parse_size, read_memory
from edgeopt.cli.options import Context, KvType, Target, Threads
from edgeopt.errors import BundleError, ConfigError
from edgeopt.server.http.connection_guard import DEFAULT_HEADER_TIMEOUT_S

DEFAULT_SWAP_SPACE = "1GiB"


def parse_memory(text: str, target: str = "host") -> int:
    """'4GiB', '4G', '512MiB', '4GB' (decimal), '1.5g' or a bare number of MiB -> bytes; a bare number beyond
    the memory of ``target`` (the device this server runs on) is refused as a likely byte count."""
    from edgeopt.profiles import GIB, load_profile

    profile = load_profile(target)
    return read_memory(text, "--memory", int(profile.total_memory_gb * GIB), profile.name)


def parse_prefix_cache_memory(text: str | None, prefix_cache: bool) -> int | None:
    """Bytes of ``--prefix-cache-memory`` (None: the default); refused beside --no-prefix-cache, which it
    would contradict."""
    if text is None:
        return None
    if not prefix_cache:
        raise ConfigError(f"--prefix-cache-memory {text} sizes the prefix cache, which --no-prefix-cache turns off",
                          "drop one of the two (--prefix-cache-memory 0 keeps no cells for cached prefixes)")
    return parse_size(text, "--prefix-cache-memory")


def speculative_mode(asked: str | None, draft: Path | None, several: bool) -> str:
    """The --speculative mode, checked beside --draft: a draft model is the drafting source of "draft" (its
    default) and "auto", and nothing else."""
    from edgeopt.speculation_modes import DEFAULT_MODE, check_mode

    mode = asked or ("draft" if draft is not None else DEFAULT_MODE)
    check_mode(mode)
    if draft is None and mode == "draft":
        raise ConfigError("--speculative draft needs a draft model", "pass --draft BUNDLE_OR_GGUF")
    if draft is not None and mode not in ("draft", "auto"):
        raise ConfigError(f"--draft {draft} drafts with a model; --speculative {mode} asks for "
                          f"{'no speculation' if mode == 'off' else 'n-gram lookup'}",
                          "leave --speculative out with --draft, or drop --draft")
    if draft is not None and several:
        raise ConfigError(f"--draft {draft} drafts for one model; several models were given",
                          "serve the target alone with --draft")
    return mode


def serve(
    bundles: Annotated[Optional[list[Path]], typer.Argument(
        help="Bundle directories written by edgeopt optimize, or GGUF model files (llama.cpp's, a hub download) "
             "served from their own metadata. Several: one server, one memory budget, the request's model picks "
             "(docs/many-models.md).", show_default=False)] = None,
    models: Annotated[Optional[Path], typer.Option(
        "--models", exists=True, file_okay=False,
        help="Serve every bundle and GGUF file in this folder (scanned again when models are listed).")] = None,
    keep_alive: Annotated[Optional[str], typer.Option(
        "--keep-alive",
        help="Several models: how long an idle model stays loaded (5m, 30s, 1h; 0 unloads when its requests end, "
             "-1 never). Default 5m, as Ollama. Ollama's per-request keep_alive overrides it.")] = None,
    pin: Annotated[Optional[list[str]], typer.Option(
        "--pin", help="Several models: load this model at start and never unload it (repeatable).")] = None,
    swap_space: Annotated[Optional[str], typer.Option(
        "--swap-space",
        help="Several models: disk for the prefix caches of unloaded models (e.g. 2GiB; 0 keeps none), so a "
             "conversation whose model was swapped out resumes from its cached prefix. Default 1GiB, under "
             "~/.cache/edgeopt/swap.")] = None,
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 exposes the server to the network.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    api_key: Annotated[Optional[str], typer.Option("--api-key", envvar="EDGEOPT_API_KEY", show_envvar=True,
                                                   help="Require 'Authorization: Bearer KEY' on every route but /health "
                                                        "and /metrics. Prefer the environment variable: a flag shows in ps.")] = None,
    api_keys: Annotated[Optional[Path], typer.Option(
        "--api-keys", exists=True, dir_okay=False,
        help="A JSON file of caller name -> key: each key is its own tenant (a stored response is visible only to "
             "the key that made it). docs/api.md has the rule.")] = None,
    admin_key: Annotated[Optional[str], typer.Option(
        "--admin-key", envvar="EDGEOPT_ADMIN_KEY", show_envvar=True,
        help="The operator's key: with keys set, only it sees request ids on /v1/edgeopt/requests (edgeopt monitor "
             "--api-key ADMIN_KEY) and may empty the prefix cache.")] = None,
    insecure_no_auth: Annotated[bool, typer.Option("--insecure-no-auth",
                                                   help="Allow a --host other than loopback without an API key.")] = False,
    max_concurrency: Annotated[Optional[int], typer.Option("--max-concurrency", min=1,
                                                           help="Sequences decoded together. Default: what the KV budget affords (up to 16).")] = None,
    context: Context = None,
    memory: Annotated[Optional[str], typer.Option("--memory", help="Memory the server may use (e.g. 4GiB); overrides --target.")] = None,
    target: Target = "host",
    threads: Threads = None,
    kv_type: KvType = None,
    max_waiting: Annotated[int, typer.Option("--max-waiting", min=0, help="Queued requests beyond which new ones get 429.")] = 256,
    verify: Annotated[bool, typer.Option("--verify/--no-verify", help="Check the bundle's sha256 sums first.")] = True,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
    header_timeout: Annotated[float, typer.Option("--header-timeout", min=0.001,
                                                  help="Seconds a connection may take to send a request's headers.")] = DEFAULT_HEADER_TIMEOUT_S,
    max_connections: Annotated[Optional[int], typer.Option("--max-connections", min=1,
                                                           help="Open connections beyond which new ones get 503. "
                                                                "Default: 512, or half the file-descriptor limit.")] = None,
    parse_special_in_content: Annotated[bool, typer.Option(
        "--parse-special-in-content",
        help="Let control-token text in chat messages (e.g. '<|im_start|>') become control tokens, as before. "
             "Off by default: a user message could otherwise forge a system turn.")] = False,
    prefix_cache: Annotated[bool, typer.Option(
        "--prefix-cache/--no-prefix-cache",
        help="Keep finished requests' KV and reuse it for prompts that start the same way (chat turns, a shared "
             "system prompt); evicted first when memory is needed. Empty it with DELETE /v1/edgeopt/cache.")] = True,
    kv_layout: Annotated[str, typer.Option(
        "--kv-layout",
        help="llama.cpp (GGUF) KV layout. unified: one pool all sequences share (cached prefixes share cells, "
             "a sequence may use what the others leave). streams: a stream of --context cells per sequence, as "
             "llama-server lays it out: a decode step scans only its own cells (~10% less CPU at 16 streams, "
             "~25% with idle cached prefixes), cached prefixes are copies in streams of their own. auto: "
             "streams when memory holds a --context stream per sequence and (prefix cache on) as many for "
             "cached prefixes, else unified.")] = "auto",
    flash_attention: Annotated[str, typer.Option(
        "--flash-attention",
        help="llama.cpp (GGUF) attention kernel. auto: in the streams layout with an f16 KV cache on the CPU, "
             "plain attention where this device runs it faster (timed once per model file, ~1 s for a 135M "
             "model; on a 2-core x86 it decodes 1.4x faster at 500 tokens of context), else flash attention. "
             "on: flash attention. off: plain attention (streams layout and f16 KV only).")] = "auto",
    stream_interval_ms: Annotated[float, typer.Option(
        "--stream-interval-ms", min=0,
        help="Send a stream's new text at most this often when tokens come faster (a request's first and last "
             "token go at once). Sending every token costs the server ~5% of one stream's speed on a 2-core "
             "CPU; 0 sends every token.")] = 50.0,
    speculative: Annotated[Optional[str], typer.Option(
        "--speculative",
        help="Speculative decoding: guessed tokens verified in the same forward pass, the output unchanged "
             "(docs/speculative_decoding.md). auto (the default): the best drafting source available (today n-gram lookup in "
             "the request's own prompt and output), drafting only where it pays (a lone stream, text that "
             "quotes its prompt) and not when the batch is full; with --draft, the draft model, as many tokens as its "
             "measured cost pays for. ngram: n-gram lookup. draft: the --draft model, --draft-tokens every step (the "
             "default with --draft). off: none. Default: auto (draft with --draft).")] = None,
    draft: Annotated[Optional[Path], typer.Option(
        "--draft", exists=True,
        help="A small model (bundle or GGUF file) with the target's vocabulary that drafts tokens for the target to "
             "verify in its step (speculative decoding; output unchanged). Its weights and KV come out of the memory "
             "budget first (edgeopt plan --draft shows it). For memory-bound devices (docs/speculative_decoding.md).")] = None,
    draft_tokens: Annotated[int, typer.Option(
        "--draft-tokens", min=1, max=16, help="Tokens the --draft model proposes per sequence and step.")] = 4,
    responses_store: Annotated[str, typer.Option(
        "--responses-store",
        help="Memory for responses kept for previous_response_id and GET /v1/responses/{id} (e.g. 64MiB; 0 keeps "
             "none), least recently used evicted first. Outside --memory's KV budget.")] = "32MiB",
    prefix_cache_memory: Annotated[Optional[str], typer.Option(
        "--prefix-cache-memory",
        help="KV memory for cached prefixes beyond the live sequences' cells (e.g. 256MiB; 0: none of their own). "
             "Default: with --kv-layout streams, a --context stream per cache entry (as many as running sequences, "
             "at least 8) while memory holds it; unified, none (cached prefixes keep cells live sequences leave "
             "free). edgeopt plan and the start line show the cells by purpose.")] = None,
    warm: Annotated[Optional[Path], typer.Option(
        "--warm", exists=True, dir_okay=False,
        help="A text file holding a system prompt: its KV is computed once, saved beside it (FILE.kvstate) and "
             "loaded on later starts, so the first chat using that system prompt is already a cache hit (GGUF).")] = None,
    chat_template: Annotated[Optional[Path], typer.Option(
        "--chat-template", exists=True, dir_okay=False,
        help="A Jinja chat template file (the format of tokenizer_config.json's chat_template) used instead of "
             "the model's own: for a GGUF converted without one, which otherwise answers only /v1/completions.")] = None,
    workers: Annotated[Optional[str], typer.Option(
        "--workers",
        help="Split the model across llama.cpp RPC workers (edgeopt worker on each board): host:port[,host:port...]. "
             "Layers and KV are planned per device (edgeopt plan --workers); a worker that dies ends the requests "
             "in flight, /health answers 503 naming it, and the model reloads when it is back (GGUF).")] = None,
    worker_timeout: Annotated[float, typer.Option(
        "--worker-timeout", min=1,
        help="Seconds a worker may leave the head without an answer (a board that lost power or network) before "
             "it counts as dead; longer than the slowest step a worker takes.")] = 60.0,
) -> None:
    """Serve a bundle or a GGUF file (or several, on one memory budget) behind OpenAI-, Anthropic- and
    Ollama-compatible APIs (/v1/chat/completions, /v1/messages, /api/chat, /metrics)."""
    import logging

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    early = None
    if bundles and len(bundles) == 1 and not models and not workers and draft is None:
        # before the server stack's imports below, which it overlaps (a second of a cold start)
        from edgeopt.server.startup.early_load import start_early_load

        early = start_early_load(bundles[0])

    from edgeopt.rpc.endpoints import parse_workers
    from edgeopt.server.http.callers import load_api_keys
    from edgeopt.server.startup.launcher import INHERITED_SOCKET_ENV, ServeOptions, serve_bundle
    from edgeopt.server.models.keep_alive import DEFAULT_KEEP_ALIVE_S, parse_keep_alive

    paths = list(bundles or [])
    several = bool(models) or len(paths) > 1
    if not paths and not models:
        raise ConfigError("no model to serve", "pass a bundle directory or GGUF file (several for one server of "
                          "several models), or --models DIR")
    if not several:
        for flag, value in (("--keep-alive", keep_alive), ("--pin", pin), ("--swap-space", swap_space)):
            if value:
                raise ConfigError(f"{flag} applies to a server of several models; this one serves {paths[0]} "
                                  "alone, which stays loaded", f"drop {flag}, or name more models (or --models DIR)")
    if several and chat_template:
        raise ConfigError("--chat-template replaces one model's template; several models were given",
                          "serve the model that needs it alone, or write the template into its bundle")
    if several and workers:
        raise ConfigError("--workers splits one model across RPC workers; several models were given",
                          "serve the split model alone: edgeopt serve MODEL --workers ...")
    speculative = speculative_mode(speculative, draft, several)
    if port < 0 or port > 65535:
        raise ConfigError(f"--port {port} is out of range", "use 1..65535, or 0 for any free port")
    endpoints = parse_workers(workers) if workers else ()
    if endpoints and not os.environ.get(INHERITED_SOCKET_ENV):  # the supervisor; the server is its child
        from edgeopt.rpc.supervisor import run_supervised
        from edgeopt.server.http.auth import check_exposure

        keys = load_api_keys(api_keys) if api_keys else {}
        any_key = api_key or os.environ.get("EDGEOPT_API_KEY") or admin_key or next(iter(keys.values()), None)
        check_exposure(host, port, any_key, insecure_no_auth)
        raise typer.Exit(run_supervised(host, port, endpoints))
    options = ServeOptions(host=host, port=port, api_key=api_key, admin_key=admin_key,
                           api_keys=load_api_keys(api_keys) if api_keys else {}, max_concurrency=max_concurrency,
                           context=context,
                           memory_bytes=parse_memory(memory, target) if memory else None, target=target, threads=threads,
                           max_waiting=max_waiting, verify=verify, log_level=log_level,
                           insecure_no_auth=insecure_no_auth, header_timeout_s=header_timeout,
                           max_connections=max_connections,
                           parse_special_in_content=parse_special_in_content, kv_type=kv_type,
                           prefix_cache=prefix_cache, warm_file=warm, kv_layout=kv_layout,
                           flash_attention=flash_attention,
                           stream_interval_ms=stream_interval_ms, speculative=speculative,
                           responses_store_bytes=parse_size(responses_store, "--responses-store"), workers=endpoints,
                           worker_timeout_s=worker_timeout,
                           prefix_cache_bytes=parse_prefix_cache_memory(prefix_cache_memory, prefix_cache),
                           keep_alive_s=parse_keep_alive(keep_alive) if keep_alive else DEFAULT_KEEP_ALIVE_S,
                           pins=tuple(pin or ()),
                           swap_space_bytes=parse_size(swap_space or DEFAULT_SWAP_SPACE, "--swap-space"),
                           draft=draft, draft_tokens=draft_tokens,
                           chat_template=read_chat_template(chat_template) if chat_template else None)
    if several:
        from edgeopt.server.startup.launch_many import serve_models

        serve_models(paths, models, options)
    else:
        serve_bundle(paths[0], options, early)


def read_chat_template(path: Path) -> str:
    """``--chat-template``'s text, checked as Jinja before any model loads."""
    from edgeopt.server.chat.template import ChatTemplate

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--chat-template {path} cannot be read as text: {exc}", "pass a UTF-8 Jinja file") from exc
    try:
        ChatTemplate(text)
    except BundleError as exc:
        raise ConfigError(f"--chat-template {path}: {exc.message}", "fix the template's Jinja syntax") from exc
    return text
