"""Graph fusions of onnxruntime's transformer optimizer, applied to an exported decoder before INT4.

optimum's decoder graph spells RMSNorm, the residual adds and rotary embeddings out in dozens of
small nodes per layer; at decode time (one token per sequence) their dispatch costs rival the
matmuls of a small model. onnxruntime's optimizer (the "gpt2" fusion set, which covers RoPE
decoders) replaces them by SkipSimplifiedLayerNormalization and RotaryEmbedding contrib ops. The
fused graph is kept only if it agrees with the unfused one on a probe sequence; otherwise the
unfused graph is used and the reason recorded, so a fusion that mis-handles an architecture can
never ship.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

FUSED_KL_LIMIT = 1e-5  # fused and unfused fp32 graphs differ by kernel rounding only
SMALL_INITIALIZER_BYTES = 1 << 20  # below this an external initializer is read for the fusions; above, only named


def fuse_decoder(src: Path, dst: Path, threads: int = 2) -> dict[str, Any]:
    """Write the fused graph of src to dst if it validates; returns what happened (dst unwritten if not)."""
    config = json.loads((src.parent / "config.json").read_text())
    try:
        import onnx
        from onnxruntime.transformers.optimizer import optimize_model

        logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
        # opt_level 0: python fusions only; the session applies its own optimizations at load time.
        model = optimize_model(_graph_without_matrices(src), model_type="gpt2",
                               num_heads=int(config["num_attention_heads"]), hidden_size=int(config["hidden_size"]),
                               opt_level=0)
        fused = {op: n for op, n in model.get_fused_operator_statistics().items() if n}
        if not fused:
            return {"applied": False, "reason": "no fusion matched this graph"}
        _trim_rotary_caches(model.model, int(config.get("max_position_embeddings", 2048)))
        # The matrices still name the export's data file, which sits in the same folder.
        onnx.save(model.model, str(dst))
    except Exception as exc:  # the optimizer's pattern matchers raise assorted errors on unknown graphs
        return {"applied": False, "reason": f"{exc.__class__.__name__}: {exc}"}
    kl = _probe_kl(src, dst, threads)
    if not kl <= FUSED_KL_LIMIT:
        for path in dst.parent.glob(dst.name + "*"):
            path.unlink()
        return {"applied": False, "reason": f"fused graph disagrees with the export: KL {kl:.3g}"}
    return {"applied": True, "fused_ops": fused, "kl_vs_unfused": kl}


def _trim_rotary_caches(model: Any, max_positions: int) -> None:
    """The fusion tabulates cos/sin for 131072 positions (tens of MB); keep the model's own range only.

    Positions past max_position_embeddings never reach the graph: the runtime caps the context there.
    """
    from onnx import numpy_helper

    names = {n.input[i] for n in model.graph.node if n.op_type == "RotaryEmbedding" for i in (2, 3)}
    for init in model.graph.initializer:
        if init.name in names and init.dims[0] > max_positions:
            table = numpy_helper.to_array(init)[:max_positions]
            init.CopyFrom(numpy_helper.from_array(table.copy(), init.name))


def _probe_kl(reference: Path, candidate: Path, threads: int) -> float:
    from edgeopt.measuring.metrics import mean_kl
    from edgeopt.exporters.onnx.validate import probe_token_ids
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session

    ref = DecoderSession(create_session(reference, threads, ["CPUExecutionProvider"]))
    cand = DecoderSession(create_session(candidate, threads, ["CPUExecutionProvider"]))
    ids = probe_token_ids(ref.vocab_size)
    # Two chunks, so the fused rotary and attention are checked with a KV cache too.
    return mean_kl(ref.logits_for(ids, chunk=len(ids) // 2), cand.logits_for(ids, chunk=len(ids) // 2))


def _graph_without_matrices(src: Path) -> Any:
    """``src``'s graph with the initializers of its external data file left there, but the small ones (norm
    weights, rotary frequencies) read: the fusions match on names and those values only. Loaded whole, a 2 GB
    graph took 77 s and 13 GB (the optimizer copies the model several times); without its matrices, 4 s."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    model = onnx.load(str(src), load_external_data=False)
    for init in model.graph.initializer:
        if uses_external_data(init) and int(np.prod(init.dims)) * 4 < SMALL_INITIALIZER_BYTES:
            load_external_data_for_tensor(init, str(src.parent))
            init.data_location = onnx.TensorProto.DEFAULT
            del init.external_data[:]
    return model
