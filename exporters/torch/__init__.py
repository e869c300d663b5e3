"""``--format torch``: the (pruned, distilled) checkpoint itself as safetensors (exporter.py), its scorer and its sizes."""
