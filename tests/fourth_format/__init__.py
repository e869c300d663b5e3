"""A fourth bundle format, added the way a new backend is: its package (here) and one registration line,
``backends.register(ENTRY)``. Nothing in edgeopt, exporters, runtimes or profiles is edited for it;
tests/test_fourth_format.py registers it and drives plan, optimize, the quality floor, the CLI help and serve.

Everything the rest of edgeopt needs is reached from :data:`ENTRY`: the quant table (names, weight bits, planner
candidates, --quant help, quality-floor remedies), the memory model (memory.py), the runtime (runtime.py), the
exporter and its options (exporter.py), the scorer (scorer.py) and the size estimate (sizes.py).

The format "npz-fake" holds a seed for tests.fixtures.fake_runtime.FakeRuntime (a deterministic numpy
model with a byte tokenizer): what is under test is the plumbing around a format, not a model. Its "8da4w"
quant is named like ExecuTorch's (8-bit dynamic activations, 4-bit weights): 4 bits for the quality floor.
"""

from __future__ import annotations

from edgeopt.formats.entry import Backend, ExportOption, ExportSpec, ServingSpec
from edgeopt.formats.memory_model import MemoryModel
from edgeopt.formats.quant_table import Quant, QuantTable

MIB = 1024**2

QUANT_TABLE = QuantTable(
    quants=(Quant("fp32", 32), Quant("fp16", 16), Quant("8da4w", 4, remedy="use --quant fp16")),
    candidates=("fp32", "fp16"), size_estimate="tests.fourth_format.sizes:estimate_bytes",
    help_examples=("fp16", "8da4w"),
)

ENTRY = Backend(
    format="npz-fake", runtime="fake_numpy", quants=QUANT_TABLE,
    memory=MemoryModel(kv_element_bytes=4, kv_element_bytes_by_quant={"fp16": 2, "8da4w": 2},
                       runtime_overhead_bytes=3 * MIB, weights_extra="tests.fourth_format.memory:weights_extra_bytes"),
    serving=ServingSpec(runtime_module="tests.fourth_format.runtime"),
    export=ExportSpec(exporter_module="tests.fourth_format.exporter", scorer="tests.fourth_format.scorer:load_scorer",
                      options={"seed_salt": ExportOption(quants=("8da4w",))}),
)
