"""The import graph of the installed packages (edgeopt, exporters, runtimes, profiles), read with ``ast``:
no cycles, and the serving path (engine, server, llama.cpp and ONNX Runtime runtimes) imports none of the
model-making tooling (exporters, edgeopt.passes) nor torch/transformers.

Lazy imports (inside a function) count as edges like module-level ones: they run as soon as the function
does, so a lazy import only defers a cycle or a heavy dependency, it does not remove it. Imports under
``if TYPE_CHECKING:`` never run, so they are not edges for what the serving path loads; they are edges for
the cycle check: two modules that name each other's types are one design split across two files, whichever
side hides its import (a reader, and a type checker, must load both to read either). An edge goes to the deepest
module named: ``from edgeopt.paged_batching import paged_compat`` is an edge to ``edgeopt.paged_batching.paged_compat``;
``from edgeopt.profiles.device import GIB`` is an edge to ``edgeopt.profiles.device`` only (its package's ``__init__`` runs
first, but it is a parent, not a dependency the importer chose).

Rooms that sit below another may not name it at all, not even for a type: runtimes sit below the engine
(the engine drives them; an engine a runtime's model runs under lives in edgeopt.paged_batching), so no
module of ``runtimes`` imports ``edgeopt.engine``, under ``if TYPE_CHECKING:`` included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edgeopt", "exporters", "runtimes", "profiles")  # folders; all but edgeopt/ install inside edgeopt (setup.py)
SERVING = ("edgeopt.engine", "edgeopt.server", "edgeopt.runtimes.llama_cpp", "edgeopt.runtimes.onnxruntime")
FORBIDDEN_FOR_SERVING = ("edgeopt.exporters", "edgeopt.passes", "torch", "transformers", "optimum")
# room -> rooms below it must never import, type-only imports included
NEVER_UPWARD = {
    "edgeopt.runtimes": ("edgeopt.engine", "edgeopt.server", "edgeopt.paged_batching"),
    # Measuring sits below the passes and the exporters (they measure with it); evaluation sits above them.
    "edgeopt.measuring": ("edgeopt.passes", "edgeopt.exporters", "edgeopt.evaluation", "edgeopt.optimize"),
    "edgeopt.passes": ("edgeopt.evaluation", "edgeopt.optimize"),
}


def module_files(root: Path = ROOT) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            parts = parts if package == "edgeopt" else ("edgeopt", *parts)  # the installed name
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[name] = path
    return files


def imported_names(path: Path, module: str, type_only_too: bool = False) -> set[str]:
    """Every module name an import statement anywhere in the file asks for (module- and function-level;
    with ``type_only_too`` also those under ``if TYPE_CHECKING:``)."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in (ast.walk(tree) if type_only_too else _runtime_nodes(tree)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """All nodes except those under ``if TYPE_CHECKING:`` (its body; an ``else:`` runs and is kept)."""
    nodes, todo = [], [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def import_graph(files: dict[str, Path], type_only_too: bool = False) -> dict[str, set[str]]:
    """module -> modules it imports: internal edges to the deepest known module, external ones by name
    (with ``type_only_too``, imports under ``if TYPE_CHECKING:`` are edges as well)."""
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges: set[str] = set()
        for name in imported_names(path, module, type_only_too):
            if name.split(".")[0] == "edgeopt":
                if name in files and name != module:
                    edges.add(name)
            elif name:
                edges.add(name)
        # "from a.b import c" adds both a.b and a.b.c; when c is a module, a.b is only its parent package.
        graph[module] = {e for e in edges if not any(o.startswith(e + ".") for o in edges if o in files)}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path a -> ... -> a, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif nxt in graph and state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt in graph and not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module reachable from ``start`` -> the module that imports it (to print the chain)."""
    parent: dict[str, str] = {start: ""}
    todo = [start]
    while todo:
        here = todo.pop()
        for nxt in graph.get(here, ()):
            if nxt not in parent:
                parent[nxt] = here
                todo.append(nxt)
    return parent


def chain(parent: dict[str, str], end: str) -> str:
    steps = [end]
    while parent[steps[-1]]:
        steps.append(parent[steps[-1]])
    return " -> ".join(reversed(steps))


def forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN_FOR_SERVING)


def serving_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module in sorted(graph):
        if any(module == s or module.startswith(s + ".") for s in SERVING):
            parent = reachable(graph, module)
            found += [chain(parent, bad) for bad in sorted(parent) if forbidden(bad)][:1]
    return found


def upward_imports(files: dict[str, Path]) -> list[str]:
    """``module -> name`` for every import (type-only ones too) from a room into a room above it."""
    found = []
    for module, path in sorted(files.items()):
        above = next((rooms for room, rooms in NEVER_UPWARD.items() if module == room or module.startswith(room + ".")),
                     ())
        found += [f"{module} -> {name}" for name in sorted(imported_names(path, module, type_only_too=True))
                  if any(name == r or name.startswith(r + ".") for r in above)]
    return found


def test_no_room_names_a_room_above_it_even_for_types() -> None:
    found = upward_imports(module_files())
    assert found == [], "a room names a room above it:\n" + "\n".join(found)


def test_the_import_graph_has_no_cycle_type_only_imports_included() -> None:
    cycle = find_cycle(import_graph(module_files(), type_only_too=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_serving_path_never_reaches_the_tooling_or_torch() -> None:
    violations = serving_violations(import_graph(module_files()))
    assert violations == [], "the serving path imports what it must not:\n" + "\n".join(violations)


def test_the_checker_sees_lazy_imports_cycles_and_forbidden_edges(tmp_path: Path) -> None:
    """The checks themselves, on a made-up tree: a cycle closed by a function-level import, and an
    engine module reaching torch through a lazily imported helper, are both caught."""
    (tmp_path / "edgeopt" / "engine").mkdir(parents=True)
    (tmp_path / "exporters").mkdir()
    (tmp_path / "runtimes").mkdir()
    (tmp_path / "profiles").mkdir()
    for package in ("edgeopt", "edgeopt/engine", "exporters", "runtimes", "profiles"):
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "exporters" / "a.py").write_text("from edgeopt.exporters.b import thing\n")
    (tmp_path / "exporters" / "b.py").write_text("def thing():\n    from edgeopt.exporters import a\n")
    (tmp_path / "edgeopt" / "engine" / "core.py").write_text("def f():\n    from edgeopt.runtimes.helper import g\n")
    (tmp_path / "runtimes" / "helper.py").write_text("def g():\n    import torch.nn\n")
    (tmp_path / "runtimes" / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                    "    import torch\n    from edgeopt.exporters import a\n")
    (tmp_path / "edgeopt" / "engine" / "types.py").write_text("from edgeopt.runtimes import typed\n")
    graph = import_graph(module_files(tmp_path))
    assert find_cycle(graph) in (["edgeopt.exporters.a", "edgeopt.exporters.b", "edgeopt.exporters.a"],
                                 ["edgeopt.exporters.b", "edgeopt.exporters.a", "edgeopt.exporters.b"])
    assert serving_violations(graph) == ["edgeopt.engine.core -> edgeopt.runtimes.helper -> torch.nn"]
    (tmp_path / "runtimes" / "annotated.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                        "    from edgeopt.engine.api import EngineConfig\n")
    assert upward_imports(module_files(tmp_path)) == ["edgeopt.runtimes.annotated -> edgeopt.engine.api",
                                                      "edgeopt.runtimes.annotated -> edgeopt.engine.api.EngineConfig"]


def test_the_cycle_check_sees_a_cycle_closed_by_a_type_only_import(tmp_path: Path) -> None:
    """api <-> stream where stream names api's type under ``if TYPE_CHECKING:``: invisible to the runtime
    graph (nothing loops when importing), a cycle for the check."""
    for package in ("edgeopt", "edgeopt/engine", "exporters", "runtimes", "profiles"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "edgeopt" / "engine" / "api.py").write_text("from edgeopt.engine.stream import Stream\n")
    (tmp_path / "edgeopt" / "engine" / "stream.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from edgeopt.engine.api import Output\n")
    files = module_files(tmp_path)
    assert find_cycle(import_graph(files)) is None
    assert find_cycle(import_graph(files, type_only_too=True)) == [
        "edgeopt.engine.api", "edgeopt.engine.stream", "edgeopt.engine.api"]
