"""ONNX export (optimum-onnx) and ONNX Runtime quantization."""
