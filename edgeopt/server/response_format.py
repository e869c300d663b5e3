"""``response_format`` -> the grammar the engine enforces (edgeopt.engine.grammar).

``{"type": "text"}`` (or no field) leaves the output free. ``json_object`` constrains it to one JSON
object; ``json_schema`` to its ``schema``, whatever ``strict`` says: a schema is always enforced, never
only suggested, so a client never receives output that silently ignores it. A schema feature the
constraint engine cannot enforce is a 400 naming it (raised when the grammar is compiled, on the prompt
worker).
"""

from __future__ import annotations

from edgeopt.engine.grammar import Grammar, GrammarSpec
from edgeopt.errors import RequestError
from edgeopt.server.schemas import ResponseFormat
from edgeopt.server.state import ServedModel


def response_grammar_spec(response_format: ResponseFormat | None) -> GrammarSpec | None:
    """The grammar ``response_format`` asks for (None: free text). Cheap: no compilation here."""
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return GrammarSpec.json_object()
    spec = response_format.json_schema
    if spec is None:
        raise RequestError('response_format {"type": "json_schema"} has no "json_schema" object',
                           'send {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}',
                           param="response_format.json_schema")
    if spec.schema_ is None:  # a name without a schema: any JSON object
        return GrammarSpec.json_object(param="response_format.json_schema")
    return GrammarSpec.json_schema(spec.schema_, param="response_format.json_schema.schema")


def compile_grammar(served: ServedModel, spec: GrammarSpec | None) -> Grammar | None:
    """Compile for the served model (1-1000 ms, GIL released): call it on the prompt worker."""
    return None if spec is None else served.grammars.compile(spec)
