"""The bundle: a directory of model files plus ``manifest.json`` that describes and checksums them.

Writing is atomic: files go into a hidden temporary directory beside the destination, the manifest
is written last, and a single ``rename`` publishes the bundle, so an interrupted run never leaves a
half-written bundle behind. Loading verifies every file's sha256 and size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgeopt.errors import BundleError, OutputExistsError
from edgeopt.sizing.manifest_section import KvSection
from edgeopt.store.staging import work_dir

# 2: the typed ``kv`` section (edgeopt.sizing.manifest_section). Version 1 manifests still load: their KV
# facts are loose export keys, which edgeopt.sizing.bundle_facts reads. An edgeopt that reads only 1 refuses a
# version 2 manifest by its version, with the fix, instead of calling it malformed.
SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
# Files already verified, by stat stamp (see verify_files); ".edgeopt" names are never part of a bundle.
VERIFIED_STAMPS = ".edgeopt-verified.json"


@dataclass
class PassRecord:
    name: str
    params: dict[str, Any]
    input_hash: str
    output_hash: str
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class Manifest:
    source_model: str
    source_revision: str  # hub revision, or "sha256:<content hash>" of a local checkpoint
    target: str
    format: str
    quant: str
    runtime: str
    model_file: str
    architecture: str = ""
    tokenizer_dir: str = "tokenizer"  # tokenizer.json, tokenizer_config.json (chat template)
    chat_template: str | None = None
    kind: str = "causal-lm"  # or "embedding"
    passes: list[PassRecord] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    export: dict[str, Any] = field(default_factory=dict)
    # What serving sizes a causal LM's KV cache with (edgeopt.sizing.manifest_section); None for encoders and
    # for bundles written before the section existed (edgeopt.sizing.bundle_facts reads those).
    kv: KvSection | None = None
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> {sha256, bytes}
    schema_version: int = SCHEMA_VERSION
    edgeopt_version: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: Path) -> Manifest:
        version = data.get("schema_version")
        if version not in READABLE_SCHEMA_VERSIONS:
            raise BundleError(f"{where} has manifest schema_version={version!r}; this edgeopt reads "
                              f"{' and '.join(map(str, READABLE_SCHEMA_VERSIONS))}",
                              "re-run edgeopt optimize with this version")
        try:
            fields = dict(data)
            passes = [PassRecord(**p) for p in fields.pop("passes", [])]
            kv = fields.pop("kv", None)
            fields["schema_version"] = SCHEMA_VERSION  # read as the current one: written back as it
            return cls(passes=passes, kv=KvSection.from_dict(kv) if kv else None, **fields)
        except (TypeError, KeyError, ValueError) as exc:
            raise BundleError(f"{where} has a malformed manifest: {exc}", "re-run edgeopt optimize") from exc


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _tree_files(root: Path) -> list[tuple[str, Path]]:
    """Every file under root as (relative POSIX path, path), sorted; the manifest and ".edgeopt" files left out."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return [(rel, path) for path in files
            if (rel := path.relative_to(root).as_posix()) != MANIFEST and not path.name.startswith(".edgeopt")]


