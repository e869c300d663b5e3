"""How often a request's path re-enters a server file it already left, from its route to Engine.add_request
(issue 40's walk count), for a chat completion, a Responses request, a Messages request and an Ollama chat, each
with a tool, over the fake runtime.

    .venv/bin/python tests/bench/walk_request_path.py        (from a checkout's root; older layouts too)

A re-entry is a *call* into a file under edgeopt/server/ visited before that is not on the logical call stack:
returning to a caller, a coroutine resuming after an await, and the prompt worker's job for the coroutine awaiting
it are not re-entries; a property read is an attribute read; a loop calling the same file again counts once; the
body's parsing before the route is not counted. Prints each walk (re-entries marked *) and the count."""
import asyncio
import dis
import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, ".")
from edgeopt.server.app import create_app
from edgeopt.server.state import ServerSettings
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.conftest import fake_served_model

ROOT = str(Path("edgeopt/server").resolve())
MIDDLEWARE = ("body_limit.py", "auth.py")  # ASGI receive callbacks, not the request's path
events: list[tuple[str, frozenset]] = []  # (file entered, server files on the logical call stack)
recording = [False]
main_stack: list[frozenset] = [frozenset()]
COROUTINE = 0x80 | 0x100 | 0x200


coroutine_frames: list = []
_OPS: dict = {}


def _opname(frame):
    code = frame.f_code
    if code not in _OPS:
        _OPS[code] = {i.offset: i.opname for i in dis.get_instructions(code)}
    return _OPS[code].get(frame.f_lasti, "")


def on_stack(frame):
    files = set()
    frame = frame.f_back
    while frame is not None:
        f = frame.f_code.co_filename
        if f.startswith(ROOT):
            files.add(f[len(ROOT) + 1:])
        frame = frame.f_back
    return files


def prof(frame, event, arg):
    if event != "call" or not recording[0]:
        return
    code = frame.f_code
    f = code.co_filename
    if f.endswith("engine/engine.py") and code.co_name == "add_request":
        recording[0] = False
        finished[0] = True
        events.append(("ENGINE", frozenset(), None))
        return
    if not f.startswith(ROOT) or f.endswith(MIDDLEWARE):
        return
    if code.co_flags & COROUTINE:
        if any(frame is seen for seen in coroutine_frames):
            return  # a suspended coroutine resuming: the reader never left it
        coroutine_frames.append(frame)
    caller = frame.f_back
    if caller is not None and _opname(caller) == "LOAD_ATTR":
        return  # a property read: an attribute to the reader, not a call it follows
    stack = on_stack(frame)
    if threading.current_thread() is threading.main_thread():
        main_stack[0] = frozenset(stack | {f[len(ROOT) + 1:]})
    else:  # the prompt worker runs a job for the coroutine awaiting it: that coroutine's stack is its stack
        stack |= main_stack[0]
    caller_key = (caller.f_code if caller is not None else None)
    events.append((f[len(ROOT) + 1:], frozenset(stack), caller_key))


ROUTE_FILES = {"chat_completions": ("openai/routes.py", "routes_openai.py"),
               "create_response": ("responses/routes.py", "routes_responses.py"),
               "create_message": ("anthropic/routes.py", "routes_messages.py"), "chat": ("ollama/routes.py", "routes_ollama.py")}
finished = [False]


def start_at_route(frame, event, arg):
    code = frame.f_code
    if (event == "call" and not recording[0] and not finished[0] and code.co_name in ROUTE_FILES
            and code.co_filename.endswith(ROUTE_FILES[code.co_name])):
        events.clear()  # the walk starts at the route: the body's parsing before it is not counted
        recording[0] = True
    return prof(frame, event, arg)


def reentries(seq):
    """A re-entry: a call into a file visited before that is not on the call stack (returning is not one);
    a function calling into the same file again (a loop over messages) counts once."""
    seen, counted, count, path = set(), set(), 0, []
    for f, stack, caller in seq:
        if f == "ENGINE":
            break
        if f in seen and f not in stack:
            if (caller, f) not in counted:
                count += 1
                counted.add((caller, f))
                path.append(f"*{f}")
        elif f not in stack:
            path.append(f)
        seen.add(f)
    return count, path


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CASES = {
    "chat": ("/v1/chat/completions", {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "tools": TOOLS}),
    "responses": ("/v1/responses", {"model": "fake-model", "input": "hi", "max_output_tokens": 4, "tools": [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]}),
    "messages": ("/v1/messages", {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]}),
    "ollama": ("/api/chat", {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": False, "tools": TOOLS}),
}
ROUTES = {"chat_completions", "create_response", "create_message", "chat"}
import httpx  # noqa: E402

threading.setprofile(start_at_route)  # before the prompt worker's threads exist
app = create_app(ServerSettings(model_names=("fake-model",)), served=fake_served_model(FakeRuntime()))
out = {}


async def main():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for name, (path, body) in CASES.items():
            await client.post(path, json=body)  # warm
            events.clear()
            finished[0] = False
            sys.setprofile(start_at_route)
            r = await client.post(path, json=body)
            sys.setprofile(None)
            count, walk = reentries(events)
            out[name] = {"status": r.status_code, "reentries": count, "walk": walk}

asyncio.run(main())
for name, result in out.items():
    print(f"{name:<10} HTTP {result['status']}  re-entries {result['reentries']}:  {' > '.join(result['walk'])}")
print(json.dumps({name: result["reentries"] for name, result in out.items()}))
