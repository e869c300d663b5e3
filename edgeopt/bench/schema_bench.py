"""``edgeopt bench serve --json-schema FILE``: what constrained decoding costs, measured side by side.

One server, the top concurrency: rounds of the same load without and with ``response_format`` =
the schema, back to back (which goes first alternates), so a slow moment of a busy machine hits both
halves of a round. The figure is
the median over rounds of each round's constrained / free decode tokens/s (target >= 0.9), counted in
tokens (``usage``), not text chunks. The server's grammar
counters (/metrics) say where the constrained time goes. Greedy and plain-temperature rows are drawn
without a mask and their pick checked: only refused picks get a mask, computed after the forward pass
(the "redo" time, part of "applied"); how many picks were refused per step is what that costs. Rows that
need a full mask (top-k/top-p/min-p, logprobs) get it on a helper thread beside the forward pass, so only
the *wait* after the forward slows decoding; "masks" is all mask computing, both kinds.

Choose a schema whose shortest valid output is longer than --max-tokens (e.g. an array with a large
``minItems``): a request that completes its schema early stops early and measures less decoding.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from edgeopt.bench.loadgen import LoadResult, run_load
from edgeopt.errors import ConfigError

ROUNDS = 5
GRAMMAR_COUNTERS = ("edgeopt_grammar_steps", "edgeopt_grammar_mask_seconds", "edgeopt_grammar_wait_seconds",
                    "edgeopt_grammar_apply_seconds", "edgeopt_grammar_redo_seconds", "edgeopt_grammar_checked",
                    "edgeopt_grammar_refused")


def read_schema(path: Path) -> dict[str, Any]:
    try:
        schema = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--json-schema {path} is not a readable JSON file: {exc}", "pass a JSON schema file") from exc
    if not isinstance(schema, dict):
        raise ConfigError(f"--json-schema {path} holds a {type(schema).__name__}, not a JSON schema object",
                          'write a schema such as {"type": "object", ...}')
    return schema


def compare_with_schema(url: str, model: str, streams: int, requests: int, prompt_tokens: int, max_tokens: int,
                        schema: dict[str, Any], report: Callable[[str], None]) -> dict[str, Any]:
    """Alternate free and constrained loads on the running server at ``url``; medians, ratio, mask costs."""
    constrained = {"response_format": {"type": "json_schema", "json_schema": {"name": "bench", "schema": schema}}}
    asyncio.run(run_load(url, model, 1, 1, prompt_tokens, 4, extra_body=constrained))  # compile once, warm up
    free_tps: list[float] = []
    schema_tps: list[float] = []
    before = grammar_counters(url)
    for round_index in range(ROUNDS):
        # The order alternates too, so neither side always runs first (after an idle moment, say).
        sides = {"free": None, "constrained": constrained}
        order = ["free", "constrained"] if round_index % 2 == 0 else ["constrained", "free"]
        loads = {side: asyncio.run(run_load(url, model, streams, requests, prompt_tokens, max_tokens,
                                            extra_body=sides[side])) for side in order}
        free, bound = loads["free"], loads["constrained"]
        _check(free, "free")
        _check(bound, "constrained")
        free_tps.append(free.decoded_tokens_per_s)  # tokens, not text chunks (see LoadResult)
        schema_tps.append(bound.decoded_tokens_per_s)
        report(f"  round {round_index + 1}: free {free.decoded_tokens_per_s:8.1f} tok/s, with schema "
               f"{bound.decoded_tokens_per_s:8.1f} tok/s ({bound.completion_tokens} tokens)")
    after = grammar_counters(url)
    steps = after["edgeopt_grammar_steps"] - before["edgeopt_grammar_steps"]
    per_step = {name: (after[name] - before[name]) / steps * 1e3 if steps else 0.0 for name in GRAMMAR_COUNTERS[1:]}
    checked = after["edgeopt_grammar_checked"] - before["edgeopt_grammar_checked"]
    refused = after["edgeopt_grammar_refused"] - before["edgeopt_grammar_refused"]
    paired = [bound / free for free, bound in zip(free_tps, schema_tps) if free > 0]
    return {"streams": streams, "rounds": ROUNDS, "free_decode_tokens_per_s": free_tps,
            "schema_decode_tokens_per_s": schema_tps, "round_ratios": [round(r, 3) for r in paired],
            "schema_over_free": round(statistics.median(paired), 3) if paired else None,
            "grammar_steps": int(steps), "mask_ms_per_step": round(per_step["edgeopt_grammar_mask_seconds"], 3),
            "wait_ms_per_step": round(per_step["edgeopt_grammar_wait_seconds"], 3),
            "apply_ms_per_step": round(per_step["edgeopt_grammar_apply_seconds"], 3),
            "redo_ms_per_step": round(per_step["edgeopt_grammar_redo_seconds"], 3),
            "checked_per_step": round(checked / steps, 2) if steps else 0.0,
            "refused_per_step": round(refused / steps, 2) if steps else 0.0,
            "refused_share": round(refused / checked, 3) if checked else None}


def grammar_counters(url: str) -> dict[str, float]:
    values = dict.fromkeys(GRAMMAR_COUNTERS, 0.0)
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        if family.name in values:
            values[family.name] = float(family.samples[0].value)
    return values


def _check(result: LoadResult, label: str) -> None:
    if result.errors:
        raise ConfigError(f"the {label} load had {len(result.errors)} failed requests: {result.errors[0]}",
                          "check the schema with a single request first")
