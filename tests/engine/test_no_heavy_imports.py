"""The serving path must not pull torch / transformers / optimum in, not even transitively."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "optimum")


def _banned_modules_after(imports: str, banned_roots: tuple[str, ...], also_banned_prefix: str = "",
                          must_load: tuple[str, ...] = ()) -> str:
    """Import ``imports`` in a fresh interpreter; return the loaded modules under the banned roots."""
    prefix_check = f" or m.startswith({also_banned_prefix!r})" if also_banned_prefix else ""
    code = (
        "import sys\n"
        f"{imports}\n"
        f"banned = sorted(m for m in sys.modules if m.split('.')[0] in {banned_roots!r}{prefix_check})\n"
        "print(','.join(banned))\n"
        f"assert all(m in sys.modules for m in {must_load!r})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_engine_and_llama_cpp_runtime_import_without_torch_or_transformers() -> None:
    imports = ("import edgeopt.engine, edgeopt.engine.engine, edgeopt.memory_budget\n"
               "import runtimes.llama_cpp, runtimes.llama_cpp.context\n"
               "from runtimes import load_runtime")
    loaded = _banned_modules_after(imports, HEAVY, must_load=("edgeopt.engine.engine", "llama_cpp"))
    assert loaded == "", f"heavy modules imported: {loaded}"


def test_server_and_its_runtimes_import_no_exporters_or_passes() -> None:
    """The standard names exporters and edgeopt.passes too: a device serves a bundle without the tooling
    that made it. The KV sizing reads the planner's memory arithmetic, which must come without them."""
    imports = ("import edgeopt.server.launcher, edgeopt.server.app, edgeopt.server.routes_openai, "
               "edgeopt.server.embeddings\n"
               "import edgeopt.memory_budget, edgeopt.backends\n"
               "import runtimes.llama_cpp, runtimes.onnxruntime, runtimes.onnxruntime.encoder")
    loaded = _banned_modules_after(imports, (*HEAVY, "exporters"), also_banned_prefix="edgeopt.passes",
                                   must_load=("edgeopt.server.launcher", "runtimes.onnxruntime.encoder"))
    assert loaded == "", f"serving path imported: {loaded}"
