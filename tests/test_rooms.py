"""The house does not regrow: a module directly in ``edgeopt/`` or ``edgeopt/server/`` is one of the few listed here as
shared by every room; anything else belongs in a package named for its job (docs/architecture.md, "Where things
live"). A new loose module fails here until it moves into a room, or is argued onto the list."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Shared by the rooms below them; each line says why it stays loose.
EDGEOPT_SHARED = {
    "__init__.py": "the package",
    "errors.py": "the one exception hierarchy every room raises",
    "backends.py": "the format registry every room looks a format up in",
    "byte_sizes.py": "sizes as users write them, read by the CLI, planning and the server",
    "progress.py": "progress bars of every long step (conversion, calibration, evaluation)",
    "speculation_modes.py": "what the CLI, planning and the engine read of speculation without importing the engine",
}
SERVER_SHARED = {
    "__init__.py": "the package",
    "app.py": "create_app: the FastAPI application",
    "state.py": "what one running server holds",
    "errors.py": "every failure as the server's JSON body",
    "metrics.py": "the server's Prometheus registry",
    "face.py": "what an API face is to the server",
    "faces.py": "the faces this server has, one line each",
    "routes_admin.py": "health, metrics, models: the routes no face owns",
    "served_model.py": "a loaded model ready to answer, what every face serves from",
}
LIMITS = {"edgeopt": 8, "edgeopt/server": 10}


def loose_modules(folder: Path) -> set[str]:
    return {path.name for path in folder.glob("*.py")}


def test_only_shared_modules_are_loose_in_edgeopt() -> None:
    unlisted = loose_modules(ROOT / "edgeopt") - EDGEOPT_SHARED.keys()
    assert unlisted == set(), (f"loose modules in edgeopt/ that are not shared: {sorted(unlisted)}; "
                               "fix: move each into the package named for its job (docs/architecture.md)")


def test_only_shared_modules_are_loose_in_the_server() -> None:
    unlisted = loose_modules(ROOT / "edgeopt" / "server") - SERVER_SHARED.keys()
    assert unlisted == set(), (f"loose modules in edgeopt/server/ that are not shared: {sorted(unlisted)}; fix: move "
                               "each into http/, batching/, startup/ or the face or core it belongs to")


def test_the_shared_lists_stay_short_and_true() -> None:
    for folder, shared in (("edgeopt", EDGEOPT_SHARED), ("edgeopt/server", SERVER_SHARED)):
        assert len(shared) <= LIMITS[folder], f"{folder}: {len(shared)} shared modules, at most {LIMITS[folder]}"
        missing = shared.keys() - loose_modules(ROOT / folder)
        assert missing == set(), f"{folder}: listed as shared but gone: {sorted(missing)} (drop them from the list)"


def test_the_check_sees_a_new_loose_module(tmp_path: Path) -> None:
    (tmp_path / "errors.py").write_text("")
    (tmp_path / "plan_extra.py").write_text("")
    assert loose_modules(tmp_path) - EDGEOPT_SHARED.keys() == {"plan_extra.py"}
