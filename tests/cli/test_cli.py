"""CLI behaviour through typer's CliRunner: help texts and one-line errors with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.cli.app import app, main

runner = CliRunner()


def run_main(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Run the real entry point (with its error formatting) and return (exit code, stderr+stdout)."""
    monkeypatch.setattr("sys.argv", ["edgeopt", *args])
    with pytest.raises(SystemExit) as exc:
        main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.err + out.out


def test_every_command_has_help():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    commands = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert {"profiles", "plan", "optimize", "inspect"} <= set(commands)
    for name in commands:
        sub = runner.invoke(app, [name, "--help"])
        assert sub.exit_code == 0, name
        assert len(sub.output.strip().splitlines()) > 3, f"{name} --help is empty"


def test_profiles_json_lists_all():
    result = runner.invoke(app, ["profiles", "--json"])
    assert result.exit_code == 0
    names = {p["name"] for p in json.loads(result.output)}
    assert {"jetson-orin-nano-8gb", "raspberry-pi-5-4gb", "host"} <= names


def test_plan_json_reads_config_only(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 2048,
    }))  # TinyLlama-1.1B's shape; no weights in the directory
    result = runner.invoke(app, ["plan", str(tmp_path), "--target", "raspberry-pi-5-4gb", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["context"] == 2048 and plan["recommended"]
    labels = {c["format"] + ":" + c["quant"] for c in plan["candidates"]}
    assert {"gguf:F16", "gguf:Q4_K_M", "gguf:Q4_0", "onnx:fp32", "onnx:int8", "onnx:int4"} <= labels


def test_missing_model_path(capsys, monkeypatch, tmp_path: Path):
    code, out = run_main(["plan", str(tmp_path / "nope")], capsys, monkeypatch)
    assert code == 1
    assert "nope" in out and "fix:" in out and "Traceback" not in out


def test_unknown_target(capsys, monkeypatch, tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    code, out = run_main(["plan", str(tmp_path), "--target", "toaster"], capsys, monkeypatch)
    assert code == 1 and "unknown target 'toaster'" in out and "jetson-orin-nano-8gb" in out


def test_unsupported_architecture_lists_supported(capsys, monkeypatch, tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    code, out = run_main(["plan", str(tmp_path)], capsys, monkeypatch)
    assert code == 1 and "GPT2LMHeadModel" in out and "LlamaForCausalLM" in out and "Qwen2ForCausalLM" in out


def test_model_that_cannot_fit_says_by_how_much(capsys, monkeypatch, tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "max_position_embeddings": 8192}))  # Llama-3-70B's shape
    code, out = run_main(["optimize", str(tmp_path), "--target", "raspberry-pi-5-4gb", "--dry-run"], capsys, monkeypatch)
    assert code == 1 and "does not fit raspberry-pi-5-4gb" in out and "MiB more than" in out


def test_existing_output_needs_force(capsys, monkeypatch, tiny_llama_dir: Path, tmp_path: Path):
    out_dir = tmp_path / "bundle"
    out_dir.mkdir()
    code, out = run_main(["optimize", str(tiny_llama_dir), "-o", str(out_dir), "--format", "gguf"], capsys, monkeypatch)
    assert code == 1 and "already exists" in out and "--force" in out


def test_debug_shows_traceback(monkeypatch, tmp_path: Path):
    from edgeopt.errors import ModelNotFoundError

    monkeypatch.setattr("sys.argv", ["edgeopt", "--debug", "plan", str(tmp_path / "nope")])
    with pytest.raises(ModelNotFoundError):
        main()


def test_dry_run_prints_plan_and_writes_nothing(tiny_llama_dir: Path, tmp_path: Path):
    out_dir = tmp_path / "bundle"
    result = runner.invoke(app, ["optimize", str(tiny_llama_dir), "-o", str(out_dir), "--dry-run", "--target", "jetson"])
    assert result.exit_code == 0, result.output
    assert "will write gguf:Q4_K_M" in result.output
    assert not out_dir.exists()


def test_usage_errors_are_short_not_tracebacks(capsys, monkeypatch):
    """typer carries its own copy of click; its usage errors are shown like click's, with the exit code 2."""
    code, out = run_main(["plan", "--bogus"], capsys, monkeypatch)
    assert code == 2
    assert "No such option: --bogus" in out and "Traceback" not in out and len(out.strip().splitlines()) <= 5
