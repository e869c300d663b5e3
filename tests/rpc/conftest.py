"""The RPC build is per machine (built once by make setup into ~/.cache/edgeopt, like llama-server for the
benchmarks), not per test: resolved here, before the suite points EDGEOPT_CACHE at a temporary directory."""

from __future__ import annotations

import pytest

from edgeopt.rpc.binaries import build_dir

RPC_BUILD = build_dir()


@pytest.fixture(autouse=True)
def _machine_rpc_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEOPT_RPC_BUILD", str(RPC_BUILD))
