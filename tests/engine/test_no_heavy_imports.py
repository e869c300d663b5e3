"""The serving path must not pull torch / transformers / optimum in, not even transitively."""

from __future__ import annotations

from tests.fixtures.import_probe import HEAVY, banned_modules_after


def test_engine_and_llama_cpp_runtime_import_without_torch_or_transformers() -> None:
    imports = ("import edgeopt.engine, edgeopt.engine.engine, edgeopt.sizing.budget\n"
               "import edgeopt.engine.grammar, edgeopt.engine.constraint, edgeopt.engine.grammar_vocab\n"
               "import edgeopt.runtimes.llama_cpp, edgeopt.runtimes.llama_cpp.context\n"
               "from edgeopt.runtimes import load_runtime")
    loaded = banned_modules_after(imports, HEAVY, must_load=("edgeopt.engine.engine", "llama_cpp", "llguidance.numpy"))
    assert loaded == [], f"heavy modules imported: {loaded}"


def test_server_and_its_runtimes_import_no_exporters_or_passes() -> None:
    """The standard names edgeopt.exporters and edgeopt.passes too: a device serves a bundle without the tooling
    that made it. The KV sizing reads the planner's memory arithmetic, which must come without them."""
    imports = ("import edgeopt.server.startup.launcher, edgeopt.server.app, edgeopt.server.openai.routes, "
               "edgeopt.server.openai.embeddings\n"
               "import edgeopt.sizing.budget, edgeopt.backends\n"
               "import edgeopt.runtimes.llama_cpp, edgeopt.runtimes.onnxruntime, edgeopt.runtimes.onnxruntime.encoder")
    loaded = banned_modules_after(imports, HEAVY, also_banned_prefix=("edgeopt.exporters", "edgeopt.passes"),
                                  must_load=("edgeopt.server.startup.launcher", "edgeopt.runtimes.onnxruntime.encoder"))
    assert loaded == [], f"serving path imported: {loaded}"
