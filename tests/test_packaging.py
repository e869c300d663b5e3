"""What `pip install edgeopt` puts into site-packages: one top-level package, edgeopt, holding every package of the
repository (exporters/, runtimes/ and profiles/ install as edgeopt.exporters, ...; setup.py), so PyPI's packages
named ``exporters`` or ``runtimes`` installed beside it overwrite nothing of ours; and the data files it needs,
among them what `edgeopt worker` builds itself from on a device that has only the wheel (issue 61). Read from the
wheel pip builds (~4 s, once for the module), from a copy of the sources: building writes build/ and *.egg-info
beside them, and the clone's egg-info is its editable install's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from edgeopt.rpc.worker_build.builder import NATIVE_DIR, NATIVE_FILES

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("edgeopt", "exporters", "runtimes", "profiles")
WORKER_BUILD = "edgeopt/rpc/worker_build"


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    work = tmp_path_factory.mktemp("wheel")
    for name in (*FOLDERS, "pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, work / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, work / "src" / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(work / "dist"), str(work / "src")], check=True, capture_output=True, timeout=300)
    [wheel] = (work / "dist").glob("edgeopt-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_the_wheel_installs_one_top_level_package_holding_every_package(names: list[str]):
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"edgeopt"}
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            package = init.relative_to(ROOT).parent
            installed = package if folder == "edgeopt" else Path("edgeopt") / package
            assert f"{installed.as_posix()}/__init__.py" in names, f"{package} is missing from the wheel"
    assert any(n.startswith("edgeopt/profiles/") and n.endswith(".toml") for n in names)  # the device profiles
    assert "edgeopt/monitor/monitor.tcss" in names  # the monitor's stylesheet


def test_the_wheel_carries_every_file_the_worker_build_reads(names: list[str]):
    needed = {f"{WORKER_BUILD}/native/{name}" for name in NATIVE_FILES}
    needed |= {f"{WORKER_BUILD}/{path.name}" for path in (ROOT / WORKER_BUILD).glob("*.py")}
    missing = sorted(needed - set(names))
    assert not missing, (f"the wheel lacks {missing}: `edgeopt worker` cannot build itself from a pip install; add "
                         "them to [tool.setuptools.package-data] in pyproject.toml")


def test_the_builders_list_of_native_files_is_what_the_cmakelists_compiles():
    cmakelists = (NATIVE_DIR / "CMakeLists.txt").read_text()
    compiled = {name for match in re.finditer(r"add_executable\(\S+\s+([^)]*)\)", cmakelists)
                for name in match[1].split()}
    assert compiled and compiled <= set(NATIVE_FILES)
    assert {path.name for path in NATIVE_DIR.iterdir()} == set(NATIVE_FILES)  # a new source joins NATIVE_FILES
