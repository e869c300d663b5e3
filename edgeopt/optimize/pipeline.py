"""The model path: plan -> passes -> export -> evaluate -> bundle.

Each pass and the export are cached by (name, parameters, input content hash). The bundle is
staged in a temporary directory and published with one rename (see :mod:`edgeopt.store.bundle`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt.byte_sizes import Size, refuse_above
from edgeopt.store.bundle import Manifest, PassRecord, content_hash, staged_bundle, write_manifest
from edgeopt.store.cache import cache_root, cached_step, step_key
from edgeopt.optimize.export_options import check_export_options
from edgeopt.errors import ConfigError, OutputExistsError, UnsupportedArchitectureError
from edgeopt import backends
from edgeopt.sizing.budget import kv_bytes_per_token
from edgeopt.sizing.kv_types import kv_element_bytes_for, parse_kv_type
from edgeopt.sizing.manifest_section import KvSection, exporter_kv_elements
from edgeopt.sources.model_spec import ModelSpec, load_model_spec
from edgeopt.planning.checkpoint import (Plan, canonical_quant, check_encoder_formats, encoder_formats, refuse_unfit, require_fit,
                          weight_bytes)
from edgeopt.sources.checkpoint import resolve_model_dir
from edgeopt.sources.tokenizer_config import chat_template_in
from edgeopt.profiles import DeviceProfile, load_profile

if TYPE_CHECKING:  # imported when exporting (get_exporter): `edgeopt --help` loads no exporter package
    from edgeopt.exporters import Exporter

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "generation_config.json", "chat_template.jinja", "config.json")

Reporter = Callable[[str], None]


@dataclass
class OptimizeOptions:
    model: str
    target: str = "host"
    output: Path | None = None
    format: str | None = None
    quant: str | None = None
    kv_type: str | None = None  # llama.cpp KV cache type (gguf only); None: the planner's rule
    context: int | None = None
    concurrency: int = 1
    passes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # [(name, params)] in order
    export_options: dict[str, Any] = field(default_factory=dict)
    eval_data: Path | None = None
    evaluate: bool = True
    force: bool = False
    dry_run: bool = False
    fit: bool = False  # prune just enough to fit the target when the model does not (edgeopt/planning/fit.py)
    accept_quality_loss: bool = False  # write a bundle under the quality floor (edgeopt/evaluation/quality_floor.py)
    ignore_fit: bool = False  # write a candidate the plan marks as not fitting the target (edgeopt.planning.checkpoint.refuse_unfit)
    size: Size | None = None  # --size as written (its bytes are export_options' mix_size_bytes)
    # optimize --draft-for: the bundle is a draft model for ``model`` (edgeopt.passes.draft_options made the passes);
    # it is measured by how often ``model`` accepts its tokens (edgeopt.evaluation.draft), not by the quality floor
    draft: bool = False


@dataclass
class Resolved:
    """Options with every default filled in from the profile and the planner."""

    profile: DeviceProfile
    plan: Plan
    format: str
    quant: str
    runtime: str
    output: Path
    passes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # opts.passes, plus --fit's prune
    fit_ratio: float | None = None  # the prune ratio --fit chose, None when it was not needed
    kv_type: str | None = None  # the gguf bundle's KV cache type, recorded in its manifest; None: other formats
    source_parameters: int = 0  # parameters of the model as given, before any pass (what the plan prints beside it)


def resolve(opts: OptimizeOptions) -> Resolved:
    if opts.accept_quality_loss and not opts.evaluate:
        raise ConfigError("--accept-quality-loss with --no-eval: without an evaluation there is no loss to accept",
                          "drop --no-eval (the quality floor is checked on the evaluation), or drop --accept-quality-loss")
    profile = load_profile(opts.target)
    spec = load_model_spec(opts.model)
    source_parameters = spec.num_parameters
    fmt = opts.format or (encoder_formats()[0] if spec.is_encoder else "gguf" if opts.draft else profile.preferred_format)
    if spec.is_encoder:
        _check_encoder_options(spec, fmt, opts)
    from edgeopt.planning.fit import plan_after_passes  # the plan describes the model as pruning leaves it

    asked_quant = canonical_quant(fmt, opts.quant) if opts.quant else None  # any case; canonical from here on
    size_bytes = opts.export_options.get("mix_size_bytes")
    if size_bytes is not None:
        asked_quant = sized_quant(fmt, asked_quant, size_bytes)
        check_mix_size(spec, opts.size or Size(f"{size_bytes}B", size_bytes, bare=False), fmt)
    asked_kv_type = parse_kv_type(opts.kv_type, fmt) if opts.kv_type else None
    fitted = plan_after_passes(spec, profile, fmt, asked_quant, opts.context, opts.concurrency, opts.passes, opts.fit,
                               kv_type=asked_kv_type)
    plan, spec = fitted.plan, fitted.spec
    if asked_quant:
        chosen = next((c for c in plan.candidates if c.quant == asked_quant), None)
        if chosen is None:
            # The user may ask for any quant the format knows (not only the planner's shortlist).
            from edgeopt.planning.checkpoint import size_candidate

            chosen = size_candidate(spec, profile, fmt, asked_quant, plan.context, plan.concurrency,
                                    kv_type=asked_kv_type, file_bytes=size_bytes)
            plan.candidates.append(chosen)
    else:
        chosen = require_fit(plan)
    if not (opts.ignore_fit or opts.dry_run):
        refuse_unfit(plan, chosen)
    quant = chosen.quant
    check_export_options(fmt, quant, opts.export_options)
    name = Path(opts.model.rstrip("/")).name
    output = opts.output or Path(f"{name}{'-draft' if opts.draft else ''}-{profile.name}-{quant.lower()}")
    if output.exists() and not opts.force and not opts.dry_run:
        raise OutputExistsError(f"output directory {output} already exists", "pass --force to replace it, or choose -o")
    return Resolved(profile, plan, fmt, quant, backends.backend(fmt).runtime, output, fitted.passes, fitted.fit_ratio,
                    kv_type=chosen.kv_type if backends.backend(fmt).kv_cache_types else None,
                    source_parameters=source_parameters)


def sized_quant(fmt: str, asked_quant: str | None, size_bytes: int) -> str:
    """The quant ``--size`` makes (each tensor's type chosen to fit it), refused with a format that has
    none or beside another ``--quant``."""
    sized = backends.backend(fmt).sized_quant
    size = f"--size {size_bytes / 2**20:.0f}MiB"
    if not sized:
        raise ConfigError(f"{size}: --format {fmt} has no per-tensor mix made to a size",
                          f"use --format {next(f for f in backends.formats() if backends.backend(f).sized_quant)}, "
                          "or drop --size and pick a --quant")
    if asked_quant not in (None, sized):
        raise ConfigError(f"{size} chooses every tensor's type itself; it cannot be combined with --quant {asked_quant}",
                          f"drop --quant (or pass --quant {sized}), or drop --size")
    return sized


def check_mix_size(spec: ModelSpec, size: Size, fmt: str = "gguf") -> None:
    """A GGUF mix larger than the model in F16 cannot be meant (every tensor would stay F16 and the rest be empty):
    refused, naming the bytes a bare number's digits would be. An ONNX file carries more than its weights (graph,
    fp32 norms and scales; most of a tiny model's file), so there the exporter judges the size it can reach."""
    if fmt == "gguf":
        refuse_above(size, weight_bytes(spec, "gguf", "F16"), "--size", f"{spec.source} in F16")


def _check_encoder_options(spec: ModelSpec, fmt: str, opts: OptimizeOptions) -> None:
    """Encoders go to ONNX unpruned: prune/distil/--fit know decoder blocks only."""
    check_encoder_formats(spec, (fmt,))
    asked = [name for name, _ in opts.passes] + (["fit"] if opts.fit else [])
    if asked:
        raise UnsupportedArchitectureError(
            f"{spec.source} is an encoder ({spec.hf_architecture}); {asked[0]!r} works on causal LMs only",
            "drop --prune*/--distil/--fit for encoders; --quant int8 is how an encoder gets smaller")


def run_optimize(opts: OptimizeOptions, report: Reporter = print, resolved: Resolved | None = None) -> Manifest | None:
    """Run the model path; ``resolved`` is ``resolve(opts)`` when the caller already computed it."""
    res = resolved or resolve(opts)
    if opts.dry_run:
        return None
    model_dir, revision = resolve_model_dir(opts.model)
    current = model_dir
    records: list[PassRecord] = []
    for name, params in res.passes:
        current, record = _run_pass(name, params, current, model_dir, opts, res, report)
        records.append(record)

    from edgeopt.exporters import get_exporter

    exporter = get_exporter(res.format)
    export_params = {"quant": res.quant, **opts.export_options, "cpu_isa": res.profile.cpu_isa}
    input_hash = content_hash(current)
    version = exporter.cache_version
    key_params = export_params if version is None else {**export_params, "exporter_version": version}
    key = step_key("export", res.format, key_params, input_hash)
    report(f"export: {res.format} {res.quant}")
    started = time.perf_counter()
    export_dir, export_meta, cached = cached_step(
        key, lambda out: _export(exporter, current, out, res.quant, export_params))
    report(f"export: {'reused cached output' if cached else f'done in {time.perf_counter() - started:.1f}s'}")
    for line in exporter.summary(export_meta):
        report(line)

    with staged_bundle(res.output, force=opts.force) as stage:
        for path in export_dir.iterdir():
            if not path.name.startswith(".edgeopt"):
                _copy(path, stage / path.name)
        tok_dir = stage / "tokenizer"
        tok_dir.mkdir()
        for fname in TOKENIZER_FILES:
            if (current / fname).is_file():
                shutil.copy2(current / fname, tok_dir / fname)
        exported_spec = load_model_spec(str(current))
        export = {k: v for k, v in export_meta.items() if k not in ("model_file", "runtime")}
        manifest = Manifest(
            source_model=opts.model, source_revision=revision, target=res.profile.name, format=res.format,
            quant=res.quant, runtime=export_meta.get("runtime", res.runtime), model_file=export_meta["model_file"],
            architecture=exported_spec.hf_architecture, passes=records, export=export,
            kind=export_meta.get("kind", "causal-lm"),
            kv=None if exported_spec.is_encoder else manifest_kv_section(exported_spec, res.format, res.quant,
                                                                          res.kv_type, export),
        )
        manifest.chat_template = _chat_template(tok_dir)
        if opts.evaluate:
            from edgeopt.evaluation.causal_lm import evaluate_bundle

            report("evaluate: comparing the exported model with the original")
            manifest.metrics = _export_probe_metrics(export_meta) | evaluate_bundle(stage, manifest, model_dir,
                                                                                     opts.eval_data)
            if opts.draft:
                manifest.metrics["draft"] = _draft_report(stage, manifest, model_dir, exported_spec, opts, res, report)
            else:
                _check_quality_floor(manifest, opts, pruned=bool(records))
        write_manifest(stage, manifest)
    report(f"bundle written to {res.output}")
    return manifest


def _check_quality_floor(manifest: Manifest, opts: OptimizeOptions, pruned: bool) -> None:
    """Refuse (inside the staging block, so nothing is published) a bundle under the floor, unless accepted."""
    from edgeopt.evaluation.quality_floor import enforce, judge

    verdict = judge(manifest.metrics, manifest.format, manifest.quant)
    if verdict is None:
        return
    enforce(verdict, manifest.metrics, opts.accept_quality_loss, manifest.format, pruned)
    manifest.metrics["quality_floor"] = verdict.record(opts.accept_quality_loss)


def _draft_report(stage: Path, manifest: Manifest, target_dir: Path, draft: ModelSpec, opts: OptimizeOptions,
                  res: Resolved, report: Reporter) -> dict[str, Any]:
    """The draft's size against its target's, and how often the target accepts its tokens on text the passes held
    out (edgeopt.evaluation.draft): metrics.draft of the manifest."""
    from edgeopt.evaluation.draft import measure_acceptance

    report(f"evaluate: how often {opts.model} accepts the draft's tokens, on held-out text")
    distil_data = next((params["data"] for name, params in res.passes if name == "distil"), None)
    measured = measure_acceptance(stage, manifest, target_dir, opts.eval_data, distil_data)
    return {"target": opts.model, "parameters": draft.num_parameters, "target_parameters": res.source_parameters,
            **measured}


def _export_probe_metrics(export_meta: dict[str, Any]) -> dict[str, float]:
    """The cosines an encoder's exporter measured on its probe sentences (fp32 graph vs torch, quantized vs
    fp32), and a cross-encoder's score errors and rank agreement on its ranking set; decoders' exporters
    report theirs in the manifest's export section."""
    keys = ("fp32_min_cosine_vs_torch", "probe_min_cosine_vs_fp32", "fp32_max_score_error_vs_torch",
            "probe_vs_fp32_max_score_error", "probe_vs_fp32_spearman_mean", "probe_vs_fp32_top1_agreement")
    return {key: float(export_meta[key]) for key in keys if key in export_meta}


def _export(exporter: Exporter, model_dir: Path, out: Path, quant: str, params: dict[str, Any]) -> dict[str, Any]:
    result = exporter.export(model_dir, out, quant, params)
    return {"model_file": result.model_file, "runtime": result.runtime, "quant": result.quant, **result.details}


def _run_pass(name: str, params: dict[str, Any], current: Path, original: Path, opts: OptimizeOptions,
              res: Resolved, report: Reporter) -> tuple[Path, PassRecord]:
    from edgeopt.passes import PassContext, get_pass

    the_pass = get_pass(name, **params)
    input_hash = content_hash(current)
    key = step_key("pass", name, params, input_hash)
    work_dir = cache_root() / "work" / key  # outlives the step's temp dir, so an interrupted pass can resume
    ctx = PassContext(original_model_dir=original, target=res.profile.name, data_file=opts.eval_data,
                      work_dir=work_dir)
    report(f"pass {name}: {params}")
    started = time.perf_counter()
    out, metrics, cached = cached_step(key, lambda out_dir: the_pass.run(current, out_dir, ctx))
    seconds = time.perf_counter() - started
    report(f"pass {name}: {'reused cached output' if cached else f'done in {seconds:.1f}s'}")
    record = PassRecord(name=name, params=params, input_hash=input_hash, output_hash=content_hash(out),
                        seconds=float(metrics.get("seconds", seconds)), metrics=metrics)
    return out, record


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy2(src, dst)


def _chat_template(tok_dir: Path) -> str | None:
    cfg = tok_dir / "tokenizer_config.json"
    return chat_template_in(tok_dir, json.loads(cfg.read_text()) if cfg.is_file() else {})


def manifest_kv_section(spec: ModelSpec, fmt: str, quant: str, kv_type: str | None = None,
                        exporter_details: dict[str, Any] | None = None) -> KvSection:
    """What serving a causal LM needs to size its KV cache, recorded in the manifest at export so that
    ``edgeopt serve`` never reads the model file for it (edgeopt.sizing.bundle_facts reads it back).
    ``kv_type``: the KV cache type chosen for formats that have several (gguf), served by default. An
    exporter that counted the KV elements of the graph it wrote (ONNX) is believed over the config."""
    elements = exporter_kv_elements(exporter_details or {}) or spec.kv_elements_per_token
    element_bytes = kv_element_bytes_for(fmt, quant, kv_type)
    return KvSection(kv_elements_per_token=elements, context_length=spec.max_position_embeddings, kv_type=kv_type,
                     kv_bytes_per_token=kv_bytes_per_token(elements, element_bytes))


def check_format(fmt: str | None) -> None:
    if fmt is not None:
        backends.backend(fmt)  # refuses an unknown name with the valid ones
