"""Scorers: anything that turns a token sequence into next-token logits, one per bundle format.

Evaluation is format-agnostic: it asks a scorer for logits and compares them with the original
Hugging Face model's. Each format's backend entry (:mod:`edgeopt.backends`) names a ``"module:function"``
loader, resolved lazily so that a missing backend only matters when its format is evaluated. A loader has the signature
``load_scorer(bundle_dir, manifest, context=..., threads=...) -> Scorer``; formats whose runtime has several KV
cache types also take ``kv_type=`` (edgeopt.evaluation.kv_cache).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from edgeopt import backends
from edgeopt.errors import ConfigError, EvaluationError

if TYPE_CHECKING:
    from edgeopt.measuring.reference_logits import StoredLogits


class Scorer(Protocol):
    def score(self, token_ids: list[int]) -> np.ndarray:
        """float32 logits of shape (len(token_ids), vocab): row i predicts token i+1."""
        ...

    def close(self) -> None: ...


class Reference(Scorer, Protocol):
    """The original model an evaluation compares a bundle with; it also writes the evaluation text when the user
    gives none. ``generator`` names what decodes that text (part of the text's cache key)."""

    generator: str
    keeps_logits: bool  # whether greedy_continuations can keep the logits it decodes with (``logits=``)

    def greedy_continuations(self, prompt_ids: list[list[int]], max_new_tokens: int,
                             on_step: Callable[[], None] = lambda: None,
                             logits: StoredLogits | None = None) -> list[list[int]]: ...


def load_reference(fmt: str, original_model_dir: Path, workbench: Path | None, context: int,
                   threads: int) -> Reference:
    """The original in ``fmt``'s own runtime when the format has a reference and a workbench holds (or can hold)
    its file, else in transformers (float32, CPU)."""
    target = backends.backend(fmt).export.reference if fmt in backends.formats() else None
    if target is None or workbench is None:
        return HFScorer(Path(original_model_dir), threads)
    return backends.load_attr(target)(Path(original_model_dir), Path(workbench), context=context, threads=threads)


def load_bundle_scorer(bundle_dir: Path, manifest: Any, context: int, threads: int = 2, **options: Any) -> Scorer:
    try:
        target = backends.backend(manifest.format).export.scorer
    except ConfigError as exc:
        raise EvaluationError(f"no scorer for bundle format {manifest.format!r}",
                              f"formats with evaluation: {', '.join(backends.formats())}") from exc
    try:
        loader = backends.load_attr(target)
    except ModuleNotFoundError as exc:
        raise EvaluationError(f"the {manifest.format} scorer module {target} is not available ({exc.name})",
                              "install the optimize extra: pip install 'edgeopt[optimize]'") from exc
    return loader(Path(bundle_dir), manifest, context=context, threads=threads, **options)


class HFScorer:
    """A checkpoint in transformers. By default float32 on CPU: the original, the reference distribution;
    a torch bundle's checkpoint is scored the same way in the dtype and on the device it is served with."""

    generator = "transformers"
    # generate() returns no logits for the prompt's positions, and a left-padded row's would not be the
    # unpadded window's: the evaluation scores the text afterwards.
    keeps_logits = False

    def __init__(self, model_dir: Path, threads: int = 2, dtype: str = "float32", device: str = "cpu") -> None:
        import torch

        from edgeopt.measuring.torch_metrics import load_causal_lm

        torch.set_num_threads(threads)
        self._torch = torch
        self._device = device
        self._model = load_causal_lm(model_dir, getattr(torch, dtype)).to(device)
        self.vocab_size = int(self._model.config.vocab_size)

    def score(self, token_ids: list[int]) -> np.ndarray:
        with self._torch.no_grad():
            out = self._model(self._torch.tensor([token_ids], device=self._device))
        return out.logits[0].float().cpu().numpy()

    def greedy_continuations(self, prompt_ids: list[list[int]], max_new_tokens: int,
                             on_step: Callable[[], None] = lambda: None,
                             logits: StoredLogits | None = None) -> list[list[int]]:
        """Every prompt followed by its greedy continuation (``max_new_tokens``, fewer where the model ends it with
        an end-of-sequence token, which is kept), all decoded together as one left-padded batch: one pass over
        the weights per step for every prompt. ``on_step`` is called after each step (edgeopt.measuring.eval_text uses it
        to follow the CPU load). Used to write evaluation text when the user gives none."""
        if logits is not None:
            raise EvaluationError("the transformers reference keeps no logits while it writes (keeps_logits is False)",
                                  "score the written text with score()")
        torch = self._torch
        config = self._model.config
        eos = _token_ids(config.eos_token_id)
        pad = next(iter(_token_ids(config.pad_token_id) or eos or {0}))
        longest = max(len(ids) for ids in prompt_ids)
        ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompt_ids], device=self._device)
        mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompt_ids], device=self._device)
        with torch.no_grad():
            out = self._model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                       pad_token_id=pad, stopping_criteria=[_EveryStep(torch, on_step)])
        rows = []
        for prompt, row in zip(prompt_ids, out.tolist()):
            continuation = row[longest:]
            end = next((i + 1 for i, token in enumerate(continuation) if token in eos), len(continuation))
            rows.append(prompt + continuation[:end])  # after its end-of-sequence token a row holds padding
        return rows

    def close(self) -> None:
        del self._model


def _token_ids(value: int | list[int] | None) -> set[int]:
    """A config's token id field (one id, a list of them, or none) as a set."""
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, list) else {int(value)}


class _EveryStep:
    """A transformers stopping criterion that never stops generation: it calls ``on_step`` once per step."""

    def __init__(self, torch: Any, on_step: Callable[[], None]) -> None:
        self._torch = torch
        self._on_step = on_step

    def __call__(self, input_ids: Any, scores: Any, **_kwargs: Any) -> Any:
        self._on_step()
        return self._torch.zeros(input_ids.shape[0], dtype=self._torch.bool, device=input_ids.device)
