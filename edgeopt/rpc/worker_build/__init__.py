"""Building edgeopt's RPC worker and the head's libggml-rpc.so on the machine that runs them.

The wheel carries the worker's C++ sources (``native/``: llama.cpp's RPC server with a memory cap) and this
builder; llama.cpp's own sources come from the source distribution of the installed llama-cpp-python (its exact
version: head and worker then speak one RPC protocol version). :func:`.builder.ensure_built` builds once per
version into ~/.cache/edgeopt/rpc-worker-VERSION: ``edgeopt worker``, ``serve --workers`` and ``plan --workers``
on first use (edgeopt.rpc.binaries), ``make rpc-worker`` (scripts/build_rpc_worker.sh, ``python -m
edgeopt.rpc.worker_build``) ahead of time.
"""
