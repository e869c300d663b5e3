"""``python -m edgeopt.demo``: build (or find) the cached demo model and print its directory.

``make test`` and ``.ci/run`` call this before pytest so the one-time training shows up as its own
timed step instead of inside the first test that asks for the ``demo_model_dir`` fixture.
"""

from __future__ import annotations

import sys

from edgeopt.demo.train import ensure_demo_model
from edgeopt.errors import EdgeoptError


def main() -> int:
    try:
        path = ensure_demo_model(report=lambda line: print(line, file=sys.stderr, flush=True))
    except EdgeoptError as exc:
        print(f"error: {exc.message}\n  fix: {exc.hint}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
