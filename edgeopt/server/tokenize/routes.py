"""POST /tokenize, POST /detokenize and GET /tokenizer_info: the served model's own tokenizer over HTTP, in
llama-server's shapes (``content``, ``add_special``, ``parse_special``, ``with_pieces``) and vLLM's
(``prompt``, ``add_special_tokens``; /detokenize answers both ``content`` and ``prompt``), which is what
lm-evaluation-harness's remote tokenizer probes and uses, so it scores with exactly the server's ids."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from edgeopt.errors import RequestError
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.state import ServedModel, ServerState
from edgeopt.server.http.text_fields import Text

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)
MAX_DETOKENIZE = 1 << 20


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: Text | None = None  # llama-server
    prompt: Text | None = None  # vLLM
    model: Text | None = None
    add_special: bool | None = None  # llama-server's name (default false there)
    add_special_tokens: bool | None = None  # vLLM's name (default true there)
    parse_special: bool = True  # control-token text (<|im_start|>) becomes the control token
    with_pieces: bool = False

    @model_validator(mode="after")
    def _one_text(self) -> TokenizeRequest:
        if (self.content is None) == (self.prompt is None):
            raise ValueError("send the text as exactly one of content (llama-server) or prompt (vLLM)")
        return self

    def text(self) -> str:
        return self.content if self.content is not None else self.prompt  # type: ignore[return-value]

    def adds_special(self) -> bool:
        """Each API's own default: llama-server adds no BOS unless asked, vLLM adds it unless told not to."""
        if self.add_special is not None:
            return self.add_special
        if self.add_special_tokens is not None:
            return self.add_special_tokens
        return self.prompt is not None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[int] = Field(max_length=MAX_DETOKENIZE)
    model: Text | None = None


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "generation")
    tokenizer = served.tokenizer
    ids = await state.prompt_worker.run(
        lambda: tokenizer.encode(body.text(), add_special=body.adds_special(), parse_special=body.parse_special))
    tokens: list[Any] = [{"id": i, "piece": _piece(tokenizer.token_bytes(i))} for i in ids] if body.with_pieces else ids
    return JSONResponse({"tokens": tokens, "count": len(ids), "max_model_len": served.context_length})


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> JSONResponse:
    served = await request.app.state.server.model(body.model, "generation")
    vocab = served.runtime.info.vocab_size
    bad = [t for t in body.tokens if not 0 <= t < vocab]
    if bad:
        raise RequestError(f"tokens {bad[:5]} are outside the vocabulary (0..{vocab - 1})", "send this model's token ids",
                           param="tokens")
    text = served.tokenizer.decode(body.tokens)
    return JSONResponse({"content": text, "prompt": text})


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request, model: str | None = None) -> JSONResponse:
    """The tokenizer of ``?model=`` (lm-evaluation-harness asks without: the first model)."""
    served = await request.app.state.server.model(model, "generation")
    return JSONResponse({"eos_token": _special_text(served, "eos"), "bos_token": _special_text(served, "bos"),
                         "pad_token": None, "model_max_length": served.context_length,
                         "vocab_size": served.runtime.info.vocab_size,
                         "chat_template": served.chat_template.source if served.chat_template else None})


def _piece(raw: bytes) -> str | list[int]:
    """llama-server's piece: the text when the bytes are whole UTF-8, else the bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def _special_text(served: ServedModel, which: str) -> str | None:
    """The text of the model's end (or beginning) token, as the tokenizer reads it back into that token."""
    template = served.chat_template
    named = (template.eos_token if which == "eos" else template.bos_token) if template else ""
    if named:
        return named
    info = served.runtime.info
    ids = sorted(info.eos_token_ids) if which == "eos" else [info.bos_token_id] if info.bos_token_id is not None else []
    by_id = {token_id: text for text, token_id in served.tokenizer.control_token_ids().items()}
    return next((by_id[i] for i in ids if i in by_id), None)
