"""Count the optimize walk: which of edgeopt's files a plain ``edgeopt optimize`` passes through, in order, from the
command to the exporter's first write, and how often it comes back to a file it had left (issue 59).

How it counts (the same for any version of the code, so two versions compare):

- a profiler hook (``sys.setprofile``) sees every Python call from the ``optimize`` command's function until the GGUF
  exporter calls ``convert_checkpoint`` (the write; the hook stops the run there);
- only functions in edgeopt's own files count (``edgeopt/``, and ``exporters/``, ``runtimes/``, ``profiles/``, which
  install inside it); each function counts once, at its first call, so a loop over tensors or candidates is one
  stop, not thousands;
- the walk is that ordered list of first calls, as files; consecutive calls in one file are one *stop*; a stop in a
  file the walk had already left is a *return*.

Usage: ``python scripts/optimize_walk.py CHECKPOINT_DIR [--show]`` (a fresh ``EDGEOPT_CACHE`` is used, so the export
runs). Prints stops, distinct files, returns, and the files returned to more than twice.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from pathlib import Path


class WalkEnded(Exception):
    """Raised in place of the exporter's write: the walk ends there."""


def edgeopt_roots() -> tuple[str, ...]:
    import edgeopt
    import edgeopt.exporters
    import edgeopt.profiles
    import edgeopt.runtimes
    return tuple(str(Path(p).resolve()) + os.sep for m in (edgeopt, edgeopt.exporters, edgeopt.runtimes, edgeopt.profiles)
                 for p in m.__path__)


def record(checkpoint: Path) -> list[tuple[str, str, bool]]:
    """(file, function, not a leaf) of each edgeopt function in order of its first call, from the command to the
    write; a leaf is a function whose first call made no further call into edgeopt (a look-up)."""
    from typer.testing import CliRunner

    from edgeopt.exporters.gguf import exporter as gguf_exporter
    try:
        from edgeopt.cli.app import app  # after issue 59
    except ImportError:
        from edgeopt.cli import app  # type: ignore[no-redef,attr-defined]  # before

    roots = edgeopt_roots()
    files: dict[object, str | None] = {}  # code object -> its short file name, None when not ours
    seen: set[object] = set()
    walk: list[tuple[str, str, bool]] = []  # (file, function, calls further into ours) in order of first call
    open_calls: list[int | None] = []  # per live frame of ours: its index in walk at its first call, else None

    def ours(code: object) -> str | None:
        if code not in files:
            path = str(Path(code.co_filename).resolve())  # type: ignore[attr-defined]
            files[code] = next((short_name(path, root) for root in roots if path.startswith(root)), None)
        return files[code]

    def hook(frame, event, arg):  # noqa: ANN001 - the profiler's signature
        if event not in ("call", "return"):
            return
        file = ours(frame.f_code)
        if file is None:
            return
        if event == "return":
            if open_calls:
                open_calls.pop()
            return
        for index in reversed(open_calls):  # the nearest caller of ours seen first is not a leaf
            if index is not None:
                walk[index] = (*walk[index][:2], True)
                break
        if frame.f_code in seen:
            open_calls.append(None)
            return
        seen.add(frame.f_code)
        walk.append((file, frame.f_code.co_name, False))
        open_calls.append(len(walk) - 1)

    def stop_at_write(*args, **kwargs):  # noqa: ANN002, ANN003
        raise WalkEnded

    gguf_exporter.convert_checkpoint = stop_at_write
    out = Path(tempfile.mkdtemp(prefix="walk-")) / "bundle"
    sys.setprofile(hook)
    try:
        result = CliRunner().invoke(app, ["optimize", str(checkpoint), "--target", "raspberry-pi", "--format", "gguf",
                                          "--quant", "Q8_0", "--no-eval", "-o", str(out)])
    finally:
        sys.setprofile(None)
    if not isinstance(result.exception, WalkEnded):
        raise SystemExit(f"the optimize did not reach the exporter's write: {result.output}\n{result.exception!r}")
    start = next(i for i, (_, name, _) in enumerate(walk) if name == "optimize")
    return walk[start:]


def short_name(path: str, root: str) -> str:
    package = Path(root).name
    rel = path[len(root):]
    return rel if package == "edgeopt" else f"{package}/{rel}"


def count(walk: list[tuple[str, str, bool]], leaves: bool) -> tuple[list[str], int, collections.Counter[str]]:
    stops: list[str] = []
    for file, _, calls_on in walk:
        if not (leaves or calls_on):
            continue
        if not stops or stops[-1] != file:
            stops.append(file)
    returns: collections.Counter[str] = collections.Counter()
    for i, file in enumerate(stops):
        if file in stops[:i]:
            returns[file] += 1
    return stops, sum(returns.values()), returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--show", action="store_true", help="print the stops in order")
    args = parser.parse_args()
    os.environ["EDGEOPT_CACHE"] = tempfile.mkdtemp(prefix="walk-cache-")
    walk = record(args.checkpoint)
    for title, leaves in (("every function", True), ("without leaves (look-ups that call nothing of ours)", False)):
        stops, returns, per_file = count(walk, leaves)
        print(f"{title}: stops {len(stops)}, files {len(set(stops))}, returns {returns}")
        print("  most returned to:", ", ".join(f"{f} {n}" for f, n in per_file.most_common(8)))
        if args.show:
            print("  walk:", " > ".join(stops))


if __name__ == "__main__":
    main()
