"""ONNX bundles served by ONNX Runtime (exporter: edgeopt.exporters.onnx, runtime: edgeopt.runtimes.onnxruntime)."""
