"""Every supported architecture goes the whole way, on a tiny random model built from transformers'
own config class (tests/architectures/catalog.py):

plan sizes within 5% of the files -> GGUF F32 logits equal transformers' (KL <= 1e-5, top-1 100%)
-> GGUF Q8_0 through the optimize pipeline loads and runs -> ONNX export matches -> structured pruning
works (the pruned model still converts exactly) or is refused naming what and why -> serving answers a
chat request through the model's own chat template (GGUF and ONNX bundles) -> ``edgeopt eval``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import EdgeoptError
from edgeopt.measuring.metrics import Comparison
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.planning.checkpoint import weight_bytes
from tests.architectures.catalog import ARCHITECTURES, by_name
from tests.fixtures.parity import PARITY_TOKENS, gguf_parity, parity_ids

NAMES = [a.name for a in ARCHITECTURES]
F32_KL_LIMIT = 1e-5
Q8_KL_LIMIT = 0.02  # Q8_0 on these widened random weights measures ~1e-3; a broken file is >> 0.1

pytestmark = pytest.mark.timeout(600)


def _onnx_bytes(bundle: Path) -> int:
    return sum(p.stat().st_size for p in (bundle / "model").iterdir() if p.name.startswith("model.onnx"))


@pytest.mark.parametrize("name", NAMES)
def test_plan_sizes_within_5_percent_of_files(name: str, arch_dir, arch_bundle) -> None:
    spec = load_model_spec(str(arch_dir(name)))
    gguf = arch_bundle(name, "gguf", "Q8_0") / "model.gguf"
    onnx = arch_bundle(name, "onnx", "fp32")
    for label, predicted, real in (("gguf Q8_0", weight_bytes(spec, "gguf", "Q8_0"), gguf.stat().st_size),
                                   ("onnx fp32", weight_bytes(spec, "onnx", "fp32"), _onnx_bytes(onnx))):
        assert abs(predicted / real - 1) <= 0.05, f"{name} {label}: planned {predicted} bytes, file {real}"


@pytest.mark.parametrize("name", NAMES)
def test_gguf_f32_logits_match_transformers(name: str, arch_dir, arch_gguf) -> None:
    comparison = gguf_parity(arch_dir(name), arch_gguf(name, "F32"))
    assert comparison.positions == PARITY_TOKENS
    assert comparison.mean_kl <= F32_KL_LIMIT, f"{name}: mean KL {comparison.mean_kl:.3g}"
    assert comparison.top1_agreement == 1.0, f"{name}: top-1 {comparison.top1_agreement:.4f}"


@pytest.mark.parametrize("name", NAMES)
def test_gguf_q8_0_bundle_loads_and_runs(name: str, arch_dir, arch_bundle) -> None:
    bundle = arch_bundle(name, "gguf", "Q8_0")
    manifest = load_bundle(bundle)
    assert manifest.quant == "Q8_0" and manifest.export["gguf_arch"] == load_model_spec(str(arch_dir(name))).arch
    comparison = gguf_parity(arch_dir(name), bundle / "model.gguf")
    assert comparison.mean_kl <= Q8_KL_LIMIT, f"{name}: Q8_0 mean KL {comparison.mean_kl:.3g}"


@pytest.mark.parametrize("name", NAMES)
def test_onnx_export_logits_match_transformers(name: str, arch_dir, arch_bundle) -> None:
    """Over 300 tokens: past LongRoPE's original window (256) too, where a frozen trace branch shows."""
    from edgeopt.measuring.scorers import HFScorer
    from edgeopt.exporters.onnx.scorer import OnnxScorer

    bundle = arch_bundle(name, "onnx", "fp32")
    manifest = load_bundle(bundle)
    spec = load_model_spec(str(arch_dir(name)))
    # The runtime reads its KV layout from the graph: it must be the architecture's, not hidden/heads.
    assert (manifest.export["kv_heads"], manifest.export["head_dim"]) == (spec.num_kv_heads, spec.head_dim)
    ids = parity_ids(arch_dir(name))
    scorer = OnnxScorer(bundle / manifest.model_file, context=PARITY_TOKENS)
    comparison = Comparison()
    comparison.add(HFScorer(arch_dir(name)).score(ids), scorer.score(ids))
    assert comparison.mean_kl <= F32_KL_LIMIT, f"{name}: ONNX mean KL {comparison.mean_kl:.3g}"
    assert comparison.top1_agreement == 1.0, f"{name}: ONNX top-1 {comparison.top1_agreement:.4f}"


PRUNE_REQUESTS = {"ratio": {"ratio": 0.3}, "heads": {"heads": 0.5}, "layers": {"layers": 1}}


