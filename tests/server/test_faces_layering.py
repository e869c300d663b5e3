"""The server's rooms, read from the code's imports (type-only imports included): the neutral chat core and
every shared module import no API face, and no face imports another. A face is a package registered in
edgeopt/server/faces.py; everything else under edgeopt/server/ is shared (the chat core, the generate path,
state, errors, auth, the launcher), except the two files that assemble faces (faces.py, app.py)."""

from __future__ import annotations

from pathlib import Path

from edgeopt.server.face import Face
from edgeopt.server.faces import FACES
from tests.test_layering import imported_names, module_files

ASSEMBLERS = ("edgeopt.server.faces", "edgeopt.server.app")


def face_of(module: str) -> str | None:
    """The face package a module belongs to (None: a shared module)."""
    parts = module.split(".")
    names = {face.name for face in FACES}
    return parts[2] if len(parts) > 2 and parts[:2] == ["edgeopt", "server"] and parts[2] in names else None


def room_violations(files: dict[str, Path]) -> list[str]:
    found = []
    for module, path in sorted(files.items()):
        if not module.startswith("edgeopt.server") or module in ASSEMBLERS:
            continue
        home = face_of(module)
        reached: dict[str, str] = {}  # face -> the first name imported from it
        for name in sorted(imported_names(path, module, type_only_too=True)):
            other = face_of(name)
            if other is not None and other != home:
                reached.setdefault(other, name)
        found += [f"{module} ({f'{home} face' if home else 'shared'}) -> {name} ({other} face)"
                  for other, name in sorted(reached.items())]
    return found


def test_the_core_imports_no_face_and_no_face_imports_another() -> None:
    found = room_violations(module_files())
    assert found == [], "a room imports a face it must not:\n" + "\n".join(found)


def test_every_registered_face_is_a_package_of_its_own_name() -> None:
    files = module_files()
    for face in FACES:
        assert f"edgeopt.server.{face.name}" in files, f"face {face.name!r} is not the package edgeopt/server/{face.name}/"
        assert face.routers, f"face {face.name!r} serves no bundle kind"


def test_the_checker_catches_a_face_importing_another(tmp_path: Path) -> None:
    server = tmp_path / "edgeopt" / "server"
    for package in ("openai", "ollama", "chat"):
        (server / package).mkdir(parents=True)
        (server / package / "__init__.py").write_text("")
    for folder in ("exporters", "runtimes", "profiles"):
        (tmp_path / folder).mkdir()
    (tmp_path / "edgeopt" / "__init__.py").write_text("")
    (server / "__init__.py").write_text("")
    (server / "ollama" / "reply.py").write_text("from edgeopt.server.openai.format import usage\n")
    (server / "chat" / "prepare.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                "    from edgeopt.server.ollama import reply\n")
    assert room_violations(module_files(tmp_path)) == [
        "edgeopt.server.chat.prepare (shared) -> edgeopt.server.ollama (ollama face)",
        "edgeopt.server.ollama.reply (ollama face) -> edgeopt.server.openai.format (openai face)"]


def test_a_face_is_a_package_and_one_registration(tmp_path: Path) -> None:
    """What adding a face takes: a router in a package, one Face, and passing it with the others. A minimal
    health-only face answers beside the real ones, with no shared file touched."""
    from fastapi import APIRouter
    from fastapi.testclient import TestClient

    from edgeopt.server.app import create_app
    from edgeopt.server.state import ServedModel, ServerSettings

    router = APIRouter()

    @router.get("/v1beta/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    minimal = Face("minimal", routers={"causal-lm": (router,)}, error_paths=("/v1beta/",),
                   error_body=lambda status, message, kind, param, code: {"minimal_error": message})
    served = ServedModel(context_length=16, tokenizer=None)  # type: ignore[arg-type]
    app = create_app(ServerSettings(model_names=("m",)), served=served, faces=(*FACES, minimal))
    with TestClient(app) as client:
        assert client.get("/v1beta/health").json() == {"status": "ok"}
        assert client.get("/v1beta/nothing").json() == {"minimal_error": "GET /v1beta/nothing: Not Found"}
        assert "error" in client.get("/v1/nothing").json()  # the server's default shape elsewhere


def test_every_route_of_every_face_reads_its_body_with_the_limits() -> None:
    from fastapi.routing import APIRoute

    from edgeopt.server import routes_admin
    from edgeopt.server.http.json_body import CheckedJsonRoute

    routers = [router for face in FACES for kind in face.routers.values() for router in kind] + [routes_admin.api]
    unchecked = [route.path for router in routers for route in router.routes
                 if isinstance(route, APIRoute) and not isinstance(route, CheckedJsonRoute)]
    assert unchecked == [], f"routes that parse JSON without edgeopt.server.http.json_body's limits: {unchecked}"
