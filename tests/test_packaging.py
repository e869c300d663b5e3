"""What `pip install edgeopt` puts into site-packages: one top-level package, edgeopt, holding every package of the
repository (exporters/, runtimes/ and profiles/ install as edgeopt.exporters, ...; setup.py), so PyPI's packages
named ``exporters`` or ``runtimes`` installed beside it overwrite nothing of ours. Read from the wheel pip builds."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("edgeopt", "exporters", "runtimes", "profiles")


def test_the_wheel_installs_one_top_level_package_holding_every_package(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("edgeopt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"edgeopt"}
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            package = init.relative_to(ROOT).parent
            installed = package if folder == "edgeopt" else Path("edgeopt") / package
            assert f"{installed.as_posix()}/__init__.py" in names, f"{package} is missing from the wheel"
    assert any(n.startswith("edgeopt/profiles/") and n.endswith(".toml") for n in names)  # the device profiles
    assert "edgeopt/monitor/monitor.tcss" in names  # the monitor's stylesheet
