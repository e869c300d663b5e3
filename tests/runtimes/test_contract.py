"""The contracts between packages are declared, and every implementation declares it implements them.

A capability is a typed member of a protocol (runtimes/base.py, edgeopt/engine/api.py), never a hasattr
probe; this checks that each implementation has every member with the protocol's parameters, so a new
member (a prefix cache, a grammar mask) cannot be forgotten in one backend.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from edgeopt.engine.api import EngineConfig, ServingEngine
from edgeopt.engine.engine import Engine
from edgeopt.runtimes.base import EmbeddingRuntime, Runtime
from edgeopt.paged_batching.paged_engine import PagedEngine
from tests.fixtures.fake_runtime import FakeRuntime

REPO = Path(__file__).resolve().parents[2]
SERVING_PACKAGES = ("edgeopt", "runtimes", "exporters", "profiles")


def protocol_members(protocol: type) -> dict[str, object]:
    """Methods, properties and annotated attributes the protocol declares (its own, not object's)."""
    members = {name: value for name, value in vars(protocol).items()
               if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    members.update({name: None for name in getattr(protocol, "__annotations__", {})})
    return members


def assert_implements(cls: type, protocol: type) -> None:
    for name, declared in protocol_members(protocol).items():
        assert hasattr(cls, name) or name in inspect.get_annotations(cls) or _set_in_init(cls, name), \
            f"{cls.__name__} lacks {protocol.__name__}.{name}"
        if callable(declared) and not isinstance(declared, property):
            want = list(inspect.signature(declared).parameters)
            got = list(inspect.signature(getattr(cls, name)).parameters)
            assert got == want, f"{cls.__name__}.{name}{got} differs from {protocol.__name__}.{name}{want}"


def _set_in_init(cls: type, name: str) -> bool:
    """An instance attribute the class (or a base) assigns: ``self.name = ...`` / ``self.name: T = ...``."""
    return any(f"self.{name} =" in source or f"self.{name}:" in source or f", self.{name}" in source
               for source in (inspect.getsource(k) for k in cls.__mro__[:-1] if k.__module__ != "typing"))


@pytest.mark.parametrize("engine", [Engine, PagedEngine])
def test_both_engines_implement_the_serving_engine_protocol(engine: type) -> None:
    assert_implements(engine, ServingEngine)


def runtime_classes() -> list[type]:
    from edgeopt.runtimes.llama_cpp.context import LlamaCppRuntime
    from edgeopt.runtimes.onnxruntime.decoder import OnnxDecoderRuntime
    from edgeopt.runtimes.torch.cpu_runtime import TorchRuntime
    from edgeopt.runtimes.torch.paged import PagedRuntime

    return [LlamaCppRuntime, OnnxDecoderRuntime, TorchRuntime, PagedRuntime, FakeRuntime]


def test_every_runtime_declares_the_runtime_protocol_and_inherits_its_defaults() -> None:
    for cls in runtime_classes():
        assert Runtime in cls.__mro__, f"{cls.__name__} must subclass edgeopt.runtimes.base.Runtime"
        assert_implements(cls, Runtime)


def test_the_embedding_runtime_declares_its_protocol() -> None:
    from edgeopt.runtimes.onnxruntime.encoder import OnnxEmbeddingRuntime

    assert EmbeddingRuntime in OnnxEmbeddingRuntime.__mro__
    assert_implements(OnnxEmbeddingRuntime, EmbeddingRuntime)


def test_only_the_torch_format_brings_an_engine_and_only_over_the_paged_runtime() -> None:
    """Bringing an own scheduler is a registry capability, not part of the runtime contract: only the torch
    entry names one, and it declines every runtime but the CUDA paged one (edgeopt's Engine drives those)."""
    from edgeopt import backends
    from edgeopt.paged_batching import engine_for

    assert [fmt for fmt in backends.formats() if backends.backend(fmt).serving.own_engine] == ["torch"]
    assert backends.load_attr(backends.backend("torch").serving.own_engine) is engine_for
    fake = FakeRuntime()
    assert fake.max_batch_tokens is None
    assert engine_for(fake, EngineConfig(kv_capacity_tokens=64, max_running=1)) is None


def test_no_capability_probes_between_packages() -> None:
    """hasattr/getattr on our own objects hide the contract; the compat module that papers over
    transformers' releases is the one place allowed to probe (a third-party API, not ours)."""
    allowed = {"edgeopt/paged_batching/paged_compat.py"}
    probes = []
    for package in ("edgeopt/engine", "edgeopt/server", "runtimes"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in allowed:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr") or (
                        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                        and len(node.args) == 3):
                    probes.append(f"{rel}:{node.lineno}")
    assert probes == []
