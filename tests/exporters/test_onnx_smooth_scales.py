"""Norm scales moved into the weights that read them before ``--size`` rounds (exporters/onnx/smooth_scales.py):
in floats the smoothed graph computes what the original did; the calibration statistics follow the inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgeopt.exporters.input_energy import InputEnergy
from edgeopt.exporters.onnx.smooth_scales import apply_to_graph, column_scales, smooth, smoothed_energy
from tests.fixtures.onnx_bundles import optimize_onnx


def logits(path: Path, ids: list[int]) -> np.ndarray:
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session

    decoder = DecoderSession(create_session(path, 1, ["CPUExecutionProvider"]))
    out, _ = decoder.run_sequence(ids)
    return np.asarray(out)


def energy_for(modules: list[str], widths: dict[str, int], rng: np.random.Generator) -> InputEnergy:
    """Made-up statistics with a few loud channels, as a trained decoder's normalized inputs have."""
    sums = {}
    for m in modules:
        loud = np.ones(widths[m])
        loud[rng.choice(widths[m], 2, replace=False)] = 400.0
        sums[m] = rng.uniform(0.5, 2.0, widths[m]) * loud * 10
    return InputEnergy(sums, {m: 10 for m in modules})


def test_smoothing_changes_the_graph_but_not_what_it_computes(tiny_model_factory, tmp_path: Path) -> None:
    """Every RMSNorm before q/k/v, gate/up and the tied output layer gets scales; with the smoothed weights stored
    as floats the logits are the original's (the table's rows multiplied back after the lookup)."""
    from edgeopt.exporters.onnx.embedding_quant import find_table
    from edgeopt.exporters.onnx.fusion import fuse_decoder
    from edgeopt.exporters.onnx.int4.weights import find_weights
    from edgeopt.exporters.onnx.quantize import weight_matmuls

    model_dir = tiny_model_factory("llama-tied")
    bundle = optimize_onnx(model_dir, tmp_path / "fp32", "fp32")
    fused = tmp_path / "fused" / "model.onnx"
    fused.parent.mkdir()
    (fused.parent / "config.json").write_bytes((bundle / "model" / "config.json").read_bytes())
    assert fuse_decoder(bundle / "model" / "model.onnx", fused)["applied"]
    model = onnx.load(str(fused))
    table = find_table(model, [])
    assert table is not None and table.head is not None  # tied
    weights = find_weights(model, weight_matmuls(fused, []), table, 2)
    widths = {w.energy_module: w.weight.shape[1] for w in weights}
    energy = energy_for(sorted(widths), widths, np.random.default_rng(0))

    planned, smoothed, new_energy = smooth(model, weights, table.head[1].name, energy, 0.5)

    scales = column_scales(planned)
    assert len(planned) == 2 * 2 + 1  # two norms a layer, two layers, and the final norm
    assert table.gather.name in scales and not any("o_proj" in n or "down_proj" in n for n in scales)
    table_scales = scales[table.gather.name]
    assert table_scales.max() / table_scales.min() > 2  # the loud channels came down
    before = {w.name: w for w in weights}
    for w in smoothed:
        s = scales.get(w.name, np.ones(w.weight.shape[1], np.float32))
        np.testing.assert_allclose(w.weight, before[w.name].weight * s, rtol=1e-6)
        if w.name in scales:  # the inputs' statistics follow x / s
            np.testing.assert_allclose(new_energy.mean(w.energy_module), energy.mean(w.energy_module) / s.astype(
                np.float64) ** 2, rtol=1e-6)

    stored = {i.name: i for i in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    for w in smoothed:
        name = table.name if w.table else nodes[w.name].input[1]
        stored[name].CopyFrom(numpy_helper.from_array(w.weight if w.table else np.ascontiguousarray(w.weight.T), name))
    apply_to_graph(model, planned, table.gather.output[0], table_scales)
    onnx.save(model, str(tmp_path / "fused" / "smoothed.onnx"))

    ids = [1, 5, 9, 3, 17, 4, 2, 8]
    original, changed = logits(fused, ids), logits(tmp_path / "fused" / "smoothed.onnx", ids)
    np.testing.assert_allclose(changed, original, rtol=1e-3, atol=1e-4)


def test_modules_sharing_one_input_share_one_smoothed_gram() -> None:
    gram = np.array([[4.0, 1.0], [1.0, 9.0]], dtype=np.float32)
    energy = InputEnergy({"q": np.array([4.0, 9.0]), "k": np.array([4.0, 9.0])}, {"q": 1, "k": 1},
                         {"q": gram, "k": gram})
    s = np.array([2.0, 3.0], dtype=np.float32)
    smoothed = smoothed_energy(energy, {"q": s, "k": s})
    np.testing.assert_allclose(smoothed.gram("q"), [[1.0, 1 / 6], [1 / 6, 1.0]], rtol=1e-6)
    assert smoothed.grams["q"] is smoothed.grams["k"]
    np.testing.assert_allclose(smoothed.mean("k"), [1.0, 1.0])
    assert energy.grams["q"] is gram and energy.mean("q")[0] == pytest.approx(4.0)  # the original is untouched


@pytest.mark.parametrize(("options", "needle"), [
    ({"int4_smoothing": 0.4}, "without --size nothing reads it"),
    ({"int4_smoothing": 1.5, "mix_size_bytes": 10**8}, "int4_smoothing 1.5 is not a number from 0"),
    ({"int4_smoothing": "half", "mix_size_bytes": 10**8}, "int4_smoothing 'half'"),
])
def test_smoothing_is_refused_where_it_would_be_ignored_or_is_no_alpha(options: dict, needle: str) -> None:
    from edgeopt.errors import ConfigError
    from edgeopt.exporters.onnx.exporter import ONNXExporter, int4_smoothing
    from edgeopt.exporters.onnx.smooth_scales import ALPHA

    with pytest.raises(ConfigError, match=needle):
        ONNXExporter().check_options("int4", options)
    assert int4_smoothing({"mix_size_bytes": 10**8}) == ALPHA and int4_smoothing({"int4_smoothing": 0}) == 0.0
