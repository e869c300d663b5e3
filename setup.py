"""Packages: the repository keeps exporters/, runtimes/ and profiles/ beside edgeopt/, and they install inside it
(edgeopt.exporters, edgeopt.runtimes, edgeopt.profiles), so edgeopt puts one name into site-packages and PyPI's
packages called ``exporters`` or ``runtimes`` cannot overwrite ours (nor ours theirs). Everything else is in
pyproject.toml."""

from setuptools import find_packages, setup

INSIDE_EDGEOPT = ("exporters", "runtimes", "profiles")

setup(
    packages=find_packages(include=["edgeopt", "edgeopt.*"])
    + [f"edgeopt.{name}" for name in find_packages(include=[f"{top}{rest}" for top in INSIDE_EDGEOPT
                                                             for rest in ("", ".*")])],
    package_dir={"edgeopt": "edgeopt", **{f"edgeopt.{top}": top for top in INSIDE_EDGEOPT}},
)