@pytest.mark.parametrize("knob", list(PRUNE_REQUESTS))
@pytest.mark.parametrize("name", NAMES)
def test_structured_pruning_works_or_is_refused_clearly(name: str, knob: str, arch_dir, tmp_path: Path) -> None:
    from edgeopt.passes import PassContext, get_pass
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    arch, source = by_name(name), arch_dir(name)
    prune = get_pass("prune", eval_tokens=256, **PRUNE_REQUESTS[knob])
    run = lambda: prune.run(source, tmp_path / "pruned", PassContext(original_model_dir=source, target="host"))  # noqa: E731
    if knob in arch.prune_refusals:
        with pytest.raises(EdgeoptError) as refused:
            run()
        text = f"{refused.value.message} {refused.value.hint}"
        for word in arch.prune_refusals[knob]:
            assert word in text, f"{name} {knob}: refusal {text!r} does not say {word!r}"
        return
    metrics = run()
    assert metrics["params_after"] < metrics["params_before"]
    # The pruned checkpoint is a standard one of the same architecture: it still converts exactly.
    result = GGUFExporter().export(tmp_path / "pruned", tmp_path / "gguf", "F32", {})
    comparison = gguf_parity(tmp_path / "pruned", tmp_path / "gguf" / result.model_file)
    assert comparison.mean_kl <= F32_KL_LIMIT, f"{name} pruned by {knob}: mean KL {comparison.mean_kl:.3g}"


@pytest.mark.parametrize("fmt,quant", [("gguf", "Q8_0"), ("onnx", "fp32")])
@pytest.mark.parametrize("name", NAMES)
def test_chat_request_is_served_with_the_model_template(name: str, fmt: str, quant: str, arch_bundle) -> None:
    import httpx

    from edgeopt.server.app import create_app
    from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
    from edgeopt.server.state import ServerSettings
    from tests.server.live import start_live_server

    bundle = arch_bundle(name, fmt, quant)
    manifest = load_bundle(bundle)
    options = ServeOptions(context=256, max_concurrency=2, threads=2, memory_bytes=2 << 30)
    served = load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)
    assert served.chat_template is not None and served.chat_template.source == by_name(name).chat_template
    live = start_live_server(create_app(ServerSettings(model_names=(name,)), served=served))
    try:
        messages = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Say hello."}]
        if by_name(name).system_refusal:  # as the real template: a clear 400, and the server keeps serving
            refused = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                                 json={"model": name, "messages": messages, "max_tokens": 6})
            assert refused.status_code == 400 and by_name(name).system_refusal in refused.text, refused.text
            messages = messages[1:]
        reply = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                           json={"model": name, "messages": messages, "max_tokens": 6, "temperature": 0})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert isinstance(body["choices"][0]["message"]["content"], str)
        assert body["usage"]["prompt_tokens"] > 10  # the template's framing was tokenized, not just "Say hello."
    finally:
        live.stop()
        served.engine.shutdown()  # closes the runtime too


@pytest.mark.parametrize("name", NAMES)
def test_edgeopt_eval_scores_the_bundle(name: str, arch_bundle, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from edgeopt.cli.app import app
    from edgeopt.demo.corpus import stdlib_text

    data = tmp_path / "eval.txt"
    data.write_text(stdlib_text(4000))
    result = CliRunner().invoke(app, ["eval", str(arch_bundle(name, "gguf", "Q8_0")), "--data", str(data),
                                      "--max-tokens", "256", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output[result.output.index("{"):])
    assert metrics["eval_tokens"] > 100 and np.isfinite(metrics["perplexity"])
    assert metrics["kl_divergence"] <= Q8_KL_LIMIT and metrics["top1_agreement"] >= 0.8


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


@pytest.mark.parametrize("name", NAMES)
def test_server_renders_the_template_as_transformers_does(name: str, arch_dir) -> None:
    """The reference is transformers' apply_chat_template on the same checkpoint; templates whose real
    model takes ``tools`` render them into the prompt."""
    from transformers import AutoTokenizer

    from edgeopt.server.chat.template import ChatTemplate

    tokenizer = AutoTokenizer.from_pretrained(str(arch_dir(name)))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    if by_name(name).system_refusal:  # no system role (Gemma 2): both refuse it, so compare without one
        messages = messages[1:]
    ours = ChatTemplate.from_bundle(arch_dir(name), None, ".").render(messages)
    assert ours == tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    with_tools = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert ("get_weather" in with_tools) == by_name(name).takes_tools and "Hi there" in with_tools
