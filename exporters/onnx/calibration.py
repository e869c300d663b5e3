"""Calibration inputs for static INT8 quantization, cut from a user's text file.

Activation ranges are only as good as the text they are measured on, so static quantization refuses
to run without ``--calibration-data``. For decoders each sample is a window of text whose first half
is run through the fp32 graph to build a real KV cache; the second half is then fed with that cache,
so the calibrator sees the same input kinds (non-empty past keys/values) the device will. For
encoders each sample is one line, tokenized as /v1/embeddings tokenizes a text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import ConfigError
from edgeopt.sources.textfile import read_text_file

DEFAULT_SAMPLES = 16
DEFAULT_WINDOW = 64
MIN_TOKENS = 16


def _calibration_text(data_file: Path | None) -> str:
    if data_file is None:
        raise ConfigError("static INT8 quantization (--quant int8-static) needs calibration text",
                          "pass --calibration-data FILE (a few KB of text like what the model will see), "
                          "or use --quant int8 (dynamic) which needs none")
    return read_text_file(Path(data_file), "calibration data", "--calibration-data", ConfigError)


def read_calibration_ids(data_file: Path | None, tokenizer_json: Path) -> list[int]:
    from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer

    ids = BundleTokenizer(tokenizer_json).encode(_calibration_text(data_file), add_special=False)
    if len(ids) < MIN_TOKENS:
        raise ConfigError(f"calibration data {data_file} gives {len(ids)} tokens; at least {MIN_TOKENS} are needed",
                          "pass a longer text (a few KB)")
    return ids


def windows(ids: list[int], window: int, samples: int) -> list[list[int]]:
    """Up to ``samples`` windows spread evenly over the text (not just its beginning)."""
    window = min(window, len(ids))
    starts = np.linspace(0, len(ids) - window, num=min(samples, max(1, len(ids) // window)), dtype=int)
    return [ids[s:s + window] for s in dict.fromkeys(starts.tolist())]


class FeedReader:
    """onnxruntime CalibrationDataReader over a precomputed list of feeds."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.feeds = feeds
        self.count = len(feeds)
        self._next = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._next >= len(self.feeds):
            return None
        self._next += 1
        return self.feeds[self._next - 1]

    def rewind(self) -> None:
        self._next = 0


def decoder_reader(fp32_model: Path, ids: list[int], samples: int = DEFAULT_SAMPLES,
                   window: int = DEFAULT_WINDOW) -> Any:
    from onnxruntime.quantization import CalibrationDataReader

    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session

    decoder = DecoderSession(create_session(fp32_model, 2, ["CPUExecutionProvider"]))
    feeds = []
    for chunk in windows(ids, window, samples):
        half = len(chunk) // 2
        _, past = decoder.run_sequence(chunk[:half])
        rest = chunk[half:]
        feed = {"input_ids": np.asarray([rest], dtype=np.int64),
                "attention_mask": np.ones((1, len(chunk)), dtype=np.int64)}
        if decoder.layout.has_position_ids:
            feed["position_ids"] = np.arange(half, len(chunk), dtype=np.int64)[None, :]
        feed.update(zip(decoder.layout.kv_input_names, past))
        feeds.append(feed)
    return type("DecoderCalibration", (FeedReader, CalibrationDataReader), {})(feeds)


def read_encoder_calibration(data_file: Path | None, tokenizer_json: Path, max_length: int,
                             samples: int = DEFAULT_SAMPLES) -> list[list[int]]:
    """Up to ``samples`` lines of the file, spread over it, each tokenized as /v1/embeddings tokenizes a
    text (special tokens, no padding) and cut as sentence-transformers cuts it (``max_length``)."""
    from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer

    text = _calibration_text(data_file)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    picks = np.linspace(0, len(lines) - 1, num=min(samples, len(lines)), dtype=int) if lines else []
    chosen = [lines[i] for i in dict.fromkeys(np.asarray(picks).tolist())]
    batch = BundleTokenizer(tokenizer_json).encode_batch(chosen, add_special=True, max_length=max_length)
    if sum(map(len, batch)) < MIN_TOKENS:
        raise ConfigError(f"calibration data {data_file} gives {sum(map(len, batch))} tokens; at least "
                          f"{MIN_TOKENS} are needed", "pass a longer text (one sentence or passage per line)")
    return batch


def encoder_reader(fp32_model: Path, samples: list[list[int]]) -> Any:
    """One feed per sample, unpadded: its attention mask is all real tokens, as served."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader

    names = {i.name for i in onnx.load(str(fp32_model), load_external_data=False).graph.input}
    feeds = []
    for chunk in samples:
        feed = {"input_ids": np.asarray([chunk], dtype=np.int64),
                "attention_mask": np.ones((1, len(chunk)), dtype=np.int64)}
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.zeros((1, len(chunk)), dtype=np.int64)
        feeds.append(feed)
    return type("EncoderCalibration", (FeedReader, CalibrationDataReader), {})(feeds)
