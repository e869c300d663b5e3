"""``edgeopt monitor``: a textual dashboard that polls a server's /metrics and /v1/edgeopt/requests.

Layers, each importable on its own: metrics_parse (text -> values), window (values over time ->
figures), client (HTTP), widgets + app (drawing); ``--bundle`` starts a server with edgeopt.server.startup.serve_process.
Nothing here imports torch or transformers.
"""
