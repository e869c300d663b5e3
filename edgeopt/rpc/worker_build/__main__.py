"""``python -m edgeopt.rpc.worker_build [EXTRA_TARGET...]``: build the RPC worker ahead of its first use (what
``make rpc-worker`` runs, through scripts/build_rpc_worker.sh), with more targets of the same build when named
(llama-server for the benchmarks). Prints the directory holding the binaries on its last line of stdout."""

from __future__ import annotations

import sys

from edgeopt.errors import EdgeoptError
from edgeopt.rpc.worker_build.builder import ensure_built


def main(argv: list[str]) -> int:
    try:
        bins = ensure_built(tuple(argv))
    except EdgeoptError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  fix: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    print(bins)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
