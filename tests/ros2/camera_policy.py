"""A step policy with a camera input, built with the ``onnx`` helper API (no torch: usable in both venvs).

``actions = tanh(W [state, image / 255 - 0.5] + b)``, with ``state = policy [B, 6]`` (joint_pos + joint_vel
of 3 joints) and ``image = camera_front uint8 [B, H, W, 3]`` flattened: every pixel moves the actions, so a
replay or a decoder that changes the image changes the commands. Unlike the exported VLA (a chunk policy,
timing-dependent), its commands are a pure function of the last state and image: a replay reproduces them
exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rslkit.deploy.metadata import PolicyMetadata, write_metadata

STATE_DIM, ACTION_DIM = 6, 3


def camera_policy(path: str | Path, height: int = 16, width: int = 16, seed: int = 0) -> Path:
    """Write the policy (one camera ``front`` of ``width x height``, 50 Hz) to ``path``."""
    rng = np.random.default_rng(seed)
    pixels = height * width * 3
    w = rng.standard_normal((STATE_DIM + pixels, ACTION_DIM)).astype(np.float32)
    w[:STATE_DIM] *= np.sqrt(1.0 / STATE_DIM)
    w[STATE_DIM:] *= 2.0 / np.sqrt(pixels)  # centred pixels: an image moves the actions as much as the state
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array((0.1 * rng.standard_normal(ACTION_DIM)).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([-1, pixels], np.int64), "flat_shape"),
        numpy_helper.from_array(np.array(1.0 / 255.0, np.float32), "inv255"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes = [
        helper.make_node("Cast", ["camera_front"], ["image_f"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["image_f", "flat_shape"], ["image_flat"]),
        helper.make_node("Mul", ["image_flat", "inv255"], ["image_scaled"]),
        helper.make_node("Sub", ["image_scaled", "half"], ["image_unit"]),
        helper.make_node("Concat", ["policy", "image_unit"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "w", "b"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["actions"]),
    ]
    inputs = [
        helper.make_tensor_value_info("policy", TensorProto.FLOAT, ["batch", STATE_DIM]),
        helper.make_tensor_value_info("camera_front", TensorProto.UINT8, ["batch", height, width, 3]),
    ]
    outputs = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", ACTION_DIM])]
    meta = PolicyMetadata(
        kind="step",
        algorithm="synthetic",
        obs_groups={"policy": [STATE_DIM], "camera_front": [height, width, 3]},
        action_dim=ACTION_DIM,
        input_names=["policy", "camera_front"],
        output_names=["actions"],
        control_rate_hz=50.0,
        obs_dtypes={"camera_front": "uint8"},
    )
    model = helper.make_model(
        helper.make_graph(nodes, "camera_step", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    write_metadata(model, meta)
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, str(path))
    return path
