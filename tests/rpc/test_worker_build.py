"""edgeopt.rpc.worker_build without compiling anything: a built cache is used as it is, a machine without the
tools hears which and how to get them, a stale configuration is dropped, the sdist unpacks whole or not at all,
and an explicit EDGEOPT_RPC_BUILD is never built into. (The compile itself runs in `make rpc-worker`.)"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from edgeopt.errors import MissingDependencyError
from edgeopt.rpc import binaries
from edgeopt.rpc.worker_build import builder, sources, toolchain


def fake_build(bins: Path) -> None:
    bins.mkdir(parents=True)
    for name in (builder.WORKER_BINARY, builder.RPC_LIBRARY):
        (bins / name).write_text("")
        (bins / name).chmod(0o755)


def test_a_built_cache_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEOPT_CACHE", str(tmp_path))
    version = builder.llama_cpp_python_version()
    fake_build(tmp_path / f"rpc-worker-{version}" / "build" / "bin")  # the layout existing caches have
    monkeypatch.setattr(builder, "_build", lambda *args: pytest.fail("built again"))
    assert builder.ensure_built() == tmp_path / f"rpc-worker-{version}" / "build" / "bin"


def test_an_explicit_build_directory_is_never_built_into(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEOPT_RPC_BUILD", str(tmp_path))
    monkeypatch.setattr(builder, "_build", lambda *args: pytest.fail("built"))
    with pytest.raises(MissingDependencyError, match="EDGEOPT_RPC_BUILD") as caught:
        binaries.worker_binary()
    assert "unset it" in caught.value.hint


def test_no_tools_names_each_missing_one_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(toolchain.sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setenv("CC", "no-such-cc")
    monkeypatch.setenv("CXX", "no-such-c++")
    with pytest.raises(MissingDependencyError) as caught:
        toolchain.find_toolchain()
    assert all(word in caught.value.message for word in ("cmake", "ninja", "C/C++ compiler"))
    assert "pip install cmake ninja" in caught.value.hint and "build-essential" in caught.value.hint


def test_a_configuration_from_another_source_directory_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "CMakeFiles").mkdir()
    cache = tmp_path / "CMakeCache.txt"
    cache.write_text("CMAKE_GENERATOR:INTERNAL=Ninja\nCMAKE_HOME_DIRECTORY:INTERNAL=/clone/scripts/rpc_worker\n")
    builder._forget_other_configuration(tmp_path)
    assert not cache.exists() and not (tmp_path / "CMakeFiles").exists()
    cache.write_text(f"CMAKE_GENERATOR:INTERNAL=Ninja\nCMAKE_HOME_DIRECTORY:INTERNAL={builder.NATIVE_DIR}\n")
    builder._forget_other_configuration(tmp_path)
    assert cache.exists()


def sdist_archive(path: Path, top: str) -> None:
    with tarfile.open(path, "w:gz") as tar:
        tar.addfile(tarfile.TarInfo(f"{top}/vendor/llama.cpp/{sources.MARKER}"), io.BytesIO(b""))


def test_the_sdist_unpacks_into_the_shared_cache_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGEOPT_LLAMA_SDIST", raising=False)
    version = "9.9.9"
    sdist_dir = tmp_path / f"llama-cpp-python-sdist-{version}" / f"llama_cpp_python-{version}"

    def download(version: str, into: Path) -> None:  # what pip download leaves, then the real unpack
        into.parent.mkdir(parents=True)
        archive = into.parent / f"llama_cpp_python-{version}.tar.gz"
        sdist_archive(archive, into.name)
        sources._unpack(archive, into)

    monkeypatch.setattr(sources, "_download", download)
    assert sources.llama_cpp_sources(version, tmp_path) == sdist_dir / "vendor" / "llama.cpp"
    assert [path.name for path in sdist_dir.parent.iterdir() if path.name.startswith(".")] == []  # no staging left


def test_sources_without_llama_cpp_say_where_to_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEOPT_LLAMA_SDIST", str(tmp_path))
    with pytest.raises(MissingDependencyError, match="holds no llama.cpp sources") as caught:
        sources.llama_cpp_sources("9.9.9", tmp_path / "cache")
    assert "EDGEOPT_LLAMA_SDIST" in caught.value.hint
