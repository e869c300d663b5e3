"""``--format onnx --quant int4 --size``: the MatMuls that keep 8 bits are chosen by measured sensitivity so the
file lands within 1% under the size asked (exporters/onnx/int4/sized.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import ConfigError
from edgeopt.exporters.onnx.int4.sized import matmul_bytes
from edgeopt.exporters.onnx.int4.weights import group_of
from edgeopt.exporters.onnx.nbits_blocks import eight_bit_blocks
from edgeopt.exporters.onnx.int4.search import search_int4_blocks
from tests.fixtures.onnx_bundles import optimize_onnx


@pytest.fixture(scope="module")
def calibration_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from edgeopt.demo.corpus import stdlib_text

    path = tmp_path_factory.mktemp("calib") / "calib.txt"
    path.write_text(stdlib_text(20_000))
    return path


def onnx_bytes(bundle: Path) -> int:
    return sum(p.stat().st_size for p in (bundle / "model").iterdir() if p.name.startswith("model.onnx"))


def bits_by_node(bundle: Path) -> dict[str, int]:
    from onnx import helper

    graph = onnx.load(str(bundle / "model" / "model.onnx"), load_external_data=False).graph
    return {n.name: next(helper.get_attribute_value(a) for a in n.attribute if a.name == "bits")
            for n in graph.node if n.op_type == "MatMulNBits"}


def test_matmul_bytes_are_what_the_blocks_store() -> None:
    weight = np.random.default_rng(0).normal(size=(24, 80)).astype(np.float32)  # K=80: padded to 3 blocks
    blocks = search_int4_blocks(weight, None, 32)
    assert matmul_bytes(24, 80, 4, 32) == blocks.packed.nbytes + blocks.scales.nbytes + blocks.zero_points.nbytes
    eight = eight_bit_blocks(weight, 32)
    assert matmul_bytes(24, 80, 8, 32) == eight.nbytes == 24 * 3 * 32 + 24 * 3 * 4  # levels + an fp32 scale a block
    assert np.abs(eight.dequantized()[:, :80] - weight).max() <= np.abs(weight).max() / 127 / 2 + 1e-6


def test_groups_are_roles_in_bands_of_layers() -> None:
    assert group_of("model.layers.12.mlp.down_proj", 30) == "mlp.down_proj@10-19"
    assert group_of("model.layers.0.self_attn.v_proj", 2) == "self_attn.v_proj@0-0"
    assert group_of("lm_head", 30) == "lm_head"


@pytest.mark.parametrize("algorithm", [None, "gptq"])
def test_a_sized_int4_file_lands_within_one_percent_under_the_size_asked(tiny_llama_dir: Path, tmp_path: Path,
                                                                        calibration_text: Path,
                                                                        algorithm: str | None) -> None:
    from edgeopt.exporters.onnx.quant_types import estimate_onnx_bytes
    from edgeopt.sources.model_spec import load_model_spec

    # The planner's size of the fixed mix (v, o, down and the lm_head in 8 bits): between every MatMul in 4 bits
    # and every one in 8, so the widths must be chosen
    size = estimate_onnx_bytes(load_model_spec(str(tiny_llama_dir)), "int4")
    bundle = optimize_onnx(tiny_llama_dir, tmp_path / "sized", "int4", mix_size_bytes=size,
                           calibration_data=str(calibration_text), **({"int4_algorithm": algorithm} if algorithm else {}))
    written = onnx_bytes(bundle)
    assert size * 0.99 <= written <= size, (written, size)
    q = load_bundle(bundle).export["quantization"]
    assert q["size"]["budget_bytes"] == size and q["size"]["written_bytes"] == written
    bits = bits_by_node(bundle)
    eight = {name.removesuffix("_Q8") for name, b in bits.items() if b == 8}  # the quantizer suffixes names
    assert eight == set(q["size"]["eight_bit"]) and 0 < len(eight) < len(bits) - 1  # a real choice was made
    assert q["size"]["predicted_kl"] >= 0 and q["size"]["group_kl"]
    assert q["algorithm"] == (algorithm or "gptq")  # real calibration text: GPTQ unless told otherwise
    assert q["smoothing"]["norms"] == 1  # the output layer's norm only


@pytest.mark.parametrize(("options", "expected"), [
    ({"mix_size_bytes": 10**8, "calibration_data": "text.txt"}, "gptq"),  # x x^T of real text: GPTQ
    ({"mix_size_bytes": 10**8}, "weighted"),  # generated text: GPTQ's x x^T measured worse on real text
    ({"mix_size_bytes": 10**8, "calibration_data": "text.txt", "int4_algorithm": "weighted"}, "weighted"),
    ({"calibration_data": "text.txt"}, "weighted"),  # no --size: GPTQ is not offered
])
def test_sized_int4_rounds_by_gptq_by_default_only_with_calibration_text(options: dict, expected: str) -> None:
    from edgeopt.exporters.onnx.exporter import int4_algorithm

    assert int4_algorithm(options) == expected


def test_a_size_below_every_matmul_in_four_bits_is_refused_with_the_size_that_would_do(
        tiny_llama_dir: Path, tmp_path: Path, calibration_text: Path) -> None:
    with pytest.raises(ConfigError, match="give a --size of at least"):
        optimize_onnx(tiny_llama_dir, tmp_path / "b", "int4", mix_size_bytes=100 * 1024,
                      calibration_data=str(calibration_text))
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("options", "needle"), [({"int4_mix": "uniform"}, "--int4-mix uniform"),
                                                  ({"int4_algorithm": "rtn"}, "--int4-algorithm rtn"),
                                                  ({"self_calibration": False}, "no --calibration-data")])
def test_size_is_refused_beside_options_that_would_decide_the_widths(options: dict, needle: str,
                                                                      tiny_llama_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=needle):
        optimize_onnx(tiny_llama_dir, tmp_path / "b", "int4", mix_size_bytes=2 * 2**20, **options)


def test_gptq_is_refused_without_a_size(tiny_llama_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--int4-algorithm gptq"):
        optimize_onnx(tiny_llama_dir, tmp_path / "b", "int4", int4_algorithm="gptq")


def table_ops(bundle: Path) -> dict[str, int]:
    """The bits of the token table's GatherBlockQuantized and of the MatMulNBits that reads the same data."""
    from onnx import helper

    graph = onnx.load(str(bundle / "model" / "model.onnx"), load_external_data=False).graph
    gather = next(n for n in graph.node if n.op_type == "GatherBlockQuantized")
    data = gather.input[0].removesuffix("_rows")  # 4 bits: the data viewed as rows x width/2 by a Reshape
    heads = [n for n in graph.node if n.op_type == "MatMulNBits" and n.input[1] == data]
    bits = {a.name: helper.get_attribute_value(a) for a in gather.attribute}["bits"]
    return {"gather": bits, "heads": len(heads)}


