"""The model path: plan -> passes -> export -> evaluate -> bundle.

Everything is decided before this runs (edgeopt.optimize.options.resolve: the plan, the pass list, the output);
each pass and the export (edgeopt.optimize.export_step) are cached by (name, parameters, input content hash).
The bundle is staged in a temporary directory and published with one rename (see :mod:`edgeopt.store.bundle`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from edgeopt.optimize.export_step import run_exporter
from edgeopt.optimize.options import OptimizeOptions, resolve
from edgeopt.optimize.workbench import run_workbench
from edgeopt.planning import OptimizePlan
from edgeopt.sizing.budget import kv_bytes_per_token
from edgeopt.sizing.kv_types import kv_element_bytes_for
from edgeopt.sizing.manifest_section import KvSection, exporter_kv_elements
from edgeopt.sources.checkpoint import resolve_model_dir
from edgeopt.sources.model_spec import ModelSpec, load_model_spec
from edgeopt.sources.tokenizer_config import chat_template_in
from edgeopt.store.bundle import Manifest, PassRecord, content_hash, staged_bundle, write_manifest
from edgeopt.store.cache import cache_root, cached_step, step_key

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "generation_config.json", "chat_template.jinja", "config.json")

Reporter = Callable[[str], None]


def run_optimize(opts: OptimizeOptions, report: Reporter = print,
                 resolved: OptimizePlan | None = None) -> Manifest | None:
    """Run the model path; ``resolved`` is ``resolve(opts)`` when the caller already computed it."""
    res = resolved or resolve(opts)
    if opts.dry_run:
        return None
    with run_workbench() as workbench:
        return _run(opts, res, workbench, report)


def _run(opts: OptimizeOptions, res: OptimizePlan, workbench: Path, report: Reporter) -> Manifest:
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
    # The workbench is not part of the key: it names where this run keeps working files, not what is made.
    export_dir, export_meta, cached = cached_step(key, partial(run_exporter, exporter, current, quant=res.quant,
                                                               params={**export_params, "workbench": workbench}))
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
                                                                                     opts.eval_data, workbench)
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
                  res: OptimizePlan, report: Reporter) -> dict[str, Any]:
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


def _run_pass(name: str, params: dict[str, Any], current: Path, original: Path, opts: OptimizeOptions,
              res: OptimizePlan, report: Reporter) -> tuple[Path, PassRecord]:
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
