"""Export flags (edgeopt/optimize/export_options.py): one dict for every format, and every option given is read by the
chosen format and quant or refused before any work, naming where it applies."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.optimize.export_options import check_export_options, declared_options, export_options
from edgeopt.optimize.pipeline import OptimizeOptions, resolve
from tests.cli.test_cli import run_main


def test_only_the_flags_given_become_options(tmp_path: Path) -> None:
    assert export_options() == {}
    text = tmp_path / "text.txt"
    text.write_text("some text")
    options = export_options(calibration_data=text, keep_fp=["lm_head,embeddings"], self_calibration=False)
    assert options["keep_fp"] == ["lm_head", "embeddings"] and options["self_calibration"] is False
    assert len(options["calibration_sha256"]) == 64


def test_every_export_flag_of_optimize_is_declared_by_some_format() -> None:
    """optimize's export flags (edgeopt/cli/commands/optimize_cmd.py) are the options the formats' entries
    declare with a flag: none is missing, none is declared for a flag optimize lacks."""
    from edgeopt.cli.commands import optimize_cmd

    flags = {option.flag for option in declared_options().values() if option.flag}
    source = Path(optimize_cmd.__file__).read_text()
    assert all(f'"{flag}' in source or f"/{flag}" in source for flag in flags), flags
    assert flags == {"--calibration-data", "--calibration-method", "--int4-block-size", "--int8-method", "--int4-mix",
                     "--int4-algorithm", "--keep-fp", "--size", "--no-self-calibration"}


def test_an_option_no_format_declares_is_refused_when_the_dict_is_made() -> None:
    with pytest.raises(ConfigError, match="no format reads the export option"):
        export_options(int5_block_size=64)


@pytest.mark.parametrize(("fmt", "quant", "options", "needle"), [
    ("gguf", "Q4_K_M", {"int4_block_size": 64}, "--int4-block-size 64 is an option of --format onnx"),
    ("gguf", "Q8_0", {"keep_fp": ["lm_head"]}, "--keep-fp lm_head is an option of --format onnx"),
    ("onnx", "int4", {"calibration_method": "entropy"}, "applies to --quant int8-static, not int4"),
    ("onnx", "int8", {"int4_block_size": 64}, "--int4-block-size 64 applies to --quant int4, not int8"),
    ("onnx", "fp32", {"keep_fp": ["lm_head"]}, "--keep-fp lm_head applies to --quant int8 or int8-static or int4"),
    ("onnx", "int8", {"int8_method": "static"}, "unknown --int8-method 'static'"),
    ("onnx", "int8", {"threads": 2}, "export option 'threads' is an option of --format gguf, not onnx"),
])
def test_an_option_the_format_or_quant_would_ignore_is_refused(fmt: str, quant: str, options: dict,
                                                                needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as raised:
        check_export_options(fmt, quant, options)
    assert raised.value.hint


def test_optimize_refuses_another_formats_flag_before_any_work(tiny_llama_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--int4-block-size 64 is an option of --format onnx") as raised:
        resolve(OptimizeOptions(model=str(tiny_llama_dir), output=tmp_path / "b", format="gguf", quant="Q8_0",
                                export_options=export_options(int4_block_size=64)))
    assert "pass --format onnx" in raised.value.hint
    assert not (tmp_path / "b").exists()


def test_the_cli_names_the_flag_and_where_it_applies(tiny_llama_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run_main(["optimize", str(tiny_llama_dir), "--format", "gguf", "--quant", "Q8_0",
                          "--int4-algorithm", "rtn", "-o", str(tmp_path / "b"), "--no-eval"], capsys, monkeypatch)
    assert code != 0
    assert "--int4-algorithm rtn is an option of --format onnx, not gguf" in out and "--format onnx" in out
    assert not (tmp_path / "b").exists()
