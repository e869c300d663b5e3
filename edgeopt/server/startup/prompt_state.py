"""``edgeopt serve --warm FILE``: the system prompt in FILE is in the prefix cache before the first request.

The first start computes the prompt's KV (one request through the engine, so it is cached like any
other) and saves that cache entry with llama.cpp's sequence state (``llama_state_seq_save_file``) to
``FILE.kvstate``, beside a fingerprint ``FILE.kvstate.json``. Later starts load the state instead of
computing it, so even the first request after a reboot skips the system prompt.

What is cached is the part of a chat prompt that does not depend on the user's messages: the token
prefix two renderings with different user messages share (the template's header, the system turn and
the next turn's opening). A state saved for another model file, another KV element type or another
llama.cpp is refused with the difference named; a state whose tokens no longer match FILE's text (it
was edited) is computed again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from edgeopt.store.bundle import Manifest
from edgeopt.engine import SamplingParams
from edgeopt.engine.api import SHARED_NAMESPACE, ServingEngine
from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import Runtime, Tokenizer
from edgeopt.server.chat.template import ChatTemplate

log = logging.getLogger("edgeopt.server")
STATE_FORMAT = 1  # bump when what the fingerprint covers changes
_PROBES = ("a", "b")  # two user messages whose renderings differ right after the shared prefix


@dataclass(frozen=True)
class WarmResult:
    source: str  # "loaded" (from FILE.kvstate) or "computed" (and saved)
    tokens: int
    seconds: float


def state_paths(warm_file: Path) -> tuple[Path, Path]:
    return warm_file.with_name(warm_file.name + ".kvstate"), warm_file.with_name(warm_file.name + ".kvstate.json")


def system_prefix_tokens(system_text: str, tokenizer: Tokenizer, template: ChatTemplate | None) -> list[int]:
    """Tokens every chat with this system prompt starts with (the prompt itself without a template)."""
    if template is None:
        return tokenizer.encode(system_text)
    renders = [tokenizer.encode(template.render([{"role": "system", "content": system_text},
                                                 {"role": "user", "content": probe}])) for probe in _PROBES]
    shared = 0
    while shared < min(map(len, renders)) and renders[0][shared] == renders[1][shared]:
        shared += 1
    return renders[0][:shared]


def fingerprint(manifest: Manifest, runtime: Runtime) -> dict[str, Any]:
    model_hash = manifest.files.get(manifest.model_file, {}).get("sha256")
    return {"format": STATE_FORMAT, "model_file": manifest.model_file, "model_sha256": model_hash,
            "kv_type": runtime.kv_type, "llama_cpp_python": version("llama-cpp-python"),
            "v_transposed": runtime.kv_v_transposed}


def warm_prompt_cache(engine: ServingEngine, runtime: Runtime, manifest: Manifest, template: ChatTemplate | None,
                      tokenizer: Tokenizer, warm_file: Path, namespace: str = SHARED_NAMESPACE) -> WarmResult:
    """Load FILE's saved prompt state into the prefix cache's ``namespace`` (the operator's on a server with keys,
    which every tenant reads), or compute and save it."""
    started = time.perf_counter()
    try:
        text = Path(warm_file).read_text()
    except OSError as exc:
        raise ConfigError(f"--warm {warm_file}: {exc.strerror}", "pass a readable text file holding the system prompt")
    tokens = system_prefix_tokens(text, tokenizer, template)
    if not 1 < len(tokens) < engine.context_tokens:
        raise ConfigError(f"--warm {warm_file}: its prompt is {len(tokens)} tokens; the context holds "
                          f"{engine.context_tokens}", "use a shorter system prompt or a larger --context")
    state, meta = state_paths(Path(warm_file))
    expected = fingerprint(manifest, runtime)
    if state.is_file():
        _check_fingerprint(state, meta, expected)
        if engine.adopt_prefix(tokens, _loader(runtime, state, tokens), namespace):
            return WarmResult("loaded", len(tokens), time.perf_counter() - started)
        log.warning("%s no longer matches %s (edited?) or does not fit the cache: computing it again", state, warm_file)
    _compute(engine, tokens, namespace)
    if engine.with_cached_prefix(tokens, lambda seq_id: _save(runtime, seq_id, state, tokens), namespace) is None:
        raise ConfigError("the warmed prompt is not in the prefix cache", "serve without --no-prefix-cache")
    _write_json(meta, expected | {"tokens": len(tokens)})
    return WarmResult("computed", len(tokens), time.perf_counter() - started)


def _check_fingerprint(state: Path, meta: Path, expected: dict[str, Any]) -> None:
    try:
        stored = json.loads(meta.read_text())
    except (OSError, json.JSONDecodeError):
        stored = {}
    differences = [f"{key} {stored.get(key)!r} (this server: {value!r})" for key, value in expected.items()
                   if stored.get(key) != value]
    if differences:
        raise ConfigError(f"the stored prompt state {state} does not match this server: {'; '.join(differences)}",
                          f"delete {state} and {meta.name} to compute it again for this model, or serve the "
                          "model and --kv-type it was saved with")


def _loader(runtime: Runtime, state: Path, tokens: list[int]):
    def fill(seq_id: int) -> bool:
        return runtime.load_sequence(seq_id, state, len(tokens)) == tokens
    return fill


def _compute(engine: ServingEngine, tokens: list[int], namespace: str) -> None:
    async def run() -> None:
        params = SamplingParams(max_tokens=1, temperature=0.0)
        stream = engine.add_request("edgeopt-warm", tokens, params, cache_namespace=namespace)
        await stream.collect()

    asyncio.run(run())


def _save(runtime: Runtime, seq_id: int, state: Path, tokens: list[int]) -> int:
    """Write cache entry ``seq_id``'s state to ``state`` (atomically); returns the bytes written."""
    partial = state.with_name(state.name + ".partial")
    written = runtime.save_sequence(seq_id, partial, tokens)
    os.replace(partial, state)
    return written


def _write_json(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(partial, path)
