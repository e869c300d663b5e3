"""The last leg of ``make demo``: serve, ask once, print, stop; a server that dies is reported, not waited on."""

from __future__ import annotations

import pytest

from edgeopt.demo import serve_demo


@pytest.fixture(scope="module")
def tiny_gguf_bundle(tiny_llama_dir, tmp_path_factory):
    from edgeopt.pipeline import OptimizeOptions, run_optimize

    out = tmp_path_factory.mktemp("serve-demo") / "bundle"
    run_optimize(OptimizeOptions(model=str(tiny_llama_dir), target="raspberry-pi", format="gguf", quant="Q8_0",
                                 output=out, evaluate=False), report=lambda _: None)
    return out


def test_serves_asks_prints_and_stops(tiny_gguf_bundle, capsys):
    code = serve_demo.main([str(tiny_gguf_bundle), "--max-tokens", "8", "--threads", "1"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "user:      What does json.dumps do?" in out.out and "assistant:" in out.out
    # The server is gone: its log is closed and complete, and nothing listens on the reported address.
    base_url = out.out.rsplit("server on ", 1)[1].split(",")[0]
    import httpx

    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base_url}/health", timeout=2.0)


def test_a_server_that_cannot_start_is_reported_with_its_log(tmp_path, capsys):
    not_a_bundle = tmp_path / "empty-bundle"
    not_a_bundle.mkdir()
    code = serve_demo.main([str(not_a_bundle), "--startup-timeout", "120"])
    err = capsys.readouterr().err
    assert code == 1
    assert "exited with code" in err and "server log" in err
    assert str(not_a_bundle) in err, "the server's own error (naming the bundle) is shown"
