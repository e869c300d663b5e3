"""Graphs past 2 GB keep their weights in external files: torch's exporter writes one file per initializer, which
share_tied_embedding gathers into ``model.onnx_data`` (a bundle copies ``model.onnx*`` only), and the fusions read
only the small initializers of such a graph (the matrices stay on disk). Shown on tiny graphs saved the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgeopt.exporters.onnx import fusion, tied_embedding  # noqa: E402

VOCAB, HIDDEN = 64, 16


def _tied_graph(path: Path, scattered: bool) -> np.ndarray:
    """ids -> Gather(table) -> MatMul(table.T as its own initializer): a tied head exported twice, as torch does;
    saved with every initializer in a file of its own when ``scattered``. Returns the table."""
    table = np.random.default_rng(0).standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["hidden"]),
             helper.make_node("MatMul", ["hidden", "head"], ["logits"])]
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3, VOCAB])],
                              [numpy_helper.from_array(table, "table"), numpy_helper.from_array(table.T.copy(), "head")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=scattered, all_tensors_to_one_file=False, size_threshold=0)
    return table


def _logits(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"ids": np.array([[1, 5, 9]], dtype=np.int64)})[0]


@pytest.mark.parametrize("past_2gb", [False, True])
def test_scattered_initializers_are_gathered_into_one_file_and_the_head_reads_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, past_2gb: bool) -> None:
    if past_2gb:  # the graph as a 2 GB one is written: its data beside it, in one file
        monkeypatch.setattr(tied_embedding, "EXTERNAL_DATA_BYTES", 1024)
    path = tmp_path / "model.onnx"
    table = _tied_graph(path, scattered=True)
    before = _logits(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head", "model.onnx", "table"]

    assert tied_embedding.share_tied_embedding(path)

    assert sorted(p.name for p in tmp_path.iterdir()) == (["model.onnx", "model.onnx_data"] if past_2gb
                                                          else ["model.onnx"])
    np.testing.assert_array_equal(_logits(path), before)
    stored = onnx.load(str(path))
    assert [init.name for init in stored.graph.initializer] == ["table"]
    np.testing.assert_array_equal(numpy_helper.to_array(stored.graph.initializer[0]), table)


def test_an_untied_graph_in_scattered_files_is_gathered_and_left_untied(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    _tied_graph(path, scattered=True)
    head = onnx.load(str(path))
    head.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.ones((HIDDEN, VOCAB), np.float32), "head"))
    onnx.save(head, str(path), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)

    assert not tied_embedding.share_tied_embedding(path)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    assert sorted(init.name for init in onnx.load(str(path)).graph.initializer) == ["head", "table"]


def test_the_fusions_read_a_graphs_small_initializers_and_leave_its_matrices_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "SMALL_INITIALIZER_BYTES", VOCAB * HIDDEN * 4)  # the table is a "matrix" here
    path = tmp_path / "model.onnx"
    _tied_graph(path, scattered=True)
    norm = onnx.load(str(path))
    norm.graph.initializer.append(numpy_helper.from_array(np.full(HIDDEN, 2.0, np.float32), "norm"))
    onnx.save(norm, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="model.onnx_data",
              size_threshold=0)

    graph = fusion._graph_without_matrices(path)

    held = {init.name: init for init in graph.graph.initializer}
    assert onnx.external_data_helper.uses_external_data(held["table"]) and not held["table"].raw_data
    assert not onnx.external_data_helper.uses_external_data(held["norm"])
    np.testing.assert_array_equal(numpy_helper.to_array(held["norm"]), np.full(HIDDEN, 2.0, np.float32))
