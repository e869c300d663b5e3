"""POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API over the neutral chat path.

The request is translated into the neutral chat request (responses/translate.py) and prepared like any chat,
so templates, tool calls, constrained decoding and the prefix cache behave the same; only the output is shaped
differently (responses/output.py, responses/reply.py). ``store`` (true by default, as OpenAI's) keeps the
response and its conversation (responses/store.py) for ``previous_response_id`` and GET.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from edgeopt.server.http.callers import owner_name
from edgeopt.server.chat.prepare import prepare_chat
from edgeopt.server.generation.respond import generate
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.responses.reply import ResponseReply
from edgeopt.server.responses.schema import ResponsesRequest
from edgeopt.server.responses.store import conversation_before, store_of, stored
from edgeopt.server.responses.translate import translate
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "generation")
    owner = owner_name(request)
    store, history = conversation_before(state, body.previous_response_id, owner, state.model_name(body.model))
    translation = translate(body, history)
    prepared = await prepare_chat(served, state.prompt_worker, translation.request,
                                  state.settings.parse_special_in_content)
    reply = ResponseReply(body, prepared, store, translation.conversation, owner)
    return await generate(state, request, reply.response_id, prepared, reply, body.stream, prompt_param="input")


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> JSONResponse:
    return JSONResponse(stored(store_of(request.app.state.server), response_id, owner_name(request)).response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> JSONResponse:
    store = store_of(request.app.state.server)
    stored(store, response_id, owner_name(request))
    store.delete(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})
