"""Importance matrices: computed by edgeopt from calibration text (or, without it, from text the model
writes itself: tests/exporters/test_self_calibration.py), stored in llama.cpp's GGUF imatrix format, handed
to llama.cpp's quantizer, recorded in the manifest; refused where nothing would use them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgeopt.store.bundle import sha256_file
from edgeopt.errors import ConfigError
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
from edgeopt.exporters.gguf.imatrix_collect import collect_imatrix
from edgeopt.exporters.input_energy import chunks, tokenize_text
from edgeopt.exporters.gguf.imatrix_file import read_imatrix, write_imatrix
from edgeopt.exporters.gguf.self_calibration import SEQUENCE_TOKENS
from edgeopt.exporters.gguf.tensor_names import gguf_name
from edgeopt.exporters.gguf.writer import convert_checkpoint
from edgeopt.optimize.export_options import export_options


@pytest.fixture(scope="module")
def tiny_calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from edgeopt.demo.corpus import stdlib_text

    path = tmp_path_factory.mktemp("calib") / "calibration.txt"
    path.write_text(stdlib_text(40_000))
    return path


def test_matrix_covers_every_quantized_weight_under_llama_cpp_names(tiny_llama_dir: Path, tiny_calibration: Path,
                                                                    tmp_path: Path):
    ids, bos = tokenize_text(tiny_llama_dir, tiny_calibration.read_text())
    token_chunks = chunks(ids, bos, chunk_size=64, max_chunks=3)
    f16 = tmp_path / "f16.gguf"
    convert_checkpoint(tiny_llama_dir, f16, "F16")  # the matrix is measured on the unquantized file, as llama-imatrix
    matrix = collect_imatrix(f16, token_chunks, ["calibration.txt"])
    spec = load_model_spec(str(tiny_llama_dir))
    weights = {gguf_name(t.name): t.shape for t in spec.tensors() if len(t.shape) == 2}
    weights.pop("token_embd.weight")  # untied: the lookup table is no matrix product, output.weight is
    assert set(matrix.sums) == set(weights)
    for name, shape in weights.items():
        assert matrix.sums[name].shape == (shape[1],)  # one value per input column
        assert matrix.counts[name] == 3 * 64 and np.all(matrix.sums[name] >= 0) and matrix.sums[name].sum() > 0

    path = tmp_path / "imatrix.gguf"
    write_imatrix(path, matrix)
    import gguf

    reader = gguf.GGUFReader(str(path))  # the layout llama-quantize --imatrix reads
    assert reader.fields["general.type"].contents() == "imatrix"
    assert reader.fields["imatrix.datasets"].contents() == ["calibration.txt"]
    assert reader.fields["imatrix.chunk_count"].contents() == 3
    assert reader.fields["imatrix.chunk_size"].contents() == 64
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == {f"{n}.in_sum2" for n in weights} | {f"{n}.counts" for n in weights}
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in tensors.values())
    back = read_imatrix(path)
    assert back.counts == matrix.counts
    for name in weights:
        np.testing.assert_allclose(back.sums[name], matrix.sums[name], rtol=1e-6)


def test_calibrated_gguf_bundle_holds_the_matrix_and_says_where_it_came_from(tiny_llama_dir: Path,
                                                                              tiny_calibration: Path, tmp_path: Path):
    out = tmp_path / "bundle"
    manifest = run_optimize(OptimizeOptions(
        model=str(tiny_llama_dir), output=out, format="gguf", quant="Q4_K_M", evaluate=False,
        export_options=export_options(calibration_data=tiny_calibration)), report=lambda _m: None)
    facts = manifest.export["imatrix"]
    assert facts["file"] == "imatrix.gguf" and facts["sha256"] == sha256_file(out / "imatrix.gguf")
    assert facts["source"] == "calibration.txt" and facts["text_sha256"] == sha256_file(tiny_calibration)
    assert facts["tokens"] > 0 and facts["tensors"] > 0
    assert "imatrix.gguf" in json.loads((out / "manifest.json").read_text())["files"]  # hashed with the bundle


@pytest.mark.parametrize(("fmt", "quant"), [("gguf", "Q8_0"), ("gguf", "F16"), ("onnx", "int8")])
def test_calibration_data_is_refused_where_the_format_cannot_use_it(fmt: str, quant: str, tiny_llama_dir: Path,
                                                                     tiny_calibration: Path, tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        run_optimize(OptimizeOptions(model=str(tiny_llama_dir), output=tmp_path / "b", format=fmt, quant=quant,
                                     evaluate=False, export_options=export_options(calibration_data=tiny_calibration)),
                     report=lambda _m: None)
    message = str(caught.value)
    assert "--calibration-data" in message and quant in message and "without" in message
    assert not (tmp_path / "b").exists()


def test_types_that_need_a_matrix_are_made_with_calibration_or_generated_text(tiny_model_factory,
                                                                              tiny_tokenizer_dir: Path,
                                                                              tiny_calibration: Path, tmp_path: Path):
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    from tests.fixtures.tiny_models import build_tiny_model

    model = build_tiny_model(tmp_path / "m", "llama-gqa", tiny_tokenizer_dir, hidden_size=256,
                             intermediate_size=512, num_layers=2)
    with pytest.raises(ConfigError, match="--calibration-data"):  # no text, and self-calibration turned off
        GGUFExporter().export(model, tmp_path / "plain", "IQ2_M", {"self_calibration": False})
    result = GGUFExporter().export(model, tmp_path / "iq", "IQ2_M",
                                   {"calibration_data": str(tiny_calibration), "calibration_chunks": 2})
    assert (tmp_path / "iq" / result.model_file).stat().st_size > 0 and result.details["imatrix"]["chunks"] == 2
    assert result.details["imatrix"]["source"] == "calibration.txt"
    # Without calibration text (the default) the matrix comes from text the model writes itself.
    result = GGUFExporter().export(model, tmp_path / "gen", "IQ2_M", {"calibration_chunks": 2})
    assert (tmp_path / "gen" / result.model_file).stat().st_size > 0
    assert result.details["imatrix"]["source"] == f"generated: {2 * SEQUENCE_TOKENS} tokens from 2 seed prompts"


def test_llama_cpp_measures_what_the_checkpoint_computes(tiny_llama_dir: Path, tiny_calibration: Path, tmp_path: Path):
    """The matrix read out of llama.cpp's graph on the F16 file is the checkpoint's own input energy (torch,
    float32) per weight and column, up to F16 rounding: same names, same columns, same token counts."""
    from edgeopt.exporters.input_energy import collect_input_energy

    ids, bos = tokenize_text(tiny_llama_dir, tiny_calibration.read_text())
    token_chunks = chunks(ids, bos, chunk_size=64, max_chunks=2)
    f16 = tmp_path / "f16.gguf"
    convert_checkpoint(tiny_llama_dir, f16, "F16")
    matrix = collect_imatrix(f16, token_chunks, ["calibration.txt"])
    energy = collect_input_energy(tiny_llama_dir, token_chunks)
    spec = load_model_spec(str(tiny_llama_dir))
    for module, sums in energy.sums.items():
        name = gguf_name(f"{module}.weight", spec.arch)
        assert matrix.counts[name] == energy.counts[module] == 2 * 64
        np.testing.assert_allclose(matrix.sums[name], sums, rtol=2e-2, atol=1e-3 * float(sums.max()))


def test_the_matrix_measured_while_the_model_writes_is_a_pass_over_what_it_wrote(tiny_llama_dir: Path,
                                                                                 tmp_path: Path) -> None:
    """Self-calibration measures the matrix as the text is decoded (one token a sequence a step): the same
    weights, a row for every token fed, and the sums a separate pass over the finished text gives. Where llama.cpp
    computes only the rows whose logits are asked (the last block's feed-forward and the output matrix), a
    prompt's tokens but its last are not seen: those weights count the tokens decoded."""
    from edgeopt.exporters.gguf.imatrix_collect import MatrixCollector
    from edgeopt.exporters.gguf.self_calibration import generate_calibration

    f16 = tmp_path / "f16.gguf"
    convert_checkpoint(tiny_llama_dir, f16, "F16")
    collector = MatrixCollector()
    text = generate_calibration(f16, chunks=3, chunk_size=48, threads=1, matmul_tap=collector.tap(min_rows=1))
    while_written = collector.matrix(f16, text.chunks, [text.source])
    fed = [chunk[:-1] for chunk in text.chunks]  # a sequence's last token is sampled, never fed
    afterwards = collect_imatrix(f16, fed, [text.source])
    assert set(while_written.sums) == set(afterwards.sums)
    last = f"blk.{load_model_spec(str(tiny_llama_dir)).num_layers - 1}.ffn_"
    prompt_rows_unseen = sum(24 - 1 for _ in fed)  # prompts are cut to half a chunk: 24 tokens here
    for name, sums in afterwards.sums.items():
        if name.startswith(last) or name in ("output.weight", "token_embd.weight"):
            assert while_written.counts[name] == 3 * 47 - prompt_rows_unseen, name
            continue
        assert while_written.counts[name] == afterwards.counts[name] == 3 * 47, name
        np.testing.assert_allclose(while_written.sums[name], sums, rtol=2e-2, atol=1e-3 * float(sums.max()))
