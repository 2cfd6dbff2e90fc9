"""Deployment: ONNX export, the ONNX Runtime policy and the asynchronous action-chunk inference engine."""
