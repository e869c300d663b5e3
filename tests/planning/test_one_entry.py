"""Planning has one entry (issue 59): outside edgeopt/planning nothing imports a planning module, only the package
(``edgeopt.planning.plan_for`` and the types it takes and returns); planning imports neither the optimize pipeline
nor the engine; and it reaches no tooling, so the serving path may plan through it."""

from __future__ import annotations

from tests.test_layering import import_graph, imported_names, module_files

PLANNING = "edgeopt.planning"


def inside(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def test_nothing_outside_planning_imports_a_planning_module() -> None:
    files = module_files()
    found = [f"{module} -> {name}" for module, path in sorted(files.items()) if not inside(module, PLANNING)
             for name in sorted(imported_names(path, module, type_only_too=True))
             if name.startswith(PLANNING + ".") and name in files]  # a module of planning, not a name it exports
    assert found == [], "import edgeopt.planning, not its modules:\n" + "\n".join(found)


def test_planning_imports_neither_the_optimize_pipeline_nor_the_engine() -> None:
    graph = import_graph(module_files(), type_only_too=True)
    found = [f"{module} -> {name}" for module, names in sorted(graph.items()) if inside(module, PLANNING)
             for name in sorted(names) if inside(name, "edgeopt.optimize") or inside(name, "edgeopt.engine")]
    assert found == [], "planning reaches into what it plans for:\n" + "\n".join(found)


def test_the_serving_path_may_import_planning() -> None:
    """Serve plans through edgeopt.planning, so planning reaches no tooling (passes, exporters) nor torch."""
    graph = import_graph(module_files())
    todo, seen = [PLANNING], {PLANNING}
    while todo:
        for name in graph.get(todo.pop(), ()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    heavy = sorted(n for n in seen if any(inside(n, r) for r in ("edgeopt.passes", "edgeopt.exporters", "torch",
                                                                   "transformers", "optimum")))
    assert heavy == []
