from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt.store.bundle import Manifest, PassRecord, load_bundle, staged_bundle, write_manifest
from edgeopt.errors import BundleError, OutputExistsError
from edgeopt.sizing.manifest_section import KvSection


def make_bundle(dest: Path, force: bool = False) -> Manifest:
    with staged_bundle(dest, force=force) as stage:
        (stage / "model.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 64)
        (stage / "tokenizer").mkdir()
        (stage / "tokenizer" / "tokenizer.json").write_text('{"model": {}}')
        manifest = Manifest(source_model="org/model", source_revision="abc123", target="jetson-orin-nano-8gb",
                            format="gguf", quant="Q4_K_M", runtime="llama_cpp", model_file="model.gguf",
                            passes=[PassRecord("prune", {"ratio": 0.25}, "in", "out", 1.5, {"params": 10})],
                            metrics={"kl": 0.001}, kv=KvSection(1024, 2048, "q8_0", 1088))
        return write_manifest(stage, manifest)


def test_round_trip(tmp_path: Path):
    written = make_bundle(tmp_path / "b")
    loaded = load_bundle(tmp_path / "b")
    assert loaded == written
    assert set(loaded.files) == {"model.gguf", "tokenizer/tokenizer.json"}
    assert loaded.passes[0].params == {"ratio": 0.25}
    assert loaded.files["model.gguf"]["bytes"] == 4 + 256 * 64
    assert loaded.kv == KvSection(kv_elements_per_token=1024, context_length=2048, kv_type="q8_0",
                                  kv_bytes_per_token=1088)  # read back as the dataclass, not a dict


def test_a_manifest_from_before_the_kv_section_loads_and_is_sized_from_its_export_keys(tmp_path: Path):
    """Older bundles kept the KV facts as loose export keys; they load, and serving reads the same numbers."""
    from edgeopt.sizing.bundle_facts import recorded_kv_section, recorded_kv_type

    written = make_bundle(tmp_path / "b")
    written.kv = None
    written.export = {"kv_elements_per_token": 1024, "kv_bytes_per_token": 1088, "context_length": 2048,
                      "kv_type": "q8_0"}
    write_manifest(tmp_path / "b", written)
    path = tmp_path / "b" / "manifest.json"
    data = json.loads(path.read_text())
    del data["kv"]
    path.write_text(json.dumps(data | {"schema_version": 1}))  # exactly what an older edgeopt wrote
    loaded = load_bundle(tmp_path / "b")
    assert loaded.kv is None
    assert recorded_kv_section(tmp_path / "b", loaded) == KvSection(1024, 2048, "q8_0")
    assert recorded_kv_type(loaded) == "q8_0"


def test_corrupted_file_is_refused(tmp_path: Path):
    make_bundle(tmp_path / "b")
    model = tmp_path / "b" / "model.gguf"
    data = bytearray(model.read_bytes())
    data[100] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match its sha256"):
        load_bundle(tmp_path / "b")


def test_truncated_file_is_refused_with_both_sizes(tmp_path: Path):
    make_bundle(tmp_path / "b")
    model = tmp_path / "b" / "model.gguf"
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(BundleError, match="is 1000 bytes, the manifest says 16388"):
        load_bundle(tmp_path / "b")


def test_missing_file_and_missing_manifest(tmp_path: Path):
    make_bundle(tmp_path / "b")
    (tmp_path / "b" / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(BundleError, match="missing"):
        load_bundle(tmp_path / "b")
    (tmp_path / "b" / "manifest.json").unlink()
    with pytest.raises(BundleError, match="no manifest.json"):
        load_bundle(tmp_path / "b")


def test_interrupted_write_leaves_nothing(tmp_path: Path):
    with pytest.raises(KeyboardInterrupt):
        with staged_bundle(tmp_path / "b") as stage:
            (stage / "model.gguf").write_bytes(b"half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(tmp_path: Path):
    make_bundle(tmp_path / "b")
    with pytest.raises(OutputExistsError, match="--force"):
        make_bundle(tmp_path / "b")
    make_bundle(tmp_path / "b", force=True)
    assert load_bundle(tmp_path / "b").quant == "Q4_K_M"
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no staging or trash left behind


def test_schema_version_mismatch(tmp_path: Path):
    make_bundle(tmp_path / "b")
    path = tmp_path / "b" / "manifest.json"
    path.write_text(path.read_text().replace('"schema_version": 2', '"schema_version": 99'))
    with pytest.raises(BundleError, match="schema_version=99"):
        load_bundle(tmp_path / "b")


def _count_hashing(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    import edgeopt.store.bundle

    hashed: list[Path] = []
    real = edgeopt.store.bundle.sha256_file
    monkeypatch.setattr(edgeopt.store.bundle, "sha256_file", lambda path: hashed.append(path) or real(path))
    return hashed


def test_an_unchanged_bundle_is_hashed_once_not_on_every_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Hashing a multi-GB bundle on every `edgeopt serve` was most of an ONNX cold start."""
    make_bundle(tmp_path / "b")
    hashed = _count_hashing(monkeypatch)
    load_bundle(tmp_path / "b")
    assert len(hashed) == 2
    load_bundle(tmp_path / "b")
    load_bundle(tmp_path / "b")
    assert len(hashed) == 2


def test_a_file_rewritten_in_place_is_hashed_again_even_with_its_old_mtime(tmp_path: Path):
    import os

    make_bundle(tmp_path / "b")
    load_bundle(tmp_path / "b")  # verified: stamps recorded
    model = tmp_path / "b" / "model.gguf"
    before = model.stat()
    data = bytearray(model.read_bytes())
    data[100] ^= 0xFF
    model.write_bytes(bytes(data))  # same size, same inode
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the old mtime: only ctime tells
    with pytest.raises(BundleError, match="does not match its sha256"):
        load_bundle(tmp_path / "b")


def test_a_copied_bundle_is_verified_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import shutil

    make_bundle(tmp_path / "b")
    load_bundle(tmp_path / "b")
    shutil.copytree(tmp_path / "b", tmp_path / "copy")  # stamps and mtimes come along; inodes do not
    hashed = _count_hashing(monkeypatch)
    load_bundle(tmp_path / "copy")
    assert len(hashed) == 2


def test_inspect_rehashes_every_file_whatever_the_stamps_say(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Bit rot on the storage changes no stat field: only `edgeopt inspect`'s full re-hash finds it."""
    make_bundle(tmp_path / "b")
    load_bundle(tmp_path / "b")  # verified: stamps recorded
    hashed = _count_hashing(monkeypatch)
    load_bundle(tmp_path / "b")
    assert hashed == []
    load_bundle(tmp_path / "b", rehash=True)
    assert len(hashed) == 2


def test_content_hash_follows_a_changed_file(tmp_path: Path):
    import os

    from edgeopt.store.bundle import content_hash

    (tmp_path / "weights.bin").write_bytes(b"a" * 100)
    first = content_hash(tmp_path)
    assert content_hash(tmp_path) == first
    (tmp_path / "weights.bin").write_bytes(b"b" * 100)  # same size: the modification time tells
    os.utime(tmp_path / "weights.bin", ns=(1, 1))
    changed = content_hash(tmp_path)
    assert changed != first
    (tmp_path / "extra.json").write_text("{}")
    assert content_hash(tmp_path) not in (first, changed)
