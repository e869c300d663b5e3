"""``edgeopt serve --chat-template FILE``: a template of the user's replaces the model's own (a GGUF converted
without one can chat at all); a broken file, several models or a model that does not chat are refused."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from edgeopt.cli.app import app
from edgeopt.errors import ConfigError
from edgeopt.sources.model_source import open_model_source
from edgeopt.server.startup.launcher import ServeOptions, load_served_model
from tests.server.gguf_file_server import serve_path_live

TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant] {% endif %}")


def test_the_given_template_formats_the_chat(tiny_gguf_factory) -> None:
    live = serve_path_live(tiny_gguf_factory("llama-gqa", "F16"), chat_template=TEMPLATE)
    try:
        served = live.state.served
        messages = [{"role": "user", "content": "hello there"}]
        model = httpx.get(f"{live.url}/v1/models", timeout=10).json()["data"][0]["id"]
        reply = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                           json={"model": model, "messages": messages, "max_tokens": 2, "temperature": 0}).json()
        rendered = "[user] hello there\n[assistant] "
        assert served.chat_template.source == TEMPLATE
        assert reply["usage"]["prompt_tokens"] == len(served.tokenizer.encode(rendered)), reply
    finally:
        live.stop()


def test_a_template_that_is_not_jinja_is_refused_naming_the_file(tmp_path: Path, tiny_gguf_factory) -> None:
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m['content'] }}")  # the loop is never closed
    result = CliRunner().invoke(app, ["serve", str(tiny_gguf_factory("llama-gqa", "F16")), "--chat-template",
                                      str(broken)])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError) and str(broken) in result.exception.message
    assert "syntax error" in result.exception.message


def test_several_models_with_one_template_are_refused(tmp_path: Path, tiny_gguf_factory) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE)
    gguf = str(tiny_gguf_factory("llama-gqa", "F16"))
    result = CliRunner().invoke(app, ["serve", gguf, gguf, "--chat-template", str(template)])
    assert isinstance(result.exception, ConfigError) and "several models" in result.exception.message


def test_a_model_that_does_not_chat_is_refused(encoder_fp32_bundle: Path) -> None:
    source = open_model_source(encoder_fp32_bundle)
    with pytest.raises(ConfigError, match="does not chat"):
        load_served_model(source.bundle_dir, source.manifest, None, ServeOptions(chat_template=TEMPLATE))
