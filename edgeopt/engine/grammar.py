"""Grammars a request can constrain its output to, compiled once per request off the event loop.

Two objects, two moments:

* :class:`GrammarSpec` is what a caller *asks* for: a JSON schema, "any JSON object", a Lark grammar
  (llguidance's dialect, which may embed JSON schemas with ``%json {...}``) or a regular expression.
  Plain data; the server builds it from ``response_format`` and the tool-calling code from ``tools``.
* :class:`Grammar` is the spec compiled for one model's vocabulary by :class:`GrammarCompiler`. It goes
  into :attr:`edgeopt.engine.api.SamplingParams.grammar`; the engine starts one
  :class:`edgeopt.engine.constraint.TokenConstraint` per sequence from it.

Compiling is where a grammar is refused: a schema keyword llguidance does not implement ("not",
"dependentRequired"), an unknown ``format``, a remote ``$ref``, a regex with look-around all raise
:class:`UnsupportedGrammarError` (a 400 naming the feature), never an unconstrained answer. Compiling can
take 1-1000 ms (llguidance drops the GIL for it): callers run it on the prompt worker, never on the loop.

The JSON the constraint allows is compact-with-spaces (``{"a": 1, "b": [2, 3]}``): no free whitespace,
so even a weak model cannot wander into an endless run of newlines and must make progress through the
schema. Schema options (``x-guidance``) may not turn leniency on: an unimplemented keyword is an error.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import llguidance

from edgeopt.engine.grammar_vocab import grammar_tokenizer
from edgeopt.engine.schema_recursion import unending_ref
from edgeopt.errors import RequestError
from edgeopt.runtimes.base import RuntimeInfo, Tokenizer

GrammarKind = Literal["json_schema", "json_object", "lark", "regex"]
JSON_LAYOUT: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_NEVER_LENIENT: dict[str, Any] = {"lenient": False}
ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}
COMPILED_CACHE_SIZE = 64  # agents resend the same tool schemas every turn: compile each once


class UnsupportedGrammarError(RequestError):
    """A schema or grammar the constraint engine cannot enforce (the message names the feature)."""


@dataclass(frozen=True)
class GrammarSpec:
    kind: GrammarKind
    source: str  # JSON text of the schema (json_schema), Lark text (lark), the regex (regex); "" for json_object
    param: str = "response_format"  # the request field a refusal points at

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any], param: str = "response_format") -> GrammarSpec:
        return cls("json_schema", json.dumps(schema, ensure_ascii=False), param)

    @classmethod
    def json_object(cls, param: str = "response_format") -> GrammarSpec:
        return cls("json_object", "", param)

    @classmethod
    def lark(cls, text: str, param: str = "response_format") -> GrammarSpec:
        return cls("lark", text, param)

    @classmethod
    def regex(cls, pattern: str, param: str = "response_format") -> GrammarSpec:
        return cls("regex", pattern, param)

    def llguidance_grammar(self) -> str:
        """The grammar in llguidance's serialized form (not yet checked: see GrammarCompiler.compile)."""
        if self.kind in ("json_schema", "json_object"):
            schema = self.source if self.kind == "json_schema" else json.dumps(ANY_JSON_OBJECT)
            try:
                return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT,
                                                                     overrides=_NEVER_LENIENT)
            except ValueError as exc:  # not a JSON object at all
                raise UnsupportedGrammarError(f"the JSON schema is not a JSON object: {exc}",
                                              "send a JSON schema object", param=self.param) from exc
        if self.kind == "lark":
            return llguidance.LLMatcher.grammar_from_lark(self.source)
        return llguidance.LLMatcher.grammar_from_regex(self.source)


class Grammar:
    """A spec compiled for one vocabulary. Immutable once built; :meth:`new_matcher` gives each sequence
    its own parser state (a cheap copy of the compiled one)."""

    def __init__(self, spec: GrammarSpec, matcher: llguidance.LLMatcher, vocab_size: int,
                 eos_token_ids: frozenset[int]) -> None:
        self.spec = spec
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids  # as llguidance sees them: the mask allows them once the grammar accepts
        self._pristine = matcher  # never advanced: only copied

    def new_matcher(self) -> llguidance.LLMatcher:
        return self._pristine.deep_copy()

    def __repr__(self) -> str:
        return f"Grammar({self.spec.kind}, {len(self.spec.source)} chars)"


