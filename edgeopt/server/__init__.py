"""The HTTP side of the serving engine: one package per API face around a neutral chat core.

Read in this order: :mod:`.app` (the factory and the faces it wires, :mod:`.faces`), one face's ``routes``
(e.g. :mod:`.openai.routes`), :mod:`.chat.prepare` (the path every face's request takes: decide, render,
size), :mod:`.generation.respond` (admission, streaming, client disconnects), :mod:`.launcher` (bundle ->
runtime -> engine -> uvicorn). Nothing here imports torch or transformers.
"""
