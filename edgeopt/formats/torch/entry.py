"""The torch entry: the GPU targets' format, its "quants" the checkpoint's dtypes."""

from __future__ import annotations

from types import MappingProxyType

from edgeopt.formats.entry import Backend, ExportSpec, ServingSpec
from edgeopt.formats.memory_model import MemoryModel
from edgeopt.formats.quant_table import QuantTable, quants_of_width

MIB = 1024**2

ENTRY = Backend(
    format="torch", runtime="torch",
    quants=QuantTable(
        quants=(*quants_of_width(32, "fp32"), *quants_of_width(16, "fp16", "bf16")),
        device_candidates="edgeopt.exporters.torch.sizes:torch_candidates",  # half precision on CUDA, else fp32
        size_estimate="edgeopt.exporters.torch.sizes:estimate_torch_bytes",
        help_examples=("fp16", "bf16"),
    ),
    # Measured on an H100 (torch 2.11, transformers 5.17, paged engine): besides weights and KV the server's GPU
    # held 1175 MiB (CUDA context, cuBLAS workspaces, the batch's buffers); the 600 MiB this was put at let a
    # Jetson-sized pool overflow by 242 MiB.
    memory=MemoryModel(kv_element_bytes=2, runtime_overhead_bytes=1280 * MIB,
                       kv_element_bytes_by_quant=MappingProxyType({"fp32": 4})),  # KV in the checkpoint's dtype
    serving=ServingSpec(runtime_module="edgeopt.runtimes.torch",
                        own_engine="edgeopt.paged_batching:engine_for"),  # on CUDA; on CPU our Engine drives it
    export=ExportSpec(exporter_module="edgeopt.exporters.torch.exporter",
                      scorer="edgeopt.exporters.torch.scorer:load_scorer"),
    planned_by_default=False,  # planned only when asked for: it is the GPU targets' format
)
