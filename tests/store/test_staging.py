"""Work directories of killed runs are removed by the next run, never a live run's (issue 12 item 8).

Real processes, real SIGKILL: a child holds a work directory (or runs ``edgeopt optimize``) and is
killed with ``kill -9``, which no cleanup handler survives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edgeopt.store.bundle import staged_bundle
from edgeopt.store.staging import remove_abandoned, work_dir
from tests.fixtures.tiny_models import build_tiny_model

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from edgeopt.store.staging import work_dir
with work_dir(Path(sys.argv[1]), ".out.partial-") as path:
    (path / "model.gguf").write_bytes(b"x" * 1000)
    print(path, flush=True)
    time.sleep(600)
"""


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def kill9(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def wait_for(found: Callable[[], list[Path]], process: subprocess.Popen, timeout_s: float = 120) -> list[Path]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if paths := found():
            return paths
        if process.poll() is not None:
            raise AssertionError(f"the child exited ({process.returncode}) before the expected path appeared")
        time.sleep(0.002)
    raise AssertionError("the expected path never appeared")


def test_a_live_runs_dir_is_kept_and_a_killed_runs_dir_is_removed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=child_env())
    try:
        held = Path(holder.stdout.readline().strip())
        assert held.is_dir() and f"-{holder.pid}-" in held.name
        assert remove_abandoned(tmp_path, ".out.partial-") == []  # alive: untouched
        with work_dir(tmp_path, ".out.partial-") as mine:  # a second run beside it cleans nothing live
            assert held.is_dir() and mine.is_dir()
        assert not mine.exists()
    finally:
        kill9(holder)
    assert held.is_dir()  # SIGKILL ran no cleanup
    assert remove_abandoned(tmp_path, ".out.partial-") == [held]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_published_bundle_gets_mkdirs_permissions_not_0700(tmp_path):
    old = os.umask(0o027)
    try:
        with staged_bundle(tmp_path / "bundle") as stage:
            (stage / "f").write_text("x")
    finally:
        os.umask(old)
    assert (tmp_path / "bundle").stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]  # no lock file, no staging left


def test_optimize_killed_with_sigkill_leaves_nothing_after_the_next_run(tmp_path):
    # Wider than the default tiny model, so the export step lasts long enough to be caught mid-way.
    model = build_tiny_model(tmp_path / "model", hidden_size=256, num_layers=4, intermediate_size=768)
    cache, out = tmp_path / "cache", tmp_path / "out" / "bundle"
    env = {**child_env(), "EDGEOPT_CACHE": str(cache)}

    def optimize(*extra: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "edgeopt.cli.app", "optimize", str(model), "-o", str(out), "--format", "gguf",
                   *extra]
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def step_stages() -> list[Path]:
        return sorted(p for p in (cache / "steps").glob(".*") if p.is_dir()) if (cache / "steps").is_dir() else []

    def bundle_stages() -> list[Path]:
        return sorted(p for p in out.parent.glob(f".{out.name}.*") if p.is_dir()) if out.parent.is_dir() else []

    first = optimize("--no-eval")  # killed while exporting into the step cache
    wait_for(step_stages, first)
    kill9(first)
    assert step_stages() and not out.exists()

    second = optimize()  # killed while evaluating the staged bundle
    wait_for(bundle_stages, second)
    kill9(second)
    assert bundle_stages() and not out.exists()
    assert step_stages() == []  # the second run's export removed the first run's leftovers

    third = optimize("--no-eval")
    assert third.wait(timeout=240) == 0, third.stderr.read().decode()[-2000:]
    assert bundle_stages() == [] and step_stages() == []
    assert not list(out.parent.glob("*.lock")) and not list((cache / "steps").glob("*.lock"))
    assert (out / "manifest.json").is_file()
    assert out.stat().st_mode & 0o777 == 0o777 & ~_umask()


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
