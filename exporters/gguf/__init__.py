"""GGUF export: our own HF -> GGUF writer on the ``gguf`` library, quantized by llama.cpp."""
