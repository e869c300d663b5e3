"""A fourth bundle format, added the way a new backend is: one registry entry (:data:`ENTRY`) plus its own
modules here (exporter, runtime, scorer, size estimate). Nothing in edgeopt, exporters, runtimes or
profiles is edited for it; tests/test_fourth_format.py registers it and drives plan, optimize and serve.

The format "npz-fake" holds a seed for tests.fixtures.fake_runtime.FakeRuntime (a deterministic numpy
model with a byte tokenizer): what is under test is the plumbing around a format, not a model.
"""

from __future__ import annotations

from edgeopt.backends import MIB, Backend

ENTRY = Backend(
    format="npz-fake", runtime="fake_numpy", exporter_module="tests.fourth_format.exporter",
    runtime_module="tests.fourth_format.runtime", scorer="tests.fourth_format.scorer:load_scorer",
    quants="tests.fourth_format.sizes:QUANTS", size_estimate="tests.fourth_format.sizes:estimate_bytes",
    quant_candidates=("fp32", "fp16"), kv_element_bytes=4, kv_element_bytes_by_quant={"fp16": 2},
    runtime_overhead_bytes=3 * MIB,
)
