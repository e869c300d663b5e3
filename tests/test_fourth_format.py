"""Adding a format is its own package plus one registration line: a fourth format (tests/fourth_format) is
registered with ``backends.register(ENTRY)`` and nothing else, then planned, exported into a bundle, judged by the
quality floor, offered in optimize's --quant help, scored and served through the real planner, pipeline and
launcher; every fact each of them needs is reached from its entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openai
import pytest

from edgeopt import backends
from edgeopt.cli.options import quant_examples
from edgeopt.errors import ConfigError
from edgeopt.evaluation.quality_floor import judge, kl_ceiling, nominal_bits, remedies
from edgeopt.exporters import get_exporter
from edgeopt.optimize.export_options import check_export_options
from edgeopt.planning import canonical_quant
from edgeopt.runtimes import runtime_module
from edgeopt.sizing.budget import runtime_weights_extra
from edgeopt.store.bundle import load_bundle
from edgeopt.measuring.scorers import load_bundle_scorer
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
from edgeopt.planning.checkpoint import make_plan
from edgeopt.server.app import create_app
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, model_names, serving_shape
from edgeopt.server.state import ServerSettings
from edgeopt.profiles import load_profile
from tests.fourth_format import ENTRY, memory, runtime, scorer
from tests.server.live import start_live_server


ROOT = Path(__file__).resolve().parents[1]
MIB = 1024**2
OVERHEAD = 3 * MIB + memory.EXTRA_BYTES  # the entry's fixed runtime cost and what its memory model builds from the file


@pytest.fixture
def fourth_format():  # noqa: ANN201
    backends.register(ENTRY)  # the one registration line
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
    assert fp32.overhead_bytes == OVERHEAD and plan.recommended == fp32


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
    assert sizing.overhead_bytes == OVERHEAD and sizing.kv_bytes_per_token == manifest.kv.kv_bytes_per_token
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


def test_everything_a_format_needs_is_reached_from_its_entry(fourth_format) -> None:
    fmt = fourth_format.format
    # Quants: names in the format's spelling, and the weight bits declared, never read from the name.
    assert canonical_quant(fmt, "8DA4W") == "8da4w" and nominal_bits(fmt, "8da4w") == 4
    # Quality floor: an "8da4w" bundle is held to the 4-bit limit, with the table's remedy.
    assert kl_ceiling(fmt, "8da4w") == kl_ceiling("onnx", "int4") and kl_ceiling(fmt, "fp16") is None
    verdict = judge({"kl_divergence": 0.5, "top1_agreement": 0.9}, fmt, "8da4w")
    assert verdict is not None and verdict.failures == ("KL divergence 0.5 > 0.4 (5x what 4-bit llama.cpp "
                                                         "quantization costs)",)
    assert remedies(fmt, "8da4w", pruned=False) == ["use --quant fp16"]
    # optimize --quant's help.
    assert "fp16, 8da4w (npz-fake)" in quant_examples()
    # Memory model: KV bytes by quant and what the runtime builds from the file.
    assert fourth_format.kv_element_bytes_for("8da4w") == 2
    assert runtime_weights_extra(fourth_format, 10 * MIB, 256, 64, tied_embeddings=False) == memory.EXTRA_BYTES
    # Exporter, runtime and scorer modules.
    assert get_exporter(fmt).quants == ("fp32", "fp16", "8da4w")
    assert runtime_module(fourth_format.runtime) is runtime
    assert backends.load_attr(fourth_format.export.scorer) is scorer.load_scorer
    # Export options: declared by the entry, checked by the shared code without a branch for the format.
    check_export_options(fmt, "8da4w", {"seed_salt": 7})
    with pytest.raises(ConfigError, match="export option 'seed_salt' applies to --quant 8da4w, not fp16"):
        check_export_options(fmt, "fp16", {"seed_salt": 7})
    with pytest.raises(ConfigError, match="--int4-block-size 64 is an option of --format onnx, not npz-fake"):
        check_export_options(fmt, "fp16", {"int4_block_size": 64})


def test_the_fourth_format_is_added_without_touching_a_shared_file() -> None:
    """No module of edgeopt, exporters, runtimes or profiles names the format or its package: its package and the
    registration line are all there is."""
    named = sorted(str(path.relative_to(ROOT)) for folder in ("edgeopt", "exporters", "runtimes", "profiles")
                   for path in (ROOT / folder).rglob("*.py")
                   if "npz-fake" in (text := path.read_text()) or "tests.fourth_format" in text)
    assert named == []
