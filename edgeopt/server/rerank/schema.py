"""The rerank request as llama-server, Jina and Cohere (v1 and v2) accept it; anything else is refused by name."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from edgeopt.server.http.text_fields import Text

# Documents in one request (Cohere's documented maximum); their pairs are scored in one go.
MAX_DOCUMENTS = 1000


class RerankDocument(BaseModel):
    """A document as an object (Jina's and Cohere v1's ``{"text": ...}``)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    text: Text


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: Text
    query: Annotated[Text, Field(min_length=1)]
    documents: Annotated[list[Text | RerankDocument], Field(max_length=MAX_DOCUMENTS)]
    # Results to return, best first; more than there are documents returns them all (as Cohere and
    # llama-server do). None: every document.
    top_n: Annotated[int, Field(ge=1, le=MAX_DOCUMENTS)] | None = None
    return_documents: bool = False

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]
