"""House rules on the sources' shape (issue 59): small files with one responsibility. No source file of the
installed packages is over MAX_LINES lines unless it is one class doing one thing, named below with the reason;
the engine's own file, the serving core's thread and loop, stays under ENGINE_MAX_LINES (what a step does lives in
the modules it calls: edgeopt/engine/scheduler.py, step_sampler.py, inbox.py, speculation/)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edgeopt", "exporters", "runtimes", "profiles")
MAX_LINES = 300
ENGINE_MAX_LINES = 250
# path -> why it may be longer: one class doing one thing, said in a line. Keep it short.
LONGER_ALLOWED: dict[str, str] = {}


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_source_file_is_over_the_limit_unless_allowed_with_a_reason() -> None:
    over = {str(path.relative_to(ROOT)): line_count(path)
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            if line_count(path) > MAX_LINES}
    unexplained = {path: lines for path, lines in over.items() if path not in LONGER_ALLOWED}
    assert not unexplained, (f"over {MAX_LINES} lines: {unexplained}; split it by responsibility, or (one class doing "
                             "one thing) add it to LONGER_ALLOWED with the reason")
    stale = sorted(set(LONGER_ALLOWED) - set(over))
    assert not stale, f"no longer over {MAX_LINES} lines (or gone): drop them from LONGER_ALLOWED: {stale}"
    assert all(reason.strip() for reason in LONGER_ALLOWED.values())


def test_the_engine_file_stays_small() -> None:
    lines = line_count(ROOT / "edgeopt" / "engine" / "engine.py")
    assert lines < ENGINE_MAX_LINES, (f"edgeopt/engine/engine.py has {lines} lines: move a responsibility into a "
                                      "module named for it")
