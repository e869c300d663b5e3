"""`edgeopt plan --devices N`: a 7B checkpoint, from its config.json alone, on Raspberry Pi 5 4 GB boards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.cli.app import app
from edgeopt.errors import ConfigError
from edgeopt.planning import AcrossDevices, CheckpointSource, PlanRequest, plan_for
from edgeopt.profiles import load_profile
from edgeopt.sizing.budget import after_margin

LLAMA_2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
              "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float16"}
PI = "raspberry-pi-5-4gb"


@pytest.fixture()
def llama_7b(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_2_7B))
    return tmp_path


def test_a_7b_model_fits_three_pi_boards_but_not_one(llama_7b: Path) -> None:
    profile = load_profile(PI)
    plan = plan_for(AcrossDevices(CheckpointSource(str(llama_7b)), devices=3), profile,
                    PlanRequest(context=2048, concurrency=1))
    chosen = plan.recommended
    assert chosen is not None and chosen.quant == profile.default_quant
    assert chosen.split.fits and not chosen.split.fits_one_device
    shares = chosen.split.shares
    assert [share.name for share in shares] == ["head", f"{profile.name} #2", f"{profile.name} #3"]
    assert sum(share.layers for share in shares) == 32
    assert [share.first_layer for share in shares] == [0, shares[0].layers, shares[0].layers + shares[1].layers]
    for share in shares:
        assert 0 < share.total_bytes <= after_margin(share.memory_bytes)
    assert not next(c for c in plan.candidates if c.quant == "F16").split.fits  # 13 GB does not fit 3 x 4 GB


def test_two_boards_are_not_enough_and_the_plan_says_so(llama_7b: Path) -> None:
    profile = load_profile(PI)
    plan = plan_for(AcrossDevices(CheckpointSource(str(llama_7b)), devices=2), profile,
                    PlanRequest(context=4096, concurrency=4))
    assert plan.recommended is None
    assert all(not candidate.split.fits for candidate in plan.candidates)


def test_the_cli_prints_the_split_and_the_same_in_json(llama_7b: Path) -> None:
    runner = CliRunner()
    table = runner.invoke(app, ["plan", str(llama_7b), "--target", PI, "--devices", "3", "--context", "2048"])
    assert table.exit_code == 0, table.output
    assert "does not fit one device" in table.output and f"{PI} #3: layers" in table.output
    as_json = runner.invoke(app, ["plan", str(llama_7b), "--target", PI, "--devices", "3", "--context", "2048",
                                  "--json"])
    data = json.loads(as_json.output)
    assert data["devices"] == 3 and data["recommended"] == "Q4_0"
    chosen = next(c for c in data["candidates"] if c["quant"] == "Q4_0")
    assert chosen["fits"] and not chosen["fits_one_device"] and len(chosen["devices"]) == 3


def test_devices_and_workers_together_are_refused() -> None:
    profile = load_profile(PI)
    with pytest.raises(ConfigError, match="exactly one of --devices and --workers"):
        plan_for(AcrossDevices(CheckpointSource("unread"), devices=3, workers=()), profile, PlanRequest())
