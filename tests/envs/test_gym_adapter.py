"""Gymnasium adapter: VecEnv contract, action rescaling, same-step auto-reset, time-outs vs terminations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rslkit.envs.gym_adapter import GymEnvCfg, GymVecEnv, gym_task_spec
from rslkit.recipes import agent_cfg, recipes_of


def test_pendulum_contract_and_action_rescaling():
    env = GymVecEnv(GymEnvCfg("Pendulum-v1", num_envs=3, seed=1))
    obs = env.get_observations()
    assert obs["policy"].shape == (3, 3) and obs["policy"].dtype == torch.float32
    assert env.num_actions == 1 and env.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    assert env.max_episode_length == 200
    np.testing.assert_allclose(env.to_gym_actions(torch.tensor([[-1.0], [0.0], [1.5]])), [[-2.0], [0.0], [2.0]])
    obs, rewards, dones, extras = env.step(torch.zeros(3, 1))
    assert rewards.shape == (3,) and rewards.dtype == torch.float32 and dones.dtype == torch.bool
    assert extras["time_outs"].shape == (3,) and "log" in extras
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="Non-finite"):
        env.step(torch.full((3, 1), float("nan")))


def test_time_out_reports_final_obs_and_same_step_reset():
    env = GymVecEnv(GymEnvCfg("Pendulum-v1", num_envs=2, seed=7, episode_length=5))
    ref = gym.make("Pendulum-v1", max_episode_steps=5)
    ref_obs, _ = ref.reset(seed=7)
    actions = torch.tensor([[0.5], [-0.5]])
    for t in range(5):
        obs, _, dones, extras = env.step(actions)
        ref_obs, _, term, trunc, _ = ref.step(np.array([1.0], np.float32))  # 0.5 * max torque 2
        if t < 4:
            assert not bool(dones.any()) and torch.equal(extras["final_obs"]["policy"], obs["policy"])
    assert bool(dones.all()) and bool(extras["time_outs"].all()) and trunc and not term
    np.testing.assert_allclose(extras["final_obs"]["policy"][0].numpy(), ref_obs, rtol=1e-6)
    assert not torch.allclose(extras["final_obs"]["policy"], obs["policy"])  # obs is already the next episode's
    assert torch.equal(env.episode_length_buf, torch.zeros(2, dtype=torch.long))


def test_termination_is_not_a_time_out():
    pytest.importorskip("mujoco")
    env = GymVecEnv(GymEnvCfg("Hopper-v5", num_envs=4, seed=0))
    torch.manual_seed(0)
    seen_termination = False
    for _ in range(300):
        _, _, dones, extras = env.step(torch.rand(4, 3) * 2 - 1)
        if bool(dones.any()):
            assert not bool(extras["time_outs"][dones].any())
            seen_termination = True
            break
    assert seen_termination


def test_discrete_actions():
    env = GymVecEnv(GymEnvCfg("CartPole-v1", num_envs=2))
    assert isinstance(env.action_space, gym.spaces.Discrete) and env.num_actions == 1
    assert env.to_gym_actions(torch.tensor([[1.0], [0.0]])).tolist() == [1, 0]
    env.step(torch.tensor([[1.0], [0.0]]))


@pytest.mark.parametrize("env_id", ["Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Pendulum-v1"])
def test_task_spec_builds_and_steps(env_id):
    if env_id != "Pendulum-v1":
        pytest.importorskip("mujoco")
    spec = gym_task_spec(f"gym:{env_id}")
    cfg = spec.env_cfg()
    cfg.num_envs = 2
    env = spec.make_env(cfg, "cpu")
    obs, rewards, dones, _ = env.step(torch.zeros(2, env.num_actions))
    assert obs["policy"].shape[0] == 2 and torch.isfinite(rewards).all()
    assert set(recipes_of(spec.name)) == {"ppo", "sac"}
    assert agent_cfg(spec.name, "sac").algorithm.gamma == 0.99
    env.close()


def test_unknown_or_malformed_names_raise():
    with pytest.raises(ValueError, match="Hopper"):
        gym_task_spec("gym:Hoper-v5")
    with pytest.raises(ValueError, match="gym:<EnvId>"):
        gym_task_spec("Hopper-v5")
