"""Sizing: how a model is served in a memory pool, decided in one place for ``plan``, ``optimize`` and ``serve``.

    budget.py            the memory pool and the KV arithmetic (size_kv): budget, cells that fit, sequences
    kv_types.py          bytes per cached element of each KV cache type (--kv-type)
    layout.py            llama.cpp's KV layouts (unified, streams), the auto rule and the split into streams
    kv_choice.py         the KV type a model is sized with: asked, recorded, default, or a plan's tight type
    shape.py             ServingShape: the one frozen value a server is started with (decide_serving_shape)
    cells.py             its KV cells by purpose (live sequences, cached prefixes)
    resident.py          the resident memory serve reaches in a shape: what `edgeopt plan` promises
    manifest_section.py  the manifest's typed ``kv`` section (what optimize records for serve)
    bundle_facts.py      a bundle's sizing facts, read from that section (or from older manifests)

Arithmetic only: nothing here loads a model, and the serving path may import all of it.
"""
