"""Every registered task: ``get_observations`` is the last step's observation (no fresh noise), and a task restored
with ``load_state_dict`` continues exactly as the one it was saved from."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rslkit.envs import make_env
from rslkit.envs.mujoco.models import ModelNotFoundError
from rslkit.envs.registry import get_task, task_names
from rslkit.envs.torch_task import TorchTask

NUM_ENVS = 3


def _task(name: str, seed: int) -> TorchTask:
    kw = {"sim_threads": 1} if hasattr(get_task(name).env_cfg(), "sim_threads") else {}
    try:
        env = make_env(name, num_envs=NUM_ENVS, episode_length=4, seed=seed, **kw)
    except ModelNotFoundError as err:
        pytest.skip(f"{name}: robot model missing ({err}); run `make models`")
    assert isinstance(env, TorchTask)
    return env


def _actions(env: TorchTask, steps: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if isinstance(env.action_space, gym.spaces.Discrete):
        return torch.randint(0, int(env.action_space.n), (steps, env.num_envs, 1), generator=g).float()
    return torch.rand(steps, env.num_envs, env.num_actions, generator=g) * 2.0 - 1.0


def _same_obs(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a.keys())


@pytest.mark.parametrize("name", task_names())
def test_get_observations_returns_the_last_step_without_drawing(name: str) -> None:
    env = _task(name, seed=1)
    first = env.get_observations()
    assert _same_obs(first, env.get_observations())
    for a in _actions(env, 6, seed=2):  # through auto-resets (episode_length 4)
        obs, *_ = env.step(a)
        generator = env.generator.get_state()
        assert _same_obs(env.get_observations(), obs)
        assert torch.equal(env.generator.get_state(), generator), "get_observations drew from the task's generator"


@pytest.mark.parametrize("name", task_names())
def test_load_state_dict_continues_exactly(name: str) -> None:
    env = _task(name, seed=1)
    actions = _actions(env, 12, seed=2)
    for a in actions[:5]:
        env.step(a)
    saved = env.state_dict()
    other = _task(name, seed=7)
    other.step(actions[0])  # other history, other stale derived fields
    other.load_state_dict(saved)
    assert _same_obs(other.get_observations(), env.get_observations())
    for a in actions[5:]:
        (obs_a, rew_a, done_a, _), (obs_b, rew_b, done_b, _) = env.step(a), other.step(a)
        assert _same_obs(obs_a, obs_b) and torch.equal(rew_a, rew_b) and torch.equal(done_a, done_b)


def test_go2_sensor_readings_are_restored() -> None:
    """Contacts and torques are acceleration-stage sensors, which ``forward()`` cannot recompute after a load."""
    env = _task("go2-flat", seed=1)
    for a in _actions(env, 6, seed=2):
        env.step(a)
    other = _task("go2-flat", seed=7)
    other.load_state_dict(env.state_dict())
    for field in ("sensors", "foot_contacts", "base_contact", "thigh_contacts", "torque", "joint_vel", "lin_vel"):
        assert torch.equal(getattr(other, field), getattr(env, field)), field
