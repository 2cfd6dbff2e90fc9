"""ONNX policies in weight messages: a SAC policy exported in memory, through the wire format, back to ONNX Runtime."""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rslkit.deploy.onnx_weights import POLICY_KEY, onnx_policy_from_arrays, onnx_weight_arrays
from rslkit.link import wire
from rslkit.recipes.run import build_run


@pytest.fixture(scope="module")
def pendulum_sac():
    torch.set_num_threads(1)
    env, runner = build_run("pendulum", "sac", [], num_envs=1, seed=0)
    with torch.no_grad():  # random weights and normalizer statistics: every part of the graph matters
        for p in runner.policy.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return env, runner.policy


def test_sac_policy_round_trips_through_a_weights_message(pendulum_sac) -> None:
    env, policy = pendulum_sac
    policy.train()
    publish = functools.partial(onnx_weight_arrays, env=env, task="pendulum")  # what the learner is handed
    arrays = publish(policy)
    assert policy.training, "the policy's train mode is restored"
    assert list(arrays) == [POLICY_KEY] and arrays[POLICY_KEY].dtype == np.uint8
    message = wire.decode(wire.encode(wire.Weights("learner", 7, arrays)))
    assert isinstance(message, wire.Weights) and message.version == 7
    onnx = onnx_policy_from_arrays(message.arrays)
    assert onnx.meta.algorithm == "sac" and onnx.meta.task == "pendulum" and onnx.meta.kind == "step"
    assert onnx.meta.control_rate_hz is not None and onnx.action_dim == env.num_actions
    obs = torch.randn(64, onnx.meta.obs_groups["policy"][0]) * 2
    with torch.no_grad():
        policy.eval()
        expected = policy.act_inference(TensorDict({"policy": obs}, batch_size=[64])).numpy()
    np.testing.assert_allclose(onnx(obs.numpy()), expected, atol=1e-5)


def test_bad_weight_arrays_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="expected a 'policy.onnx' uint8"):
        onnx_policy_from_arrays({"actor.weight": np.zeros((2, 2), np.float32)})
    with pytest.raises(ValueError, match="not a loadable ONNX model"):
        onnx_policy_from_arrays({POLICY_KEY: np.frombuffer(b"not an onnx file", np.uint8)})


def test_robot_side_import_loads_no_torch() -> None:
    code = "import sys, rslkit.deploy.onnx_weights; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
