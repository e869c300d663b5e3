"""``edgeopt serve`` option parsing and bundle errors (no model load needed)."""

from __future__ import annotations

import pytest

from edgeopt.cli.commands.serve_cmd import parse_memory
from edgeopt.errors import BundleError, ConfigError
from edgeopt.server.startup.launcher import ServeOptions, serve_bundle
from tests.fixtures.import_probe import banned_modules_after


@pytest.mark.parametrize("text,expected", [("4GiB", 4 * 2**30), ("512MiB", 512 * 2**20), ("1.5g", int(1.5 * 2**30)),
                                           ("300", 300 * 2**20), ("2 GB", 2 * 10**9), ("2 GiB", 2 * 2**30)])
def test_parse_memory(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["lots", "-1G", "0"])
def test_parse_memory_refuses_nonsense(text):
    with pytest.raises(ConfigError, match=text):
        parse_memory(text)


def test_serving_a_missing_bundle_says_how_to_make_one(tmp_path):
    with pytest.raises(BundleError, match="edgeopt optimize"):
        serve_bundle(tmp_path / "nope", ServeOptions())


def test_server_modules_and_cli_import_no_heavy_packages():
    assert banned_modules_after("import edgeopt.cli.app, edgeopt.server.app, edgeopt.server.startup.launcher, "
                                "edgeopt.server.openai.routes, edgeopt.server.responses.routes, "
                                "edgeopt.bench.serve_bench",
                                must_load=("edgeopt.server.startup.launcher",)) == []


def test_prefix_cache_switches_reach_the_launcher(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from edgeopt.cli.app import app

    seen: list[ServeOptions] = []
    monkeypatch.setattr("edgeopt.server.startup.launcher.serve_bundle", lambda bundle, options, early=None: seen.append(options))
    warm = tmp_path / "system.txt"
    warm.write_text("You are terse.")
    runner = CliRunner()
    assert runner.invoke(app, ["serve", str(tmp_path), "--no-prefix-cache"]).exit_code == 0
    assert runner.invoke(app, ["serve", str(tmp_path), "--warm", str(warm)]).exit_code == 0
    assert [(o.prefix_cache, o.warm_file) for o in seen] == [(False, None), (True, warm)]
    missing = runner.invoke(app, ["serve", str(tmp_path), "--warm", str(tmp_path / "nope.txt")])
    assert missing.exit_code != 0 and "nope.txt" in missing.output


def test_responses_store_size_reaches_the_launcher(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from edgeopt.cli.app import app
    from edgeopt.server.state import DEFAULT_STORE_BYTES

    seen: list[ServeOptions] = []
    monkeypatch.setattr("edgeopt.server.startup.launcher.serve_bundle", lambda bundle, options, early=None: seen.append(options))
    runner = CliRunner()
    assert runner.invoke(app, ["serve", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["serve", str(tmp_path), "--responses-store", "1GiB"]).exit_code == 0
    assert runner.invoke(app, ["serve", str(tmp_path), "--responses-store", "0"]).exit_code == 0
    assert [o.responses_store_bytes for o in seen] == [DEFAULT_STORE_BYTES, 2**30, 0]
    bad = runner.invoke(app, ["serve", str(tmp_path), "--responses-store", "lots"])
    assert bad.exit_code != 0 and "--responses-store 'lots'" in str(bad.exception)


def test_several_models_reach_their_launcher_with_their_options(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from edgeopt.cli.app import app

    seen: list[tuple[list, object, ServeOptions]] = []
    monkeypatch.setattr("edgeopt.server.startup.launch_many.serve_models", lambda paths, folder, options:
                        seen.append((paths, folder, options)))
    runner = CliRunner()
    a, b = tmp_path / "a", tmp_path / "b"
    result = runner.invoke(app, ["serve", str(a), str(b), "--keep-alive", "30s", "--pin", "a", "--swap-space", "0"])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["serve", "--models", str(tmp_path), "--keep-alive", "-1"]).exit_code == 0
    (paths, folder, options), (_, folder2, options2) = seen
    assert paths == [a, b] and folder is None and folder2 == tmp_path
    assert (options.keep_alive_s, options.pins, options.swap_space_bytes) == (30.0, ("a",), 0)
    assert options2.keep_alive_s == float("inf") and options2.swap_space_bytes == 2**30


@pytest.mark.parametrize("args,message", [
    (["{a}", "--keep-alive", "5m"], "--keep-alive applies to a server of several models"),
    (["{a}", "--pin", "a"], "--pin applies to a server of several models"),
    (["{a}", "{b}", "--workers", "127.0.0.1:50052"], "--workers splits one model"),
    (["{a}", "{b}", "--keep-alive", "soon"], "--keep-alive 'soon' is not a duration"),
    ([], "no model to serve"),
])
def test_flags_of_one_model_or_of_several_are_refused_where_they_do_not_apply(tmp_path, monkeypatch, args, message):
    from typer.testing import CliRunner

    from edgeopt.cli.app import app

    monkeypatch.setattr("edgeopt.server.startup.launcher.serve_bundle", lambda *a: pytest.fail("must not start"))
    monkeypatch.setattr("edgeopt.server.startup.launch_many.serve_models", lambda *a: pytest.fail("must not start"))
    argv = ["serve", *(arg.format(a=tmp_path / "a", b=tmp_path / "b") for arg in args)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code != 0 and message in str(result.exception) + result.output
