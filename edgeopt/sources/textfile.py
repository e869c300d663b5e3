"""Reading the user's plain-text data files (eval, distillation, calibration) with errors that say the fix."""

from __future__ import annotations

from pathlib import Path

from edgeopt.errors import EdgeoptError


def read_text_file(path: Path | str, what: str, flag: str, error: type[EdgeoptError]) -> str:
    """The file's UTF-8 text; ``what`` names it in errors ("evaluation data"), ``flag`` is the option to fix."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} does not exist", f"pass an existing UTF-8 text file to {flag}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                    f"convert it to UTF-8 plain text, or pass another file to {flag}") from exc
    if not text.strip():
        raise error(f"{what} {path} is empty", f"pass a file with a few paragraphs of text to {flag}")
    return text
