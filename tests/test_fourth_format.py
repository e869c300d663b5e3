"""Adding a format is one registry entry plus its own modules: a fourth format (tests/fourth_format) is
planned, exported into a bundle, scored and served through the real planner, pipeline and launcher."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openai
import pytest

from edgeopt import backends
from edgeopt.store.bundle import load_bundle
from edgeopt.measuring.scorers import load_bundle_scorer
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
from edgeopt.planning.checkpoint import make_plan
from edgeopt.server.app import create_app
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, model_names, serving_shape
from edgeopt.server.state import ServerSettings
from edgeopt.profiles import load_profile
from tests.fourth_format import ENTRY
from tests.server.live import start_live_server


@pytest.fixture
def fourth_format():  # noqa: ANN201
    backends.register(ENTRY)
    yield ENTRY
    backends.unregister(ENTRY.format)
    assert ENTRY.format not in backends.formats()


def test_the_planner_sizes_the_fourth_format_from_its_entry(fourth_format, tiny_llama_dir: Path) -> None:
    spec = load_model_spec(str(tiny_llama_dir))
    plan = make_plan(spec, load_profile("x86-64-cpu"), context=256, formats=(fourth_format.format,))
    assert [c.quant for c in plan.candidates] == ["fp32", "fp16"]
    fp32, fp16 = plan.candidates
    assert fp32.weight_bytes == 2 * fp16.weight_bytes == 4 * spec.num_parameters
    assert fp32.kv_bytes_per_token == 2 * fp16.kv_bytes_per_token == 4 * spec.kv_elements_per_token
    assert fp32.overhead_bytes == 3 * 1024**2 and plan.recommended == fp32


def test_optimize_then_serve_and_score_a_fourth_format_bundle(fourth_format, tiny_llama_dir: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "tiny-npz"
    run_optimize(OptimizeOptions(model=str(tiny_llama_dir), target="x86-64-cpu", output=out,
                                 format=fourth_format.format, quant="FP16", context=256, evaluate=False),
                 report=lambda _: None)
    manifest = load_bundle(out)
    assert (manifest.format, manifest.quant, manifest.runtime) == ("npz-fake", "fp16", "fake_numpy")
    spec = load_model_spec(str(tiny_llama_dir))
    assert manifest.kv.kv_bytes_per_token == 2 * spec.kv_elements_per_token  # fp16: the entry's by-quant size

    options = ServeOptions(memory_bytes=2**30, max_concurrency=2, context=128)
    shape = serving_shape(out, manifest, options)
    sizing = shape.sizing
    assert sizing.overhead_bytes == 3 * 1024**2 and sizing.kv_bytes_per_token == manifest.kv.kv_bytes_per_token
    settings = ServerSettings(model_names=model_names(out, manifest), memory_budget_bytes=sizing.usable_memory_bytes)
    live = start_live_server(create_app(settings, loader=lambda: load_served_model(out, manifest, shape, options)),
                             timeout_s=60)
    try:
        runtime = live.state.served.runtime
        assert (runtime.info.kv_capacity_tokens, runtime.info.max_slots) == (sizing.kv_capacity_tokens, 2)
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=60)
        reply = client.completions.create(model=out.name, prompt="hello", max_tokens=8, temperature=0)
        assert reply.usage.completion_tokens == 8 and reply.choices[0].text
    finally:
        live.stop()

    scorer = load_bundle_scorer(out, manifest, context=32)
    try:
        logits = scorer.score([72, 105, 33])
        assert logits.shape == (3, scorer.vocab_size) and np.isfinite(logits).all()
    finally:
        scorer.close()