def hash_tree(root: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file under root (relative POSIX paths, sorted), manifest excluded."""
    return {rel: {"sha256": sha256_file(path), "bytes": path.stat().st_size} for rel, path in _tree_files(root)}


# content_hash's answers in this process, by the directory's stat stamps: an optimize names the same checkpoint
# in its source revision, its first step's cache key and its evaluation text's (2.7 s of reading each on a 1B).
_CONTENT_HASHES: dict[tuple[Any, ...], str] = {}


def content_hash(root: Path) -> str:
    """One hash for a whole directory's contents (used for cache keys and source revisions). Computed once per
    process while no file's size, modification time or inode changes."""
    files = _tree_files(root)
    stamps = tuple((rel, (st := path.stat()).st_size, st.st_mtime_ns, st.st_ino) for rel, path in files)
    key = (str(Path(root).resolve()), stamps)
    if key not in _CONTENT_HASHES:
        digest = hashlib.sha256()
        for rel, path in files:
            digest.update(f"{rel}\0{sha256_file(path)}\n".encode())
        _CONTENT_HASHES[key] = digest.hexdigest()
    return _CONTENT_HASHES[key]


@contextmanager
def staged_bundle(dest: Path, force: bool = False) -> Iterator[Path]:
    """Yield a staging directory; on success it replaces ``dest`` in one rename, on error it vanishes.

    Staging directories (``.NAME.partial-PID-*``) and replaced bundles (``.NAME.old-PID-*``) that a
    killed run left beside ``dest`` are removed here (see :mod:`edgeopt.store.staging`).
    """
    dest = dest.resolve()
    if dest.exists() and not force:
        raise OutputExistsError(f"output directory {dest} already exists", "pass --force to replace it, or choose -o")
    with work_dir(dest.parent, f".{dest.name}.partial-") as stage:
        yield stage
        with work_dir(dest.parent, f".{dest.name}.old-", create=False) as trash:
            if dest.exists():
                dest.rename(trash)  # removed when the block exits
            try:
                stage.rename(dest)
            except BaseException:
                if trash.exists():
                    trash.rename(dest)  # keep the previous bundle rather than none
                raise


def write_manifest(stage: Path, manifest: Manifest) -> Manifest:
    """Checksum every staged file and write manifest.json (last, so its presence means complete)."""
    from edgeopt import __version__

    manifest.files = hash_tree(stage)
    manifest.edgeopt_version = __version__
    tmp = stage / (MANIFEST + ".tmp")
    tmp.write_text(manifest.to_json())
    tmp.rename(stage / MANIFEST)
    return manifest


def read_manifest(bundle: Path) -> Manifest:
    path = Path(bundle) / MANIFEST
    if not Path(bundle).is_dir():
        raise BundleError(f"bundle {bundle} does not exist", "create one with: edgeopt optimize MODEL -o DIR")
    if not path.is_file():
        raise BundleError(f"{bundle} has no {MANIFEST}; it is not a bundle (or its write was interrupted)",
                          "re-run edgeopt optimize")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path} is not valid JSON: {exc}", "re-run edgeopt optimize") from exc
    return Manifest.from_dict(data, path)


def verify_files(bundle: Path, manifest: Manifest, rehash: bool = False) -> None:
    """Refuse a bundle whose files are missing, truncated or altered since they were written.

    Hashing is what a cold start of a multi-GB bundle spends its time on, so a file whose sha256 was
    checked is not hashed again while its stat stamp (size, mtime, ctime, inode) is unchanged: a copy
    gets a new inode, and any write (even one that restores the mtime) a new ctime. Stamps cannot see
    bit rot on the storage itself, so ``rehash`` (``edgeopt inspect``) hashes every file regardless."""
    bundle = Path(bundle)
    checked = _read_stamps(bundle)
    stamps = {}
    for rel, info in manifest.files.items():
        path = bundle / rel
        if not path.is_file():
            raise BundleError(f"bundle file {path} is missing", "copy the whole bundle directory again")
        stat = path.stat()
        if stat.st_size != info["bytes"]:
            raise BundleError(f"bundle file {path} is {stat.st_size} bytes, the manifest says {info['bytes']} "
                              "(truncated copy?)", "copy the bundle again")
        stamps[rel] = [info["sha256"], stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
        if (rehash or checked.get(rel) != stamps[rel]) and sha256_file(path) != info["sha256"]:
            raise BundleError(f"bundle file {path} does not match its sha256 in the manifest (corrupted)",
                              "copy the bundle again or re-run edgeopt optimize")
    if stamps != checked:
        _write_stamps(bundle, stamps)


def _read_stamps(bundle: Path) -> dict[str, list]:
    try:
        stamps = json.loads((bundle / VERIFIED_STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _write_stamps(bundle: Path, stamps: dict[str, list]) -> None:
    tmp = bundle / (VERIFIED_STAMPS + f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(stamps))
        tmp.rename(bundle / VERIFIED_STAMPS)
    except OSError:  # a read-only bundle is verified in full on every load
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def load_bundle(bundle: Path | str, verify: bool = True, rehash: bool = False) -> Manifest:
    manifest = read_manifest(Path(bundle))
    if verify:
        verify_files(Path(bundle), manifest, rehash)
    return manifest
