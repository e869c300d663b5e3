"""The HTTP face of the serving engine: OpenAI-compatible routes, SSE streaming, /health, /metrics.

Read in this order: :mod:`.app` (the factory and what it wires), :mod:`.routes_openai` (the request
path), :mod:`.streaming` (SSE and client disconnects), :mod:`.launcher` (bundle -> runtime -> engine ->
uvicorn). Nothing here imports torch or transformers.
"""
