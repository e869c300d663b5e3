"""Encoder export: sentence-transformers pooling carried into the bundle, INT8 embeddings close to fp32."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import ConfigError
from edgeopt.runtimes import load_embedding_runtime
from edgeopt.encoders.pooling import PoolingConfig, pool, read_sentence_transformers_pooling
from tests.fixtures.onnx_bundles import encoder_bundle
from tests.fixtures.tiny_encoder import ST_MAX_SEQ_LENGTH, write_sentence_transformers_config

SENTENCES = ["The function returns a list.", "Open the file in binary mode.", "json", "A lock is released on exit."]


def test_encoder_bundle_records_pooling_and_matches_torch(encoder_fp32_bundle):
    manifest = load_bundle(encoder_fp32_bundle)
    assert manifest.kind == "embedding"
    assert manifest.export["pooling"] == {"mode": "mean", "normalize": True, "source": "1_Pooling/config.json",
                                          "max_seq_length": ST_MAX_SEQ_LENGTH}
    assert manifest.export["fp32_min_cosine_vs_torch"] >= 0.9999
    assert json.loads((encoder_fp32_bundle / "model" / "pooling.json").read_text())["mode"] == "mean"


def test_embedding_runtime_pools_and_normalizes_like_torch(encoder_fp32_bundle, tiny_encoder_dir):
    import torch
    from transformers import AutoModel

    rt = load_embedding_runtime("onnxruntime", encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), threads=1)
    got = rt.embed(SENTENCES)
    assert got.shape == (4, 64)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    model = AutoModel.from_pretrained(str(tiny_encoder_dir))
    for row, text in enumerate(SENTENCES):  # one at a time in torch: proves padding does not leak in
        ids = rt.tokenizer.encode(text)
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state.numpy()
        ref = pool(hidden, np.ones((1, len(ids))), PoolingConfig("mean", True))
        np.testing.assert_allclose(got[row], ref[0], atol=1e-4)


def test_int8_embeddings_stay_close_to_fp32(tiny_encoder_dir, encoder_fp32_bundle, tmp_path):
    bundle = encoder_bundle(tiny_encoder_dir, tmp_path / "bert-int8", "int8")
    manifest = load_bundle(bundle)
    assert manifest.export["probe_min_cosine_vs_fp32"] >= 0.99
    fp32 = load_embedding_runtime("onnxruntime", encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), threads=1)
    int8 = load_embedding_runtime("onnxruntime", bundle, manifest, threads=1)
    a, b = fp32.embed(SENTENCES), int8.embed(SENTENCES)
    assert float(np.min(np.sum(a * b, axis=1))) >= 0.99  # both unit length: dot product is the cosine


@pytest.mark.parametrize("mode", ["cls", "max", "lasttoken"])
def test_pooling_modes_are_read_from_the_checkpoint(mode, tmp_path):
    write_sentence_transformers_config(tmp_path, pooling=mode, normalize=False)
    assert read_sentence_transformers_pooling(tmp_path) == PoolingConfig(mode, False, "1_Pooling/config.json",
                                                                         max_seq_length=ST_MAX_SEQ_LENGTH)


def test_pooling_math():
    hidden = np.array([[[1.0, 0.0], [3.0, 2.0], [100.0, 100.0]]])
    mask = np.array([[1, 1, 0]])
    assert pool(hidden, mask, PoolingConfig("mean")).tolist() == [[2.0, 1.0]]
    assert pool(hidden, mask, PoolingConfig("max")).tolist() == [[3.0, 2.0]]
    assert pool(hidden, mask, PoolingConfig("cls")).tolist() == [[1.0, 0.0]]
    assert pool(hidden, mask, PoolingConfig("lasttoken")).tolist() == [[3.0, 2.0]]


def test_ambiguous_pooling_config_is_refused(tmp_path):
    write_sentence_transformers_config(tmp_path, pooling="mean")
    cfg = tmp_path / "1_Pooling" / "config.json"
    cfg.write_text(json.dumps({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}))
    with pytest.raises(ConfigError, match="enables pooling modes"):
        read_sentence_transformers_pooling(tmp_path)


def test_static_int8_calibrates_on_unpadded_served_shaped_inputs(tiny_encoder_dir, encoder_fp32_bundle, tmp_path):
    """Calibration samples are lines tokenized as /v1/embeddings does: [CLS] ... [SEP], never the
    tokenizer.json's fixed padding of 64, cut at sentence-transformers' max_seq_length (96)."""
    from edgeopt.exporters.onnx.calibration import read_encoder_calibration
    from edgeopt.exporters.onnx.encoder import encoder_input_limit

    data = tmp_path / "calibration.txt"
    data.write_text("\n".join(SENTENCES + [" ".join(["the keys of the mapping"] * 60)]) + "\n")
    limit = encoder_input_limit(tiny_encoder_dir)
    assert limit == ST_MAX_SEQ_LENGTH
    samples = read_encoder_calibration(data, tiny_encoder_dir / "tokenizer.json", limit)
    cls, sep, pad = 2, 3, 0  # [CLS], [SEP], [PAD] of the fixture's WordPiece vocabulary
    assert len(samples) == len(SENTENCES) + 1
    assert all(s[0] == cls and s[-1] == sep and pad not in s for s in samples)
    assert len(samples[-1]) == limit and all(len(s) < 64 for s in samples[:-1])

    bundle = encoder_bundle(tiny_encoder_dir, tmp_path / "bert-static", "int8-static", calibration_data=data)
    fp32 = load_embedding_runtime("onnxruntime", encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), threads=1)
    static = load_embedding_runtime("onnxruntime", bundle, load_bundle(bundle), threads=1)
    assert float(np.min(np.sum(fp32.embed(SENTENCES) * static.embed(SENTENCES), axis=1))) >= 0.98
