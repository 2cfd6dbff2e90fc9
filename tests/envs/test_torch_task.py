"""TorchTask bookkeeping shared by every task: final observations before auto-reset."""

from __future__ import annotations

import torch

from rslkit.envs import make_env


def test_final_obs_are_the_observations_before_the_reset():
    # Two pendulums with the same seed: one times out after 3 steps, the other runs on. The first one's
    # final_obs at the time-out must equal the second one's observation after the same 3 steps.
    short = make_env("pendulum", num_envs=4, episode_length=3, seed=5)
    long = make_env("pendulum", num_envs=4, episode_length=10, seed=5)
    short.request_final_obs()  # type: ignore[attr-defined]
    actions = torch.full((4, 1), 0.3)
    for step in range(3):
        obs_s, _, dones, extras = short.step(actions)
        obs_l, *_ = long.step(actions)
        if step < 2:
            assert not dones.any() and "final_obs" not in extras
    assert dones.all() and extras["time_outs"].all()
    torch.testing.assert_close(extras["final_obs"]["policy"], obs_l["policy"], rtol=0, atol=0)
    assert not torch.equal(obs_s["policy"], obs_l["policy"])  # the returned observations are after the reset


def test_final_obs_are_off_by_default():
    env = make_env("pendulum", num_envs=2, episode_length=1)
    _, _, dones, extras = env.step(torch.zeros(2, 1))
    assert dones.all() and "final_obs" not in extras
