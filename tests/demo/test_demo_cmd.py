"""``edgeopt demo-model DIR`` copies the cached build; refuses to overwrite without --force."""

from __future__ import annotations

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "demo-model", *args],
                          capture_output=True, text=True, timeout=300)


def test_writes_a_copy_of_the_cached_model_and_guards_existing_dirs(demo_model_dir, tmp_path):
    target = tmp_path / "model"
    first = _run(str(target))
    assert first.returncode == 0, first.stderr
    assert (target / "model.safetensors").read_bytes() == (demo_model_dir / "model.safetensors").read_bytes()
    assert (target / "eval.txt").is_file() and "eval perplexity" in first.stdout

    again = _run(str(target))
    assert again.returncode == 1
    assert str(target) in again.stderr and "--force" in again.stderr

    (target / "stale.txt").write_text("left over")
    forced = _run(str(target), "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (target / "stale.txt").exists()
