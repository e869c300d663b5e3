"""The ``ollama`` client against the real SmolLM2-135M-Instruct GGUF served from its package: a sensible
answer, a ``format`` schema the reply validates against, and the model described as Ollama describes it."""

from __future__ import annotations

import json

import jsonschema
import ollama
import pytest

from edgeopt.demo.smollm2 import smollm2_gguf_path
from tests.server.gguf_file_server import serve_path_live

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def smollm2_server():
    live = serve_path_live(smollm2_gguf_path(), context=1024)
    yield live
    live.stop()


def test_chat_format_show_and_ps_on_the_real_model(smollm2_server):
    client = ollama.Client(host=smollm2_server.url, timeout=120)
    model = smollm2_gguf_path().stem
    answer = client.chat(model=f"{model}:latest", messages=[{"role": "user", "content": "Name the largest ocean on Earth."}],
                         options={"temperature": 0, "num_predict": 30})
    assert "Pacific" in answer.message.content
    schema = {"type": "object", "properties": {"ocean": {"type": "string", "maxLength": 20},
                                               "deep": {"type": "boolean"}},
              "required": ["ocean", "deep"], "additionalProperties": False}
    shaped = client.chat(model=model, messages=[{"role": "user", "content": "Which ocean is largest? Answer in JSON."}],
                         format=schema, options={"temperature": 0, "num_predict": 60}, stream=False)
    jsonschema.validate(json.loads(shaped.message.content), schema)
    shown = client.show(model)
    assert shown.details.family == "llama" and shown.details.quantization_level == "Q4_1"
    assert shown.details.parameter_size == "134.5M" and "<|im_start|>" in shown.template
    [running] = client.ps().models
    assert running.context_length == 1024
