"""Constrained decoding in the engine (fake runtime): schemas are enforced, refused features are named,
a finished grammar ends the sequence, and constrained sequences leave the rest of the batch untouched."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

from edgeopt.engine import Engine, SamplingParams
from edgeopt.engine.grammar import GrammarCompiler, GrammarSpec, UnsupportedGrammarError
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import EOS_ID, FakeRuntime
from tests.fixtures.json_schemas import random_schemas

PROMPT = list(b"Answer: ")


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    runtime = FakeRuntime()
    return GrammarCompiler(runtime.tokenizer, runtime.info)


def generate(engine: Engine, requests: dict[str, tuple[list[int], SamplingParams]]):  # noqa: ANN201
    async def body(e: Engine):
        streams = {rid: e.add_request(rid, ids, params) for rid, (ids, params) in requests.items()}
        e.start()  # all queued first: they share steps
        return {rid: await s.collect() for rid, s in streams.items()}

    return run_engine(engine, body, autostart=False)


def test_random_schemas_are_always_satisfied(compiler: GrammarCompiler) -> None:
    schemas = random_schemas(50, seed=7, numbers=False)  # numbers: tests/server/test_structured_output.py
    engine, _ = make_engine()
    requests = {f"r{i}": (PROMPT, SamplingParams(max_tokens=400, temperature=2.0, seed=i,
                                                 grammar=compiler.compile(GrammarSpec.json_schema(schema))))
                for i, schema in enumerate(schemas)}
    results = generate(engine, requests)
    for i, schema in enumerate(schemas):
        out = results[f"r{i}"]
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), schema)


@pytest.mark.parametrize(("schema", "feature"), [
    ({"type": "object", "not": {"required": ["a"]}}, "not"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "dependentRequired": {"a": ["b"]}},
     "dependentRequired"),
    ({"type": "string", "pattern": "(?=a)b"}, "look-around"),
    ({"type": "string", "format": "not-a-format"}, "not-a-format"),
    ({"$ref": "https://example.com/schema.json"}, "https://example.com/schema.json"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf"),
])
def test_unsupported_schema_features_are_refused_by_name(compiler: GrammarCompiler, schema: dict,
                                                          feature: str) -> None:
    with pytest.raises(UnsupportedGrammarError) as caught:
        compiler.compile(GrammarSpec.json_schema(schema, param="response_format.json_schema.schema"))
    assert feature in str(caught.value)
    assert caught.value.param == "response_format.json_schema.schema"


def test_a_complete_grammar_ends_the_sequence_with_stop_even_when_eos_is_ignored(compiler: GrammarCompiler) -> None:
    grammar = compiler.compile(GrammarSpec.json_schema({"enum": ["yes", "no"]}))
    engine, _ = make_engine()
    out = generate(engine, {"a": (PROMPT, SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True,
                                                         grammar=grammar))})["a"]
    assert out.finish_reason == "stop" and out.text in ('"yes"', '"no"')
    assert EOS_ID not in out.token_ids and out.completion_tokens == len(out.text)  # one byte per token


def test_constrained_sequences_do_not_change_their_neighbours(compiler: GrammarCompiler) -> None:
    """Masks are per row: the unconstrained requests of a mixed batch produce what they produce alone."""
    grammar = compiler.compile(GrammarSpec.json_object())
    free = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    prompts = {f"free{i}": list(f"Tell me about {i}".encode()) for i in range(3)}
    alone_engine, runtime = make_engine()
    alone = generate(alone_engine, {rid: (ids, free) for rid, ids in prompts.items()})
    mixed_engine, mixed_runtime = make_engine()
    constrained = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True, grammar=grammar)
    mixed = generate(mixed_engine, {**{rid: (ids, free) for rid, ids in prompts.items()},
                                    **{f"json{i}": (PROMPT, constrained) for i in range(3)}})
    for rid in prompts:
        assert mixed[rid].token_ids == alone[rid].token_ids
    assert max(mixed_runtime.batch_sizes) == 6  # they did decode together
    assert all(mixed[f"json{i}"].text.startswith("{") for i in range(3))


def test_lark_grammar_with_embedded_json_schema(compiler: GrammarCompiler) -> None:
    """The form tool calling uses: fixed markup around arguments that follow a schema."""
    arguments = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}},
                 "required": ["city"], "additionalProperties": False}
    lark = f'start: "<call>" args "</call>"\nargs: %json {json.dumps(arguments)}'
    grammar = compiler.compile(GrammarSpec.lark(lark, param="tool_choice"))
    engine, _ = make_engine()
    out = generate(engine, {"t": (PROMPT, SamplingParams(max_tokens=60, temperature=1.0, seed=3,
                                                         grammar=grammar))})["t"]
    assert out.finish_reason == "stop"
    assert out.text.startswith("<call>") and out.text.endswith("</call>")
    jsonschema.validate(json.loads(out.text[len("<call>"):-len("</call>")]), arguments)


def test_a_bad_lark_grammar_is_refused_with_its_param(compiler: GrammarCompiler) -> None:
    with pytest.raises(UnsupportedGrammarError) as caught:
        compiler.compile(GrammarSpec.lark('start: "a" undefined_rule', param="tool_choice"))
    assert "undefined_rule" in str(caught.value) and caught.value.param == "tool_choice"


def test_compiled_grammars_are_cached_and_matchers_independent(compiler: GrammarCompiler) -> None:
    spec = GrammarSpec.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    grammar = compiler.compile(spec)
    assert compiler.compile(GrammarSpec.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})) \
        is grammar
    first, second = grammar.new_matcher(), grammar.new_matcher()
    assert first.consume_token(ord("{"))
    assert not second.is_stopped() and second.validate_tokens([ord("{")]) == 1  # untouched by the first


def test_a_failing_mask_computation_fails_only_the_constrained_requests(compiler: GrammarCompiler,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeopt.engine.constraint import MaskComputer

    def broken(self, constraints):  # type: ignore[no-untyped-def]
        raise RuntimeError("llguidance blew up")

    monkeypatch.setattr(MaskComputer, "compute", broken)
    grammar = compiler.compile(GrammarSpec.json_object())
    engine, _ = make_engine()
    out = generate(engine, {"json": (PROMPT, SamplingParams(max_tokens=5, temperature=0.0, grammar=grammar)),
                            "free": (PROMPT, SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True))})
    assert out["json"].finish_reason == "error" and "llguidance blew up" in (out["json"].error or "")
    assert out["free"].finish_reason == "length" and len(out["free"].token_ids) == 5


def test_masks_are_computed_while_the_runtime_runs_its_forward_pass(compiler: GrammarCompiler,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A row that needs its whole mask (logprobs report the masked distribution) has each step's mask
    computed beside that step's forward pass: a mask taking 30 ms finishes while the (60 ms) forward it
    belongs to is under way, and the engine then barely waits for it."""
    from edgeopt.engine.constraint import MaskComputer

    runtime = FakeRuntime(step_delay_s=0.06)
    begun = [0]  # forward passes begun so far
    forwards_started = []  # ... as seen when each mask computation ends
    real_step, real_compute = runtime.step, MaskComputer.compute

    def step(batch):  # type: ignore[no-untyped-def]
        begun[0] += 1
        return real_step(batch)

    def slow(self, constraints):  # type: ignore[no-untyped-def]
        time.sleep(0.03)
        forwards_started.append(begun[0])
        return real_compute(self, constraints)

    runtime.step = step  # type: ignore[method-assign]
    monkeypatch.setattr(MaskComputer, "compute", slow)
    digits = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 50}
    grammar = compiler.compile(GrammarSpec.json_schema(digits))  # longer than max_tokens: 8 steps
    engine, _ = make_engine(runtime)
    generate(engine, {"json": (PROMPT, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=0,
                                                      grammar=grammar))})
    assert forwards_started == list(range(1, 9))  # mask k ended during forward k, not before it began
    stats = engine.stats()
    assert stats.grammar_steps_total == 8
    assert stats.grammar_wait_seconds_total < 8 * 0.01  # serial, the engine would have waited 8 x 30 ms
