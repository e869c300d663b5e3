"""API key and exposure (issue 12 item 6): the key is checked before anything else, on raw bytes,
with a proper Bearer challenge; a server reachable from the network refuses to start without a key."""

from __future__ import annotations

import logging

import httpx
import pytest

from edgeopt.errors import ConfigError
from edgeopt.server.http.auth import check_exposure, is_loopback
from tests.server.conftest import MODEL
from tests.cli.test_cli import run_main

pytestmark = pytest.mark.timeout(120)
KEY = "clé-secrète"  # non-ASCII on purpose


def auth(key: bytes) -> dict[str, bytes]:
    return {"Authorization": b"Bearer " + key}


def test_a_malformed_body_without_the_key_gets_401_not_400(serve_fake):
    live = serve_fake(api_key=KEY)
    for body in (b"{not json", b'{"model": 5}', b""):
        response = httpx.post(f"{live.url}/v1/chat/completions", content=body,
                              headers={"Content-Type": "application/json"}, timeout=30)
        assert response.status_code == 401, (body, response.text)
    with_key = httpx.post(f"{live.url}/v1/chat/completions", content=b"{not json", timeout=30,
                          headers={"Content-Type": "application/json", **auth(KEY.encode())})
    assert with_key.status_code == 400


def test_401_carries_a_bearer_challenge(serve_fake):
    live = serve_fake(api_key=KEY)
    missing = httpx.get(f"{live.url}/v1/models")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer ")
    assert missing.json()["error"]["type"] == "authentication_error"
    wrong = httpx.get(f"{live.url}/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
    basic = httpx.get(f"{live.url}/v1/models", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert basic.status_code == 401 and basic.headers["www-authenticate"].startswith("Bearer ")


def test_a_non_ascii_key_works_utf8_encoded(serve_fake):
    live = serve_fake(api_key=KEY)
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    ok = httpx.post(f"{live.url}/v1/completions", json=body, headers=auth(KEY.encode("utf-8")), timeout=30)
    assert ok.status_code == 200, ok.text
    # The same characters latin-1 encoded are other bytes: not the key.
    latin1 = httpx.post(f"{live.url}/v1/completions", json=body, headers=auth(KEY.encode("latin-1")), timeout=30)
    assert latin1.status_code == 401


def test_openapi_and_every_unknown_path_are_behind_the_key_and_probes_are_not(serve_fake):
    live = serve_fake(api_key=KEY)
    for path in ("/openapi.json", "/docs", "/redoc", "/no/such/path"):
        assert httpx.get(f"{live.url}{path}").status_code == 401, path
    schema = httpx.get(f"{live.url}/openapi.json", headers=auth(KEY.encode()))
    assert schema.status_code == 200 and "/v1/chat/completions" in schema.json()["paths"]
    assert httpx.get(f"{live.url}/docs", headers=auth(KEY.encode())).status_code == 404  # no docs UI at all
    assert httpx.get(f"{live.url}/health").status_code == 200
    assert httpx.get(f"{live.url}/metrics").status_code == 200
    assert 'edgeopt_request_errors_total{status="401"}' in httpx.get(f"{live.url}/metrics").text


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_hosts_need_no_key(host):
    assert is_loopback(host)
    check_exposure(host, 8000, None, insecure_no_auth=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "", "raspberrypi.local"])
def test_a_network_host_without_a_key_is_refused_with_the_fixes(host):
    assert not is_loopback(host)
    with pytest.raises(ConfigError) as caught:
        check_exposure(host, 8000, None, insecure_no_auth=False)
    text = str(caught.value)
    assert f"--host {host} " in text and "EDGEOPT_API_KEY" in text and "--insecure-no-auth" in text
    check_exposure(host, 8000, "k", insecure_no_auth=False)


def test_the_explicit_opt_out_starts_but_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="edgeopt.server"):
        check_exposure("0.0.0.0", 8000, None, insecure_no_auth=True)
    assert "WITHOUT an API key" in caplog.text


def test_edgeopt_serve_refuses_before_loading_and_reads_the_key_from_the_environment(tmp_path, monkeypatch, capsys):
    missing = str(tmp_path / "missing")
    monkeypatch.delenv("EDGEOPT_API_KEY", raising=False)
    code, out = run_main(["serve", missing, "--host", "0.0.0.0"], capsys, monkeypatch)
    assert code != 0 and "--insecure-no-auth" in out and "EDGEOPT_API_KEY" in out
    # With the key in the environment the exposure check passes and the (missing) bundle is the next error.
    monkeypatch.setenv("EDGEOPT_API_KEY", KEY)
    code, out = run_main(["serve", missing, "--host", "0.0.0.0"], capsys, monkeypatch)
    assert code != 0 and "does not exist" in out
    monkeypatch.delenv("EDGEOPT_API_KEY")
    code, out = run_main(["serve", missing, "--host", "0.0.0.0", "--insecure-no-auth"], capsys, monkeypatch)
    assert code != 0 and "does not exist" in out
