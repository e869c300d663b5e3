"""Torch bundles of Gemma 2: the attention soft-cap survives (eager on CPU); the paged CUDA engine refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import BackendError
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.base import StepInput
from tests.fixtures.parity import parity_ids
from tests.runtimes.torch_bundles import make_torch_bundle

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gemma2_torch_bundle(tiny_gemma_factory, tmp_path_factory) -> Path:
    return make_torch_bundle(tiny_gemma_factory("gemma2"), tmp_path_factory.mktemp("torch") / "gemma2-torch")


def test_cpu_runtime_applies_attention_soft_capping(gemma2_torch_bundle: Path, tiny_gemma_factory) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    source = tiny_gemma_factory("gemma2")
    ids = parity_ids(source, 40)  # longer than the 16-token window, too
    with torch.no_grad():
        eager = AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager").eval()
        expected = eager(torch.tensor([ids])).logits[0, -1].numpy()
    runtime = load_runtime("torch", gemma2_torch_bundle, load_bundle(gemma2_torch_bundle), threads=2, device="cpu",
                           max_slots=1, context_length=64)
    try:
        got = runtime.step([StepInput(0, ids, 0, True)])[0]
    finally:
        runtime.close()
    np.testing.assert_allclose(got, expected, atol=2e-4)


def test_paged_cuda_engine_refuses_soft_capped_models(gemma2_torch_bundle: Path) -> None:
    from edgeopt.runtimes.torch.paged import load_paged_runtime

    with pytest.raises(BackendError) as refused:  # before any CUDA work: this runs on CPU-only machines
        load_paged_runtime(gemma2_torch_bundle, load_bundle(gemma2_torch_bundle), dtype="auto",
                           kv_capacity_tokens=None, max_slots=None, context_length=None)
    assert "attn_logit_softcapping=5.0" in refused.value.message and "--format gguf" in refused.value.hint
