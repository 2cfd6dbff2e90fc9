"""Policies as ONNX files inside weight messages: the learner exports, the robot loads, neither touches pickle.

A real-world learner pushes ``wire.Weights`` whose arrays are ``{"policy.onnx": uint8 [n]}``, the bytes of an
exported policy (:mod:`rslkit.deploy.export`, metadata and normalizers inside). :func:`onnx_weight_arrays` makes
them from a live torch policy on the learner; :func:`onnx_policy_from_arrays` turns them back into an
:class:`~rslkit.deploy.onnx_policy.OnnxPolicy` on the robot. Importing this module loads no torch (the export is
imported when :func:`onnx_weight_arrays` is called), so the robot side uses it as it is.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rslkit.deploy.onnx_policy import OnnxPolicy

POLICY_KEY = "policy.onnx"
"""The weight array that holds the ONNX file."""


def onnx_weight_arrays(
    policy: Any,
    env: Any | None = None,
    algorithm: str = "sac",
    *,
    task: str | None = None,
    obs_dims: dict[str, int] | None = None,
    control_rate_hz: float | None = None,
    names: dict[str, Any] | None = None,
    opset: int | None = None,
) -> dict[str, np.ndarray]:
    """Export ``policy`` to ONNX in memory: ``{"policy.onnx": uint8 [n]}``, ready for ``LearnerServer.publish_weights``.

    Sizes, control rate and names come from ``env`` (one observation, as :func:`rslkit.deploy.export.
    load_checkpoint_policy` reads them) unless given. The policy's train/eval mode is restored afterwards, so a
    learner can call this between updates (a policy on a GPU is exported from a CPU copy). For the learner's
    ``(policy) -> arrays`` callable bind the rest: ``functools.partial(onnx_weight_arrays, env=env, task="pendulum")``.

    Args:
        policy: an ``SACModel``, ``ActorCritic`` or ``FlowPolicy`` (see :func:`rslkit.deploy.export.plan_export`).
        env: the task's VecEnv (any number of envs), for sizes and metadata; None: pass ``obs_dims``.
        algorithm: the algorithm name written to the metadata.
        task, obs_dims, control_rate_hz, names: override what ``env`` says (``names``: ``action_names``,
            ``joint_names``, ``obs_names``).
        opset: ONNX opset (default: the exporter's).

    Raises:
        ValueError: for a policy the exporter does not support, or sizes it cannot infer.
    """
    import torch

    from rslkit.deploy.export import DEFAULT_OPSET, env_names, export_plan, plan_export
    from rslkit.envs.vec_env import control_period

    if env is not None:
        obs = env.get_observations()
        obs_dims = obs_dims or {k: int(obs[k].shape[-1]) for k in obs.keys() if obs[k].dim() == 2}
        period = control_period(env)
        control_rate_hz = control_rate_hz or (1.0 / period if period else None)
        names = env_names(env) if names is None else names
    if next(iter(policy.parameters()), torch.zeros(())).device.type != "cpu":  # a GPU learner: trace a CPU copy
        policy = copy.deepcopy(policy).cpu()
    training = policy.training
    try:
        plan = plan_export(
            policy, algorithm, obs_dims=obs_dims, task=task, control_rate_hz=control_rate_hz, names=names
        )
        with tempfile.TemporaryDirectory(prefix="rslkit-onnx-") as tmp:
            path = Path(tmp) / "policy.onnx"
            export_plan(plan, path, DEFAULT_OPSET if opset is None else opset)
            data = path.read_bytes()
    finally:
        policy.train(training)
    return {POLICY_KEY: np.frombuffer(data, np.uint8).copy()}


def onnx_policy_from_arrays(
    arrays: Mapping[str, np.ndarray], intra_op_threads: int = 1, check_outputs: bool = True
) -> OnnxPolicy:
    """The :class:`OnnxPolicy` in weight arrays made by :func:`onnx_weight_arrays` (torch-free).

    Raises:
        ValueError: when ``arrays`` holds no ``policy.onnx`` uint8 array, or its bytes are no rslkit ONNX policy.
    """
    data = arrays.get(POLICY_KEY)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 1 or data.size == 0:
        got = {k: f"{v.dtype} {list(v.shape)}" for k, v in arrays.items()}
        raise ValueError(
            f"These weights hold no ONNX policy: expected a '{POLICY_KEY}' uint8 [n] array, got {got}; publish "
            "rslkit.deploy.onnx_weights.onnx_weight_arrays(policy, env)."
        )
    # ONNX Runtime reads the file while the session is built; the file can go right after
    fd, name = tempfile.mkstemp(prefix="rslkit-policy-", suffix=".onnx")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.tobytes())
        return OnnxPolicy(name, intra_op_threads=intra_op_threads, check_outputs=check_outputs)
    finally:
        os.unlink(name)
