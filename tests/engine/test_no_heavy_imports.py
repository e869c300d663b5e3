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