@pytest.mark.parametrize("everything_in_eight_bits", [False, True])
def test_a_tied_table_is_stored_once_in_the_width_the_size_leaves(tiny_model_factory, tmp_path: Path,
                                                                  calibration_text: Path,
                                                                  everything_in_eight_bits: bool) -> None:
    from edgeopt.sources.model_spec import load_model_spec
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session

    model_dir = tiny_model_factory("llama-tied")
    linear = [t.shape for t in load_model_spec(str(model_dir)).tensors()
              if len(t.shape) == 2 and t.name.endswith(("proj.weight", "embed_tokens.weight"))]
    # every weight in 4 bits (an all-4-bit file, its table then 8-bit in blocks of 32): the table must come out
    # 4-bit; twice that, more than every weight in 8 bits: 8-bit
    floor = optimize_onnx(model_dir, tmp_path / "probe", "int4", int4_mix="uniform",
                          calibration_data=str(calibration_text))
    vocab, hidden = linear[0]
    smallest = onnx_bytes(floor) - matmul_bytes(vocab, hidden, 8, 32) + matmul_bytes(vocab, hidden, 4, 32)
    size = smallest + 4096 if not everything_in_eight_bits else 2 * smallest
    bundle = optimize_onnx(model_dir, tmp_path / "sized", "int4", mix_size_bytes=size,
                           calibration_data=str(calibration_text))
    q = load_bundle(bundle).export["quantization"]
    if everything_in_eight_bits:  # more than the widest file: that file, smaller than asked, and said so
        assert onnx_bytes(bundle) < size * 0.99 and "smaller than the size asked" in q["size"]["note"]
    else:
        assert size * 0.99 <= onnx_bytes(bundle) <= size
    ops = table_ops(bundle)
    assert ops["heads"] == 1 and ops["gather"] == q["embedding"]["bits"]  # one copy, read by both
    assert q["embedding"]["tied_output"] and q["embedding"]["bits"] == (8 if everything_in_eight_bits else 4)
    decoder = DecoderSession(create_session(bundle / "model" / "model.onnx", 1, ["CPUExecutionProvider"]))
    logits, _ = decoder.run_sequence([1, 5, 9, 3])
    assert np.isfinite(logits).all()


def test_a_group_measured_after_a_tied_table_does_not_carry_the_tables_rounding(tiny_model_factory) -> None:
    """The table's group replaces one parameter read twice (embedding, output layer); what it replaced must all be
    put back, or every group measured after it gains the table's KL."""
    from edgeopt.exporters.onnx.int4.costs import measure_group_kl
    from edgeopt.exporters.onnx.int4.weights import Weight
    from edgeopt.measuring.torch_metrics import load_causal_lm

    model_dir = tiny_model_factory("llama-tied")
    model = load_causal_lm(model_dir)
    table = model.get_submodule("model.embed_tokens").weight.detach().numpy().copy()
    assert model.get_submodule("lm_head").weight is model.get_submodule("model.embed_tokens").weight
    # "self_attn..." sorts after "model.embed_tokens", as on a real model
    module = "model.layers.0.self_attn.q_proj"
    q = model.get_submodule(module).weight.detach().numpy().copy()
    weights = [Weight("table", ("model.embed_tokens", "lm_head"), "lm_head", table, "model.embed_tokens", table=True),
               Weight("q", (module,), module, q, group_of(module, 2))]
    blocks = {w.name: {"int4": search_int4_blocks(w.weight, None, 32)} for w in weights}
    chunks = [[1, 7, 3, 9, 4, 2, 8, 5] * 4]
    with_table = measure_group_kl(model_dir, weights, blocks, chunks)
    alone = measure_group_kl(model_dir, weights[1:], blocks, chunks)
    assert with_table["model.embed_tokens"] > 0
    assert with_table[group_of(module, 2)] == pytest.approx(alone[group_of(module, 2)], rel=1e-6, abs=1e-12)
