"""The serving path must not pull torch / transformers / optimum in, not even transitively."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "optimum")


def test_engine_and_llama_cpp_runtime_import_without_torch_or_transformers() -> None:
    code = (
        "import sys\n"
        "import edgeopt.engine, edgeopt.engine.engine, edgeopt.engine.memory\n"
        "import runtimes.llama_cpp, runtimes.llama_cpp.context\n"
        "from runtimes import load_runtime\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(','.join(heavy))\n"
        "assert 'edgeopt.engine.engine' in sys.modules and 'llama_cpp' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"heavy modules imported: {result.stdout.strip()}"


def test_server_and_its_runtimes_import_no_exporters_or_passes() -> None:
    """The standard names exporters and edgeopt.passes too: a device serves a bundle without the tooling
    that made it. The KV sizing reads the planner's memory arithmetic, which must come without them."""
    code = (
        "import sys\n"
        "import edgeopt.server.launcher, edgeopt.server.app, edgeopt.server.routes_openai, edgeopt.server.embeddings\n"
        "import edgeopt.engine.memory, runtimes.llama_cpp, runtimes.onnxruntime, runtimes.onnxruntime.encoder\n"
        f"banned = sorted(m for m in sys.modules if m.split('.')[0] in {(*HEAVY, 'exporters')!r} "
        "or m.startswith('edgeopt.passes'))\n"
        "print(','.join(banned))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"serving path imported: {result.stdout.strip()}"
