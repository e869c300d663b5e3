"""Every file or folder docs/architecture.md names exists: a path from the repository root, from edgeopt/, or a
file name found once under the installed packages (``grammar_vocab.py``). A room that moves must move the map."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edgeopt", "exporters", "runtimes", "profiles")
NAMED = re.compile(r"`([A-Za-z0-9_./*<>-]+(?:\.py|/))`")


def named_paths(text: str) -> list[str]:
    return sorted({name for name in NAMED.findall(text) if "<" not in name and name != "/"})


def exists(name: str) -> bool:
    for base in (ROOT, ROOT / "edgeopt", ROOT / "edgeopt" / "server"):
        if list(base.glob(name.rstrip("/"))):
            return True
    if "/" in name.rstrip("/"):  # a partial path: some package holds it
        return any(list((ROOT / package).rglob(name.rstrip("/"))) for package in PACKAGES)
    return sum(len(list((ROOT / package).rglob(name))) for package in PACKAGES) >= 1


def test_every_path_the_architecture_names_exists() -> None:
    missing = [name for name in named_paths((ROOT / "docs" / "architecture.md").read_text()) if not exists(name)]
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_check_catches_a_missing_file() -> None:
    assert named_paths("`server/tool_output.py` and `engine/` and `edgeopt/<face>/`") == [
        "engine/", "server/tool_output.py"]
    assert not exists("server/tool_output.py") and exists("engine/") and exists("chat/tools/parser.py")
