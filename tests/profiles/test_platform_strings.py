"""No code decides on an accelerator by matching its name: it asks the profile's platform
(edgeopt.profiles.platform), the one module that reads those names. Read with ``ast`` over the installed
packages: a comparison with an accelerator's name (``device == "cuda"``, ``x in ("cpu", "cuda")``) or a prefix
test on one (``.startswith("cuda")``, ``.partition("sm_")``) anywhere else fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_layering import module_files

# The platform module reads the names profiles and runtime options spell accelerators with.
ALLOWED = {"edgeopt.profiles.platform"}
ACCELERATOR_NAME = re.compile(r"(?i)(cuda|cpu|gpu|npu|tpu|mps|rocm|xpu|tensorrt|trt)(:.*)?|.*nvidia.*")
PREFIX_NAME = re.compile(r"(?i)(cuda|gpu|npu|sm_|nvidia).*")
PREFIX_METHODS = {"startswith", "endswith", "partition", "rpartition", "removeprefix"}


def _strings(node: ast.AST) -> list[str]:
    """The string constants ``node`` is or holds (a tuple, list or set literal of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for item in node.elts for s in _strings(item)]
    return []


def accelerator_string_tests(source: str, filename: str) -> list[str]:
    """``file:line: code`` for each comparison with, or prefix test on, an accelerator's name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            names = [s for side in [node.left, *node.comparators] for s in _strings(side)]
            hit = any(ACCELERATOR_NAME.fullmatch(s) for s in names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PREFIX_METHODS:
            hit = any(PREFIX_NAME.fullmatch(s) for arg in node.args for s in _strings(arg))
        else:
            continue
        if hit:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_accelerator_string_test_outside_the_platform_module() -> None:
    found = [hit for module, path in sorted(module_files().items()) if module not in ALLOWED
             for hit in accelerator_string_tests(path.read_text(), str(path))]
    assert not found, "ask the profile's platform (edgeopt.profiles.platform) instead:\n" + "\n".join(found)


def test_the_scan_sees_the_tests_it_forbids() -> None:
    source = '''
if device == "cuda": pass
if requested not in ("cpu", "cuda"): pass
if profile.accelerator.startswith("cuda"): pass
arch = profile.accelerator.partition("sm_")[2]
if "NVIDIA" in name: pass
if dtype == "float16" and mode != "auto": pass
torch.device("cuda")
'''
    hits = accelerator_string_tests(source, "x.py")
    assert sorted(int(h.split(":")[1]) for h in hits) == [2, 3, 4, 5, 6]


def test_the_platform_module_is_where_the_names_are_read() -> None:
    path = Path(module_files()["edgeopt.profiles.platform"])
    assert accelerator_string_tests(path.read_text(), str(path))  # it is allowed, and it does read them
