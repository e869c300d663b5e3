"""Bundle formats, one package each: the descriptor (``<format>/entry.py``'s ``ENTRY``) that edgeopt.backends
registers, and the pure-Python facts it declares (quant table, memory model). Everything else a format has
(exporter, runtime, scorer) lives in its own packages and is named by the entry, imported only when needed.

Light on purpose: the serving path reads these modules, so they import nothing heavier than edgeopt.errors and
edgeopt.sizing.layout. Adding a format: a package like these (or anywhere: tests/fourth_format) and one line
in edgeopt.backends.BUILT_IN (or ``backends.register(ENTRY)`` from a plugin).
"""
