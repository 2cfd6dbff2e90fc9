"""Small rslkit-format ONNX policies built with the ``onnx`` helper API (no torch needed).

For trying the ROS 2 node without a trained checkpoint, and for its tests and benchmarks in the ROS virtual
environment, which has no torch. The graphs carry the same ``rslkit`` metadata as exported policies.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rslkit.deploy.metadata import PolicyMetadata, write_metadata

OPSET = 17
IR_VERSION = 8


def _mlp(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], x: str, sizes: list[int], rng: np.random.Generator
) -> str:
    """Append ``tanh`` hidden layers and a linear head for ``sizes = [in, h1, ..., out]``; returns the output."""
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        b = (0.1 * rng.standard_normal(fan_out)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        y = f"gemm{i}"
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [y]))
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Tanh", [y], [f"tanh{i}"]))
            y = f"tanh{i}"
        x = y
    return x


def _nan_gate(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], obs: str, index: int) -> str:
    """``0 * sqrt(obs[:, index])``: zero while that input is >= 0, NaN when it is negative (``[B, 1]``)."""
    inits += [
        numpy_helper.from_array(np.array([index], np.int64), "nan_start"),
        numpy_helper.from_array(np.array([index + 1], np.int64), "nan_end"),
        numpy_helper.from_array(np.array([1], np.int64), "nan_axis"),
        numpy_helper.from_array(np.zeros((), np.float32), "nan_zero"),
    ]
    nodes += [
        helper.make_node("Slice", [obs, "nan_start", "nan_end", "nan_axis"], ["nan_in"]),
        helper.make_node("Sqrt", ["nan_in"], ["nan_sqrt"]),
        helper.make_node("Mul", ["nan_sqrt", "nan_zero"], ["nan_gate"]),
    ]
    return "nan_gate"


def mlp_policy(
    path: str | Path,
    obs_dim: int,
    action_dim: int,
    hidden: tuple[int, ...] = (64, 64),
    control_rate_hz: float | None = 50.0,
    seed: int = 0,
    nan_when_negative: int | None = None,
    joint_names: list[str] | None = None,
) -> Path:
    """Write a step policy ``policy [B, obs_dim] -> actions [B, action_dim]`` (random tanh MLP) to ``path``.

    Args:
        joint_names: the joints the actions command, stored in the metadata as an exported task's would be.
        nan_when_negative: index of an observation entry that turns every action NaN while it is negative
            (exercises a deployment's non-finite-output handling).
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    out = _mlp(nodes, inits, "policy", [obs_dim, *hidden, action_dim], rng)
    if nan_when_negative is not None:
        gate = _nan_gate(nodes, inits, "policy", nan_when_negative)
        nodes.append(helper.make_node("Add", [out, gate], ["gated"]))
        out = "gated"
    nodes.append(helper.make_node("Identity", [out], ["actions"]))
    meta = PolicyMetadata(
        kind="step",
        algorithm="synthetic",
        obs_groups={"policy": [obs_dim]},
        action_dim=action_dim,
        input_names=["policy"],
        output_names=["actions"],
        control_rate_hz=control_rate_hz,
        joint_names=joint_names,
    )
    inputs = [helper.make_tensor_value_info("policy", TensorProto.FLOAT, ["batch", obs_dim])]
    outputs = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", action_dim])]
    return _save(path, nodes, inits, inputs, outputs, meta)


def chunk_policy(
    path: str | Path,
    obs_dim: int,
    action_dim: int,
    chunk_length: int,
    hidden: tuple[int, ...] = (64, 64),
    control_rate_hz: float | None = 50.0,
    seed: int = 0,
    noise_scale: float = 0.0,
    future_state_slice: tuple[int, int] | None = None,
    max_future_offset: int = 0,
) -> Path:
    """Write a chunk policy ``(policy [B, D], noise [B, Ta, A]) -> chunk [B, Ta, A]`` (MLP + ``noise_scale *
    noise``) to ``path``.

    Args:
        future_state_slice: ``(start, stop)``: add a ``future_state [B, stop - start]`` input (VLASH offsets up to
            ``max_future_offset``), concatenated to the observation before the MLP.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = [
        numpy_helper.from_array(np.array([-1, chunk_length, action_dim], np.int64), "chunk_shape"),
        numpy_helper.from_array(np.array(noise_scale, np.float32), "noise_scale"),
    ]
    x, width, extra = "policy", obs_dim, []
    if future_state_slice is not None:
        state_dim = future_state_slice[1] - future_state_slice[0]
        nodes.append(helper.make_node("Concat", ["policy", "future_state"], ["policy_and_future"], axis=1))
        x, width = "policy_and_future", obs_dim + state_dim
        extra = [helper.make_tensor_value_info("future_state", TensorProto.FLOAT, ["batch", state_dim])]
    flat = _mlp(nodes, inits, x, [width, *hidden, chunk_length * action_dim], rng)
    nodes += [
        helper.make_node("Reshape", [flat, "chunk_shape"], ["mean_chunk"]),
        helper.make_node("Mul", ["noise", "noise_scale"], ["scaled_noise"]),
        helper.make_node("Add", ["mean_chunk", "scaled_noise"], ["chunk"]),
    ]
    meta = PolicyMetadata(
        kind="chunk",
        algorithm="synthetic",
        obs_groups={"policy": [obs_dim]},
        action_dim=action_dim,
        input_names=["policy", "noise"] + (["future_state"] if extra else []),
        output_names=["chunk"],
        control_rate_hz=control_rate_hz,
        chunk_length=chunk_length,
        num_flow_steps=1,
        noise_shape=[chunk_length, action_dim],
        future_state_slice=list(future_state_slice) if future_state_slice is not None else None,
        max_future_offset=max_future_offset,
    )
    inputs = [
        helper.make_tensor_value_info("policy", TensorProto.FLOAT, ["batch", obs_dim]),
        helper.make_tensor_value_info("noise", TensorProto.FLOAT, ["batch", chunk_length, action_dim]),
        *extra,
    ]
    outputs = [helper.make_tensor_value_info("chunk", TensorProto.FLOAT, ["batch", chunk_length, action_dim])]
    return _save(path, nodes, inits, inputs, outputs, meta)


def _save(
    path: str | Path,
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    meta: PolicyMetadata,
) -> Path:
    graph = helper.make_graph(nodes, "rslkit_synthetic", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    write_metadata(model, meta)
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, str(path))
    return path
