"""The ROS 2 node's observation terms reproduce the state group of rslkit's SO-101 VLA recipe (``proprio`` of
``so101-pick-place``: min-max normalized joint positions and the last action), so that policy runs on the node."""

from __future__ import annotations

import numpy as np
import torch

from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.observation import ObservationBuilder
from rslkit.recipes import build_env


def test_joint_pos_normalized_and_last_action_give_the_pick_place_proprio_group() -> None:
    env = build_env("so101-pick-place", num_envs=3, seed=4)
    lower, upper = env.joint_ranges()
    cfg = ControllerCfg(
        list(env.joint_names),
        50.0,
        observation=["joint_pos_normalized", "last_action"],
        position_lower=lower,
        position_upper=upper,
    )
    cfg.validate()
    build = ObservationBuilder(cfg, 12)
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):  # moved joints, well away from the range midpoints
        obs, *_ = env.step(torch.rand(3, env.num_actions, generator=generator) * 2 - 1)
    positions = env.joint_positions().numpy()
    last_action = env.last_action.numpy()
    for i in range(3):
        got = build(positions[i].astype(np.float64), None, np.zeros(0), last_action[i])
        np.testing.assert_allclose(got, obs["proprio"][i].numpy(), atol=1e-5)
    assert np.abs(obs["proprio"][:, :6].numpy()).max() > 0.1  # the check is not a comparison of zeros
