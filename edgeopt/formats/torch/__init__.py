"""Torch bundles (the checkpoint in a dtype) served by transformers (exporter: edgeopt.exporters.torch_export,
runtime: edgeopt.runtimes.torch)."""
