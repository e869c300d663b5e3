"""The OpenAI Agents SDK runs an agent with a function tool against ``edgeopt serve``, over the Responses API
(the SDK's default model class, OpenAIResponsesModel), streamed and not.

The model is the real SmolLM2-135M-Instruct (edgeopt/demo/smollm2.py), so the answer after the tool's
result is the model's own: with a structured output type (``text.format`` json_schema, enforced by the
grammar) it must read the temperature out of the tool's result. The first turn forces the call
(``tool_choice="required"``; the SDK resets it to "auto" once the tool ran, as it does for every model), so
the flow does not depend on a 135M model choosing to call a tool; the grammar holds the call to the
function's schema. (A free-text answer is not asserted: when free to choose, the 135M model sometimes
calls the tool again instead of answering, and the run ends at max_turns.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel

from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live, smollm2_bundle

pytestmark = pytest.mark.timeout(300)
CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    CALLS.append(city)
    return f"It is 21 degrees Celsius and sunny in {city}."


class WeatherReport(BaseModel):
    temperature_celsius: int


@pytest.fixture(scope="module")
def server_url(smollm2_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    set_tracing_disabled(True)  # the SDK would upload traces to OpenAI otherwise
    live = serve_bundle_live(smollm2_bundle(smollm2_checkpoint, tmp_path_factory.mktemp("smollm2")), context=2048)
    try:
        yield live.url
    finally:
        live.stop()


def _agent(url: str, output_type: type = WeatherReport) -> Agent:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    return Agent(name="weather", output_type=output_type,
                 instructions="You are a weather assistant. Reply with one short sentence that repeats what the "
                              "weather tool said.",
                 tools=[get_weather], model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                 model_settings=ModelSettings(tool_choice="required", temperature=0.0, max_tokens=96))


def _check(result) -> None:  # noqa: ANN001 - RunResult / RunResultStreaming
    calls = [item for item in result.new_items if item.type == "tool_call_item"]
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert calls and len(outputs) == len(calls), result.new_items
    assert calls[0].raw_item.name == "get_weather" and CALLS == ["Paris"]
    assert result.raw_responses[-1].output[-1].type == "message"


def test_runner_run_completes_with_a_tool_call(server_url: str) -> None:
    CALLS.clear()
    result = asyncio.run(Runner.run(_agent(server_url), "What is the weather in Paris?", max_turns=4,
                                    run_config=RunConfig(tracing_disabled=True)))
    _check(result)
    assert result.final_output == WeatherReport(temperature_celsius=21)


def test_runner_run_streamed_completes_with_a_tool_call(server_url: str) -> None:
    CALLS.clear()

    async def run():  # noqa: ANN202
        result = Runner.run_streamed(_agent(server_url), "What is the weather in Paris?", max_turns=4,
                                     run_config=RunConfig(tracing_disabled=True))
        kinds = [event.type async for event in result.stream_events()]
        return result, kinds

    result, kinds = asyncio.run(run())
    _check(result)
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert result.final_output == WeatherReport(temperature_celsius=21)
