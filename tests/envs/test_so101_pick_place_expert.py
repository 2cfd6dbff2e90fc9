"""so101-pick-place expert: it places the cube at the instructed goal (a success rate with margin over every goal),
a cube it places at another goal does not count, and it refuses observations of another task."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rslkit.envs.expert import as_expert_observation
from rslkit.envs.registry import distance_for, expert_for

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _so101_model() -> None:
    pytest.importorskip("mujoco")
    from rslkit.envs.mujoco.models import ModelNotFoundError, so101_model_dir

    try:
        so101_model_dir()
    except ModelNotFoundError as err:
        pytest.skip(f"SO-101 model missing ({err})")


def test_expert_places_the_cube_at_the_instructed_goal_only() -> None:
    from rslkit.envs.tasks.so101_pick_place import SO101PickPlaceCfg, SO101PickPlaceTask

    cfg = SO101PickPlaceCfg(num_envs=10, sim_threads=1, seed=11)
    env = SO101PickPlaceTask(cfg)
    env.request_final_obs()  # the cubes where the episodes ended, before the auto-reset
    goals = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    obs = env.set_goals(goals)
    decoy = env.goal_positions[(goals[8:] + 3) % 4].numpy()  # envs 8, 9: the expert is told another goal
    expert = expert_for("so101-pick-place", cfg)
    for _ in range(cfg.episode_length):
        groups = as_expert_observation(obs)
        groups["policy"][8:, 33:36] = decoy
        obs, _, dones, extras = env.step(torch.from_numpy(expert(groups)))
        if bool(dones.any()):
            break
    assert bool(dones.all()) and bool(extras["time_outs"].all()) and extras["goal"].tolist() == goals.tolist()
    success = extras["success"]
    # measured 128 of 128 episodes (32 per goal); ask for 6 of 8, each goal at least once
    assert int(success[:8].sum()) >= 6, success.tolist()
    assert all(bool(success[:8][goals[:8] == g].any()) for g in range(4)), success.tolist()
    cubes = extras["final_obs"]["policy"][8:, 15:17].numpy()
    assert (np.linalg.norm(cubes - decoy[:, :2], axis=-1) < cfg.goal_radius).any(), cubes  # placed, but wrongly
    assert not success[8:].any(), "a cube placed at the wrong goal counted as success"


def test_expert_and_distance_for_the_task() -> None:
    from rslkit.envs.tasks.so101_pick_place import SO101PickPlaceCfg

    cfg = SO101PickPlaceCfg(num_envs=1)
    expert = expert_for("so101-pick-place", cfg)
    with pytest.raises(ValueError, match="36 columns"):
        expert({"policy": np.zeros(33, np.float32)})
    distance = distance_for("so101-pick-place", cfg)
    placed = np.zeros(36)
    placed[12:15] = [0.16, 0.12, 0.1]  # pads above the cube
    placed[15:18] = placed[33:36] = [0.16, 0.12, 0.02]
    assert distance({"policy": placed}) == 0.0
    away = placed.copy()
    away[15:18] = [0.24, 0.0, 0.02]
    assert distance({"policy": away}) > 0.1