class GrammarCompiler:
    """Compiles specs for one served model; thread-safe (prompt workers call it concurrently).

    The llguidance tokenizer (the vocabulary's bytes, ~1 s to build on 150k tokens) is built on first use
    and shared; compiled grammars are kept in a small LRU keyed by the spec."""

    def __init__(self, tokenizer: Tokenizer, info: RuntimeInfo) -> None:
        self._tokenizer = tokenizer
        self._info = info
        self._lock = threading.Lock()
        self._ll_tokenizer: llguidance.LLTokenizer | None = None
        self._cache: OrderedDict[GrammarSpec, Grammar] = OrderedDict()

    @property
    def ll_tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._ll_tokenizer is None:
                if not self._info.eos_token_ids:
                    raise RequestError("constrained decoding needs the model's end-of-generation token, and this "
                                       "bundle declares none", "set eos_token_id in the bundle's config.json",
                                       param="response_format")
                self._ll_tokenizer = grammar_tokenizer(self._tokenizer, self._info)
            return self._ll_tokenizer

    def compile(self, spec: GrammarSpec) -> Grammar:
        with self._lock:
            cached = self._cache.get(spec)
            if cached is not None:
                self._cache.move_to_end(spec)
                return cached
        grammar = self._compile(spec)
        with self._lock:
            self._cache[spec] = grammar
            while len(self._cache) > COMPILED_CACHE_SIZE:
                self._cache.popitem(last=False)
        return grammar

    def _compile(self, spec: GrammarSpec) -> Grammar:
        if spec.kind == "json_schema":
            recursing = unending_ref(json.loads(spec.source))
            if recursing is not None:
                raise UnsupportedGrammarError(recursion_message(recursing, "the JSON schema"), RECURSION_HINT,
                                              param=spec.param)
        serialized = spec.llguidance_grammar()
        tokenizer = self.ll_tokenizer
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(serialized, tokenizer)
        if is_error:
            raise UnsupportedGrammarError(f"the {_describe(spec)} cannot be enforced: {messages[0]}",
                                          _HINTS[spec.kind], param=spec.param)
        matcher = llguidance.LLMatcher(tokenizer, serialized, log_level=0)
        if matcher.is_error():
            raise UnsupportedGrammarError(f"the {_describe(spec)} cannot be enforced: {matcher.get_error()}",
                                          _HINTS[spec.kind], param=spec.param)
        # llguidance builds a grammar lazily: one that admits no output at all ({"$ref": "#"}, a $defs entry
        # naming only itself) fails at its first mask. Computed here, on the prompt worker, that is a 400 now
        # instead of a failure inside the engine's step.
        probe = matcher.deep_copy()
        probe.compute_logit_bias()
        if probe.is_error():
            reason = probe.get_error().splitlines()[0] if probe.get_error() else "no first token"
            raise UnsupportedGrammarError(f"the {_describe(spec)} cannot be enforced: it admits no output at all "
                                          f"(llguidance: {reason})", _NO_OUTPUT_HINTS.get(spec.kind, _HINTS[spec.kind]),
                                          param=spec.param)
        return Grammar(spec, matcher, self._info.vocab_size, frozenset(tokenizer.eos_tokens))


_HINTS: dict[GrammarKind, str] = {
    "json_schema": "remove or rewrite that schema feature (supported: type, properties, required, items, "
                   "prefixItems, enum, const, anyOf/oneOf/allOf, local $ref, string/number/array bounds, "
                   "pattern without look-around, common formats)",
    "json_object": "this is a server bug; please report it",
    "lark": "fix the Lark grammar (llguidance's dialect)",
    "regex": "use a regex without look-around or back-references",
}


RECURSION_HINT = ("make that property optional, or give the recursion a way out (anyOf with a non-recursive "
                  "branch such as null)")


def recursion_message(ref: str, what: str) -> str:
    return (f"{what} cannot be enforced: it admits no finite output, since {ref!r} must contain itself again, "
            "forever (a $ref to itself, or a required property or item that is the schema itself)")


_NO_OUTPUT_HINTS: dict[GrammarKind, str] = {
    "json_schema": "a $ref that only points back to itself ({\"$ref\": \"#\"}, or a $defs entry that is just a "
                   "$ref to itself) matches nothing that can be written: give it a type or properties",
    "lark": "a tool's parameters schema that only points back to itself ({\"$ref\": \"#\"}) matches nothing that "
            "can be written: give it a type or properties (a Lark grammar: make its start rule produce something)",
}


def _describe(spec: GrammarSpec) -> str:
    return {"json_schema": "JSON schema", "json_object": "JSON object grammar", "lark": "Lark grammar",
            "regex": "regular expression"}[spec.kind]
