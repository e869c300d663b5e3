"""Splitting a model across boards on llama.cpp's RPC backend (``edgeopt worker``, ``serve --workers``).

edgeopt does not distribute anything itself: each worker runs llama.cpp's RPC server (with a memory cap,
built on first use from the sources of the installed llama-cpp-python: :mod:`.worker_build`), and the head
hands layers to it through llama.cpp's RPC devices. What lives here is what llama.cpp leaves out: talking to a
worker before llama.cpp does (:mod:`.protocol`: is it there, which protocol version, how much memory), finding
the build (:mod:`.binaries`), starting a worker on a safe address (:mod:`.worker`), and parsing ``host:port``
lists (:mod:`.endpoints`).
"""
