"""Chat templates render like Hugging Face's: sandboxed jinja2 with raise_exception and special tokens."""

from __future__ import annotations

import json

import pytest

from edgeopt.errors import BundleError, ChatTemplateError
from edgeopt.server.chat.template import ChatTemplate

STRICT = ("{{ bos_token }}{% for m in messages %}"
          "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}"
          "[{{ m['role'] }}] {{ m['content'] | trim }}{{ eos_token }}\n"
          "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}")


def test_renders_with_special_tokens_and_generation_prompt():
    template = ChatTemplate(STRICT, bos_token="<s>", eos_token="</s>")
    out = template.render([{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}])
    assert out == "<s>[user] hi</s>\n[assistant] yo</s>\n[assistant] "
    assert not template.render([{"role": "user", "content": "x"}], add_generation_prompt=False).endswith("] ")


def test_raise_exception_becomes_a_400_request_error():
    template = ChatTemplate(STRICT)
    with pytest.raises(ChatTemplateError) as info:
        template.render([{"role": "assistant", "content": "first"}])
    assert info.value.status_code == 400 and "alternate" in info.value.message


def test_sandbox_refuses_attribute_escapes():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError):
        template.render([{"role": "user", "content": "x"}])


def test_syntax_error_is_a_bundle_error():
    with pytest.raises(BundleError, match="line 1"):
        ChatTemplate("{% for m in messages %}")


def test_from_bundle_prefers_manifest_then_jinja_file_then_config(tmp_path):
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    config = {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>",
              "chat_template": [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEF"}]}
    (tok / "tokenizer_config.json").write_text(json.dumps(config))
    assert ChatTemplate.from_bundle(tmp_path, None, "tokenizer").render([]) == "DEF"
    assert ChatTemplate.from_bundle(tmp_path, "MANIFEST {{ bos_token }}", "tokenizer").render([]) == "MANIFEST <s>"
    (tok / "chat_template.jinja").write_text("FILE")
    assert ChatTemplate.from_bundle(tmp_path, None, "tokenizer").render([]) == "FILE"


def test_bundle_without_template_gives_none_and_chat_route_says_why(tmp_path, serve_fake):
    assert ChatTemplate.from_bundle(tmp_path, None, "tokenizer") is None
    live = serve_fake()
    live.state.served.chat_template = None
    import httpx

    r = httpx.post(f"{live.url}/v1/chat/completions",
                   json={"model": "fake-model", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "/v1/completions" in r.json()["error"]["message"]
