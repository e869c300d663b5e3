"""ONNX Runtime quantization of an exported fp32 model: weight-only INT8 and INT4 (MatMulNBits), dynamic
INT8, static INT8 (QDQ).

Decoders get weight-only INT8 by default: dynamic INT8 quantizes each activation tensor with one scale,
and a trained decoder's activations carry outlier channels a hundred times the others, so that one
scale leaves the ordinary channels a few levels each (SmolLM2-135M-Instruct: KL 0.46, top-1 agreement
62% against the original). MatMulNBits keeps a scale per block of 32 weights and, at accuracy level 4,
quantizes activations per block of 32 too, so an outlier only coarsens its own block (KL 0.003, 96%;
tests/bench/bench_onnx_quality.py).

Settings that depend on the CPU come from an ISA preset chosen by the target profile's ``cpu_isa``:
AVX2 without VNNI multiplies u8 x s8 with an instruction that can saturate, so its weights are
quantized to 7 bits (``reduce_range``); VNNI and ARM dot-product units do not need that. MatMulNBits
computes in int8 (accuracy level 4) on every preset: the kernels exist for all three.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError, ExportError, MissingDependencyError
from edgeopt.exporters.input_energy import InputEnergy
from edgeopt.exporters.onnx.embedding_quant import quantize_embedding
from edgeopt.exporters.onnx.int4.rewrite import float_weights, weigh_int4_blocks
from edgeopt.exporters.onnx.quant_types import INT4_INT8_ROLES
from edgeopt.profiles.instruction_sets import CONSERVATIVE_X86, INSTRUCTION_SETS

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
INT8_METHODS = ("weight-only", "dynamic")  # what --quant int8 does (static INT8 is its own quant: int8-static)
INT4_MIXES = ("sensitive-int8", "uniform")
# weighted (default): each block's scale and integer zero point searched for the least squared error weighted by
# the calibration text's activations (exporters/onnx/int4/search.py), int8 compute. rtn: onnxruntime's round to
# nearest, symmetric, int8 compute. hqq: half-quadratic optimisation of each block's scale and float zero point
# (onnxruntime's HQQ; torch, minutes per 100M weights on 2 cores); its MatMulNBits computes in fp32. On the
# SmolLM2 fixture hqq is near exact (KL 0.0001) because that checkpoint's weights sit on Q4_1's grid, which a
# float zero point represents: an upper bound, not a forecast.
# gptq (only with --size): exporters/onnx/int4/gptq.py.
INT4_ALGORITHMS = ("weighted", "gptq", "rtn", "hqq")
# INT4_INT8_ROLES (the MatMuls --int4-mix sensitive-int8 keeps in 8 bits) lives in quant_types, which the planner
# sizes the same mix with. llama.cpp's Q4_K_M gives attn_v, ffn_down and the output layer more bits for the same
# reason: measured on SmolLM2-135M-Instruct, INT4 everywhere costs KL 0.27 (top-1 72%); v, o and down in INT8
# (33% of the weights) 0.084 (86%), where v and down alone give 0.099 and the MLP's gate and up 0.218
# (tests/bench/bench_onnx_quality.py).
WEIGHT_ONLY_INT8_BLOCK = 32
INT4_BLOCK_SIZES = (16, 32, 64, 128, 256)
# Friendly names for --keep-fp, matched against ONNX node names (optimum names nodes after modules).
KEEP_FP_ALIASES = {"lm_head": "lm_head", "embeddings": "embed", "embed_tokens": "embed"}


@dataclass(frozen=True)
class IsaPreset:
    name: str
    reduce_range: bool
    per_channel: bool
    int4_accuracy_level: int  # MatMulNBits compute type: 1 fp32, 2 fp16, 3 bf16, 4 int8


# One preset per entry of the one instruction-set table (edgeopt.profiles.instruction_sets): 7-bit weights
# (reduce_range) where its int8 products saturate; per-channel scales and int8 MatMulNBits compute on all.
ISA_PRESETS = {isa.name: IsaPreset(isa.name, reduce_range=isa.int8_products_saturate, per_channel=True,
                                   int4_accuracy_level=4) for isa in INSTRUCTION_SETS}


def isa_preset(cpu_isa: str | None) -> IsaPreset:
    if cpu_isa is None:
        return ISA_PRESETS[CONSERVATIVE_X86]  # correct on every x86-64 CPU
    if cpu_isa not in ISA_PRESETS:
        raise ConfigError(f"unknown cpu_isa {cpu_isa!r} for ONNX quantization", f"valid: {', '.join(ISA_PRESETS)}")
    return ISA_PRESETS[cpu_isa]


def matching_nodes(model_path: Path, patterns: list[str]) -> list[str]:
    """Names of nodes to keep in float: every node whose name contains one of the patterns."""
    import onnx

    if not patterns:
        return []
    graph = onnx.load(str(model_path), load_external_data=False).graph
    names = [n.name for n in graph.node]
    chosen: list[str] = []
    for pattern in patterns:
        needle = KEEP_FP_ALIASES.get(pattern, pattern)
        hits = [n for n in names if needle in n and n not in chosen]
        if not hits and not any(needle in n for n in chosen):
            examples = ", ".join([n for n in names if n.endswith(("MatMul", "Gather"))][:6])
            raise ConfigError(f"--keep-fp {pattern!r} matches no node of {model_path.name}",
                              f"use lm_head, embeddings, or part of a node name such as: {examples}")
        chosen += hits
    return chosen


def weight_matmuls(model_path: Path, excluded: list[str]) -> list[str]:
    """MatMul/Gemm nodes whose second input is a stored weight.

    QDQ mode ignores the MatMulConstBOnly option, and quantizing activation x activation products
    (attention scores, rotary tables) to 8 bits wrecks a decoder, so static quantization is given
    this explicit node list instead.
    """
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    weights = {init.name for init in graph.initializer}
    return [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1
            and n.input[1] in weights and n.name not in excluded]


def _external(model_path: Path) -> bool:
    """Protobuf cannot hold more than 2 GB: bigger models keep weights in a side file."""
    return sum(p.stat().st_size for p in model_path.parent.iterdir() if p.is_file()) > 1_800_000_000


def quantize_dynamic_int8(src: Path, dst: Path, preset: IsaPreset, keep_fp: list[str]) -> dict[str, Any]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    excluded = matching_nodes(src, keep_fp)
    quantize_dynamic(
        str(src), str(dst), weight_type=QuantType.QInt8, per_channel=preset.per_channel,
        reduce_range=preset.reduce_range, op_types_to_quantize=["MatMul", "Gemm"], nodes_to_exclude=excluded,
        use_external_data_format=_external(src), extra_options={"MatMulConstBOnly": True},
    )
    return {"method": "dynamic", "weight_type": "int8", "excluded_nodes": excluded, "isa": asdict(preset)}


def quantize_static_int8(src: Path, dst: Path, preset: IsaPreset, keep_fp: list[str], reader: Any,
                         method: str) -> dict[str, Any]:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    if method not in methods:
        raise ConfigError(f"unknown --calibration-method {method!r}", f"valid: {', '.join(CALIBRATION_METHODS)}")
    excluded = matching_nodes(src, keep_fp)
    quantize_static(
        str(src), str(dst), reader, quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul", "Gemm"],
        per_channel=preset.per_channel, reduce_range=preset.reduce_range, activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8, nodes_to_quantize=weight_matmuls(src, excluded), nodes_to_exclude=excluded,
        calibrate_method=methods[method],
        use_external_data_format=_external(src),
        # MatMulConstBOnly: activations x activations products (attention scores) stay float.
        extra_options={"MatMulConstBOnly": True, "CalibMovingAverage": method == "minmax"},
    )
    return {"method": "static-qdq", "calibration_method": method, "calibration_samples": reader.count,
            "excluded_nodes": excluded, "isa": asdict(preset)}


def quantize_int4(src: Path, dst: Path, preset: IsaPreset, keep_fp: list[str], block_size: int = 32,
                  accuracy_level: int | None = None, mix: str = "sensitive-int8", algorithm: str = "weighted",
                  energy: InputEnergy | None = None, table: bool = False) -> dict[str, Any]:
    """4-bit MatMulNBits (``mix``: some roles in 8 bits). ``energy``: the calibration text's statistics the
    weighted search weighs blocks by (None: each weight by its own square). ``table``: the token embedding in
    8 bits too (exporters/onnx/embedding_quant.py). A mix chosen for a size: exporters/onnx/int4/sized.py."""
    if block_size not in INT4_BLOCK_SIZES:
        raise ConfigError(f"--int4-block-size {block_size} is not supported",
                          f"valid: {', '.join(map(str, INT4_BLOCK_SIZES))}")
    if mix not in INT4_MIXES:
        raise ConfigError(f"unknown --int4-mix {mix!r}", f"valid: {', '.join(INT4_MIXES)}")
    if algorithm not in INT4_ALGORITHMS:
        raise ConfigError(f"unknown --int4-algorithm {algorithm!r}", f"valid: {', '.join(INT4_ALGORITHMS)}")
    if mix == "uniform":
        return {**_matmul_nbits(src, dst, preset, keep_fp, 4, block_size, accuracy_level, algorithm=algorithm,
                                energy=energy, table=table), "mix": mix}
    import tempfile

    eight_bit = [n for n in weight_matmuls(src, matching_nodes(src, keep_fp))
                 if any(f"/{role}/" in n for role in INT4_INT8_ROLES)]
    with tempfile.TemporaryDirectory(prefix="edgeopt-int4-", dir=dst.parent) as tmp:
        four = Path(tmp) / "model.int4.onnx"
        info = _matmul_nbits(src, four, preset, keep_fp, 4, block_size, accuracy_level, extra_fp=eight_bit,
                             algorithm=algorithm, energy=energy)
        # The second pass finds only the MatMuls the first one left: the eight-bit ones and those kept in float.
        last = _matmul_nbits(four, dst, preset, keep_fp, 8, WEIGHT_ONLY_INT8_BLOCK, accuracy_level, table=table)
    return {**info, "mix": mix, "int8_nodes": len(eight_bit), "int8_roles": list(INT4_INT8_ROLES),
            **({"embedding": last["embedding"]} if "embedding" in last else {})}


def quantize_weight_only_int8(src: Path, dst: Path, preset: IsaPreset, keep_fp: list[str],
                              accuracy_level: int | None = None, table: bool = False) -> dict[str, Any]:
    """INT8 weights in blocks of 32 with one fp32 scale each; activations stay float between MatMuls. ``table``:
    the token embedding too."""
    info = _matmul_nbits(src, dst, preset, keep_fp, 8, WEIGHT_ONLY_INT8_BLOCK, accuracy_level, table=table)
    return {**info, "method": "weight-only"}


def _matmul_nbits(src: Path, dst: Path, preset: IsaPreset, keep_fp: list[str], bits: int, block_size: int,
                  accuracy_level: int | None, extra_fp: list[str] | None = None, algorithm: str = "rtn",
                  energy: InputEnergy | None = None, table: bool = False) -> dict[str, Any]:
    """MatMulNBits for every MatMul with a stored weight, except keep_fp's nodes (and extra_fp's, left for a
    later pass). 8 bits are always symmetric round-to-nearest."""
    level = preset.int4_accuracy_level if accuracy_level is None else accuracy_level
    if level not in (0, 1, 2, 3, 4):
        raise ConfigError(f"MatMulNBits accuracy level {level} is invalid",
                          "use 0 (unset), 1 fp32, 2 fp16, 3 bf16 or 4 int8")
    try:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                     HQQWeightOnlyQuantConfig, MatMulNBitsQuantizer)
    except ImportError as exc:  # the quantizer imports onnx_ir in recent onnxruntime releases
        raise MissingDependencyError(f"INT{bits} weight-only quantization needs {exc.name or 'onnx-ir'}",
                                     "pip install onnx-ir  (or pip install 'edgeopt[optimize]')") from exc
    excluded = matching_nodes(src, keep_fp)
    skipped = excluded + list(extra_fp or [])
    algorithm = algorithm if bits == 4 else "rtn"
    symmetric = algorithm == "rtn"  # the weighted search starts from asymmetric blocks and rewrites them
    if algorithm == "hqq":  # asymmetric with float zero points; the quantizer writes no accuracy level (fp32)
        config: Any = HQQWeightOnlyQuantConfig(block_size=block_size, bits=bits)
        level = 0
    else:
        config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric, accuracy_level=level,
                                              bits=bits)
    model = onnx.load(str(src))
    weights = float_weights(model, set(skipped)) if algorithm == "weighted" else {}
    quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=block_size, is_symmetric=symmetric,
                                     accuracy_level=level, nodes_to_exclude=skipped, algo_config=config)
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    quantizer.process()
    searched = weigh_int4_blocks(quantizer.model.model, weights, energy, block_size) if weights else {}
    embedding = quantize_embedding(quantizer.model.model, excluded, level) if table else None
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=_external(src))
    return {"method": "matmul_nbits", "algorithm": algorithm, "bits": bits, "block_size": block_size,
            "symmetric": symmetric, "accuracy_level": level, **searched, "excluded_nodes": excluded,
            "isa": asdict(preset), **({"embedding": embedding} if embedding else {})}


def check_quantized(dst: Path, quant: str) -> None:
    """Fail loudly if a quantizer silently produced an unchanged graph (e.g. no node matched)."""
    import onnx

    ops = {n.op_type for n in onnx.load(str(dst), load_external_data=False).graph.node}
    expected = {"int8": "MatMulInteger", "int8-static": "QuantizeLinear", "int4": "MatMulNBits"}[quant]
    alternatives = {"int8": {"MatMulInteger", "DynamicQuantizeMatMul", "MatMulNBits"}}.get(quant, {expected})
    if not ops & alternatives:
        raise ExportError(f"{quant} quantization of {dst.name} produced no {expected} node",
                          "the model has no quantizable MatMul; report this model to edgeopt")
