"""Sentence-embedding pooling in numpy, as configured by a sentence-transformers checkpoint.

A sentence-transformers model directory lists its modules in ``modules.json``; the Pooling module's
``config.json`` says how token vectors become one sentence vector (CLS token, mean or max over real
tokens, last token), and a Normalize module, when present, scales each vector to unit length;
``sentence_bert_config.json`` gives ``max_seq_length``, the token count (special tokens included)
sentence-transformers truncates every text to. The exporter copies these facts into the bundle
(``pooling.json``) so the device needs no sentence-transformers package; the runtime serving the bundle and
the original's reference embeddings (edgeopt/measuring/reference_embeddings.py) pool alike, whatever the format.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from edgeopt.errors import ConfigError

POOLING_MODES = ("cls", "mean", "max", "lasttoken")
_ST_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
             "pooling_mode_max_tokens": "max", "pooling_mode_lasttoken": "lasttoken"}
POOLING_FILE = "pooling.json"


@dataclass(frozen=True)
class PoolingConfig:
    mode: str = "mean"  # the sentence-transformers default when a checkpoint carries no config
    normalize: bool = False
    source: str = "default"  # where the settings came from, for the manifest
    # sentence-transformers' input limit; None: no sentence_bert_config.json (or a bundle made before
    # edgeopt recorded it), and the position table is the only limit.
    max_seq_length: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def read_sentence_transformers_pooling(model_dir: Path) -> PoolingConfig:
    """Pooling and normalization of a checkpoint; mean pooling without normalization if it has none."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return PoolingConfig()
    config = _pooling_modules(model_dir, modules_file)
    return replace(config, max_seq_length=_max_seq_length(model_dir))


def _max_seq_length(model_dir: Path) -> int | None:
    path = model_dir / "sentence_bert_config.json"
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text()).get("max_seq_length")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", "fix or remove sentence_bert_config.json") from exc
    if value is None:
        return None
    if not isinstance(value, int) or value < 2:
        raise ConfigError(f"{path} has max_seq_length {value!r}", "set it to the model's input limit in tokens")
    return value


def _pooling_modules(model_dir: Path, modules_file: Path) -> PoolingConfig:
    try:
        modules = json.loads(modules_file.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{modules_file} is not valid JSON: {exc}", "fix or remove modules.json") from exc
    normalize = any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
    pooling = [m for m in modules if str(m.get("type", "")).endswith(".Pooling")]
    if not pooling:
        return PoolingConfig(normalize=normalize, source="modules.json (no Pooling module: mean)")
    config_file = model_dir / pooling[0].get("path", "1_Pooling") / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"modules.json names a Pooling module but {config_file} is missing",
                          "copy the checkpoint's 1_Pooling directory too")
    flags = json.loads(config_file.read_text())
    modes = [mode for key, mode in _ST_FLAGS.items() if flags.get(key)]
    if len(modes) != 1:
        raise ConfigError(f"{config_file} enables pooling modes {modes or 'none'}; edgeopt supports exactly one",
                          f"set one of {', '.join(_ST_FLAGS)} to true")
    return PoolingConfig(mode=modes[0], normalize=normalize, source=str(config_file.relative_to(model_dir)))


def save_pooling(config: PoolingConfig, directory: Path) -> None:
    (directory / POOLING_FILE).write_text(json.dumps(config.to_dict(), indent=2))


def load_pooling(directory: Path) -> PoolingConfig:
    path = directory / POOLING_FILE
    if not path.is_file():
        return PoolingConfig()
    data = json.loads(path.read_text())
    if data.get("mode") not in POOLING_MODES:
        raise ConfigError(f"{path} has pooling mode {data.get('mode')!r}", f"valid: {', '.join(POOLING_MODES)}")
    return PoolingConfig(**data)


def pool(hidden: np.ndarray, attention_mask: np.ndarray, config: PoolingConfig) -> np.ndarray:
    """(batch, tokens, dim) hidden states + (batch, tokens) mask -> (batch, dim) float32 embeddings."""
    hidden = hidden.astype(np.float32, copy=False)
    mask = attention_mask.astype(np.float32)[:, :, None]
    if config.mode == "cls":
        out = hidden[:, 0]
    elif config.mode == "mean":
        out = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
    elif config.mode == "max":
        out = np.where(mask > 0, hidden, -np.inf).max(axis=1)
    else:  # lasttoken: the last real token of each (right-padded) row
        last = attention_mask.sum(axis=1).astype(np.int64) - 1
        out = hidden[np.arange(hidden.shape[0]), last]
    if config.normalize:
        out = out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
    return out.astype(np.float32, copy=False)


def pad_batch(batch: list[list[int]], pad_token_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded int64 token ids and the matching attention mask (1 on real tokens)."""
    longest = max(len(ids) for ids in batch)
    ids = np.full((len(batch), longest), pad_token_id, dtype=np.int64)
    mask = np.zeros((len(batch), longest), dtype=np.int64)
    for row, seq in enumerate(batch):
        ids[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    return ids, mask
