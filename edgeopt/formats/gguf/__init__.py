"""GGUF bundles served by llama.cpp (exporter: edgeopt.exporters.gguf, runtime: edgeopt.runtimes.llama_cpp)."""
