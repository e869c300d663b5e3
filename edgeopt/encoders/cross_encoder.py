"""What a cross-encoder (sentence-transformers' ``CrossEncoder``) does around its transformer, in numpy.

``CrossEncoder.predict`` tokenizes each (query, document) pair as one input (BERT: ``[CLS] query [SEP]
document [SEP]``, token types 0 then 1), truncates the pair to ``max_seq_length`` tokens (longest side
first), runs the sequence classifier and applies an activation to its one logit (sigmoid unless the
checkpoint names another). The exporter reads these facts from the checkpoint and writes them into the
bundle (``rerank.json`` beside the graph), so the device scores pairs exactly as ``predict`` does without
sentence-transformers or torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import BundleError, ConfigError

RERANK_FILE = "rerank.json"
# The activations sentence-transformers writes into a checkpoint, by their dotted torch path.
ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid", "torch.nn.Sigmoid": "sigmoid",
               "torch.nn.modules.linear.Identity": "identity", "torch.nn.Identity": "identity"}
# tokenizer_config.json's model_max_length when a tokenizer has no limit (transformers' VERY_LARGE_INTEGER)
_NO_LIMIT = 10**12


@dataclass(frozen=True)
class CrossEncoderConfig:
    activation: str = "sigmoid"  # applied to the logit: "sigmoid" or "identity"
    max_length: int = 512  # tokens of one (query, document) pair, special tokens included
    source: str = "default"  # where the activation came from, for the manifest

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """(n,) float32 relevance scores from (n, 1) logits, as ``CrossEncoder.predict`` returns them."""
        flat = np.asarray(logits, dtype=np.float32).reshape(-1)
        if self.activation == "identity":
            return flat
        return (1.0 / (1.0 + np.exp(-flat.astype(np.float64)))).astype(np.float32)


def read_cross_encoder_config(model_dir: Path, position_limit: int) -> CrossEncoderConfig:
    """The checkpoint's activation (sentence-transformers v5, v4 or older) and input limit.

    ``position_limit`` is what the position table allows (edgeopt.sources.architectures.encoder_input_limit)."""
    activation, source = _activation(model_dir)
    return CrossEncoderConfig(activation=activation, max_length=_max_length(model_dir, position_limit), source=source)


def _activation(model_dir: Path) -> tuple[str, str]:
    candidates = (("config_sentence_transformers.json", ("activation_fn",)),
                  ("config.json", ("sentence_transformers", "activation_fn")),
                  ("config.json", ("sbert_ce_default_activation_function",)))
    for file_name, keys in candidates:
        value: Any = _read_json(model_dir / file_name)
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            continue
        if value not in ACTIVATIONS:
            raise ConfigError(f"the cross-encoder {model_dir} applies {value!r} to its scores ({file_name})",
                              f"edgeopt serves these activations: {', '.join(sorted(ACTIVATIONS))}")
        return ACTIVATIONS[value], f"{file_name}:{'.'.join(keys)}"
    return "sigmoid", "default (one label: sigmoid, as sentence-transformers)"


def _max_length(model_dir: Path, position_limit: int) -> int:
    """sentence-transformers' max_seq_length, else the smaller of the tokenizer's and the positions' limits."""
    configured = _read_json(model_dir / "sentence_bert_config.json").get("max_seq_length")
    if configured is None:
        configured = _read_json(model_dir / "tokenizer_config.json").get("model_max_length")
    if not isinstance(configured, int) or configured < 1 or configured >= _NO_LIMIT:
        return position_limit
    return min(configured, position_limit)


def save_cross_encoder_config(config: CrossEncoderConfig, model_dir: Path) -> None:
    (model_dir / RERANK_FILE).write_text(json.dumps(config.to_dict(), indent=2))


def load_cross_encoder_config(model_dir: Path) -> CrossEncoderConfig:
    path = model_dir / RERANK_FILE
    if not path.is_file():
        raise BundleError(f"{path} is missing: the bundle does not say how to score pairs",
                          "re-run edgeopt optimize on the cross-encoder")
    data = _read_json(path)
    try:
        config = CrossEncoderConfig(activation=str(data["activation"]), max_length=int(data["max_length"]),
                                    source=str(data.get("source", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"{path} is malformed ({exc!r})", "re-run edgeopt optimize on the cross-encoder") from exc
    if config.activation not in set(ACTIVATIONS.values()) or config.max_length < 3:
        raise BundleError(f"{path} has activation {config.activation!r}, max_length {config.max_length}",
                          "re-run edgeopt optimize on the cross-encoder")
    return config


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", f"fix or remove {path.name}") from exc
    return data if isinstance(data, dict) else {}
