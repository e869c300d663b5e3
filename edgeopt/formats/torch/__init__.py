"""Torch bundles (the checkpoint in a dtype) served by transformers (exporter: edgeopt.exporters.torch.exporter,
runtime: edgeopt.runtimes.torch)."""
