"""An output format (a JSON object, or JSON following a schema) -> the grammar the engine enforces
(edgeopt.engine.grammar).

A schema is always enforced, never only suggested, so a client never receives output that silently ignores
it. A schema feature the constraint engine cannot enforce is a 400 naming it (raised when the grammar is
compiled: chat/render.py, on the prompt worker, before the request is queued).
"""

from __future__ import annotations

from edgeopt.engine.grammar import GrammarSpec
from edgeopt.server.chat.request import OutputFormat


def output_grammar_spec(output_format: OutputFormat | None) -> GrammarSpec | None:
    """The grammar the format asks for (None: free text). Cheap: no compilation here."""
    if output_format is None:
        return None
    if output_format.kind == "json_object" or output_format.schema is None:
        return GrammarSpec.json_object(param=output_format.param)
    return GrammarSpec.json_schema(dict(output_format.schema), param=output_format.param)
