"""``edgeopt monitor`` flags: bad values fail before any screen is drawn, with the value and the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgeopt.cli.app import main
from edgeopt.server.startup.serve_process import child_env, serve_command
from tests.fixtures.import_probe import banned_modules_after


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["edgeopt", *args])
    with pytest.raises(SystemExit) as info:
        main()
    return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(("args", "expected"), [
    (("--refresh", "0"), "--refresh 0.0 must be a positive"),
    (("--refresh", "2", "--window", "1"), "--window 1.0 is shorter than --refresh 2.0"),
    (("ftp://edge:21",), "cannot monitor 'ftp://edge:21'"),
])
def test_bad_flags_are_refused_with_the_value(monkeypatch, capsys, args: tuple[str, ...], expected: str) -> None:
    code, err = run_cli(monkeypatch, capsys, "monitor", *args)
    assert code != 0
    assert expected in err and "fix:" in err


def test_bundle_that_does_not_exist_fails_before_starting_a_server(monkeypatch, capsys, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-bundle"
    code, err = run_cli(monkeypatch, capsys, "monitor", "--bundle", str(missing))
    assert code != 0 and str(missing) in err and "does not exist" in err


def test_url_and_bundle_together_are_refused(monkeypatch, capsys, tmp_path: Path) -> None:
    code, err = run_cli(monkeypatch, capsys, "monitor", "http://10.0.0.2:8000", "--bundle", str(tmp_path))
    assert code != 0 and "--bundle" in err and "10.0.0.2" in err


def test_serve_command_passes_port_threads_and_extra_args_and_the_key_out_of_argv(monkeypatch) -> None:
    command = serve_command(Path("b"), 4321, threads=2, extra_args=["--memory", "1GiB"])
    assert command[1:5] == ["-m", "edgeopt.cli.app", "serve", "b"]
    assert command[command.index("--port") + 1] == "4321"
    assert "--api-key" not in command  # argv shows in every user's ps; the environment does not
    monkeypatch.setenv("EDGEOPT_API_KEY", "from-the-parent")
    assert child_env("k")["EDGEOPT_API_KEY"] == "k"
    assert "EDGEOPT_API_KEY" not in child_env(None)  # a server started without a key has none
    assert command[command.index("--threads") + 1] == "2"
    assert command[-2:] == ["--memory", "1GiB"]


def test_the_monitor_never_imports_torch_or_transformers() -> None:
    assert banned_modules_after("import edgeopt.cli.app, edgeopt.cli.commands.monitor_cmd, edgeopt.monitor.app, "
                                "edgeopt.server.startup.serve_process", must_load=("edgeopt.monitor.app",)) == []
