"""The one episode evaluator: one complete episode per env, its step-limit rule, success per instruction."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.runners.evaluation import evaluate_episodes, step_limit


class CountdownEnv:
    """Env ``i`` ends its episodes after ``lengths[i]`` steps (a success when ``i`` is even); reward 1 per step.
    ``goal`` is the episode counter modulo 2; ``reset()`` only when ``resettable``."""

    device = torch.device("cpu")
    num_actions = 1
    instructions = ["left", "right"]

    def __init__(self, lengths: list[int], max_episode_length: int, start: list[int] | None = None) -> None:
        self.lengths = torch.tensor(lengths)
        self.num_envs = len(lengths)
        self.max_episode_length = max_episode_length
        self.episode_length_buf = torch.tensor(start or [0] * self.num_envs)
        self.episodes = torch.zeros(self.num_envs, dtype=torch.long)

    def get_observations(self) -> TensorDict:
        goal = (self.episodes % 2).unsqueeze(-1)
        return TensorDict({"policy": torch.zeros(self.num_envs, 1), "goal": goal}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        self.episode_length_buf = self.episode_length_buf + 1
        dones = self.episode_length_buf >= self.lengths
        success = dones & (torch.arange(self.num_envs) % 2 == 0)
        self.episode_length_buf = torch.where(dones, 0, self.episode_length_buf)
        self.episodes += dones.long()
        return self.get_observations(), torch.ones(self.num_envs), dones, {"success": success}


class ResettableCountdownEnv(CountdownEnv):
    def reset(self) -> TensorDict:
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        return self.get_observations()


def _policy(obs: TensorDict) -> torch.Tensor:
    return torch.zeros(obs.batch_size[0], 1)


def test_a_reset_env_counts_one_episode_per_env_from_step_zero():
    env = ResettableCountdownEnv([3, 5, 4, 5], max_episode_length=5, start=[2, 1, 0, 4])
    resets = []
    episodes = evaluate_episodes(env, _policy, resets.append)
    assert resets[0] is None and len(resets) == 6  # None first, then the dones of every step until the last ends
    assert episodes.lengths.tolist() == [3, 5, 4, 5] and episodes.returns.tolist() == [3, 5, 4, 5]
    assert episodes.success.tolist() == [True, False, True, False] and episodes.goal is not None
    metrics = episodes.metrics()
    assert metrics["Eval/success_rate"] == 0.5 and metrics["Eval/success/0"] == 0.5
    assert metrics["Eval/mean_episode_length"] == 4.25


def test_an_env_that_cannot_reset_first_finishes_the_episode_it_is_in():
    env = CountdownEnv([3, 3], max_episode_length=3, start=[0, 2])
    assert step_limit(env, from_reset=True) == 4 and step_limit(env, from_reset=False) == 8
    episodes = evaluate_episodes(env, _policy, lambda dones: None)
    assert episodes.lengths.tolist() == [3, 3]  # env 1's partial first episode is skipped
    assert episodes.goal is not None and episodes.goal.tolist() == [0, 1]  # env 1 counts its second episode


def test_an_episode_past_the_time_out_is_an_error_and_the_rng_is_restored():
    env = ResettableCountdownEnv([3, 9], max_episode_length=5)
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    with pytest.raises(RuntimeError, match="within 6 steps"):
        evaluate_episodes(env, lambda obs: torch.rand(obs.batch_size[0], 1), lambda dones: None)
    assert torch.equal(torch.random.get_rng_state(), before)
