"""ActionChunkWrapper: discounted chunk rewards, episode ends inside a chunk, time-outs."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.envs import make_env
from rslkit.envs.action_chunk import ActionChunkWrapper
from rslkit.envs.vec_env import VecEnv


class CountEnv(VecEnv):
    """Reward = the action; env i's episodes last ``lengths[i]`` steps and end by time-out where ``timeout[i]``."""

    def __init__(self, lengths, timeout):
        self.num_envs, self.num_actions, self.device, self.cfg = len(lengths), 1, "cpu", None
        self.lengths = torch.tensor(lengths)
        self.timeout = torch.tensor(timeout)
        self.max_episode_length = int(self.lengths.max())
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)

    def get_observations(self):
        return TensorDict({"policy": self.episode_length_buf.float().unsqueeze(-1)}, batch_size=[self.num_envs])

    def step(self, actions):
        self.episode_length_buf += 1
        dones = self.episode_length_buf >= self.lengths
        time_outs = dones & self.timeout
        self.episode_length_buf[dones] = 0
        extras = {"time_outs": time_outs, "log": {"steps": 1.0}, "success": dones & ~self.timeout}
        return self.get_observations(), actions[:, 0].clone(), dones, extras


def test_discounted_sum_and_episode_ends():
    gamma = 0.5
    env = ActionChunkWrapper(CountEnv([10, 2, 3], [False, True, False]), horizon=4, gamma=gamma)
    assert env.max_episode_length == 3
    chunk = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 4, 1).expand(3, 4, 1)
    obs, rewards, dones, extras = env.step(chunk)
    # env 0 runs the whole chunk; env 1 ends (time-out) after 2 steps; env 2 terminates after 3 steps.
    torch.testing.assert_close(rewards, torch.tensor([1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4, 1 + 0.5 * 2, 1 + 1 + 0.75]))
    assert dones.tolist() == [False, True, True]
    assert extras["time_outs"].tolist() == [False, True, False]
    assert extras["success"].tolist() == [False, False, True]
    torch.testing.assert_close(extras["discount"], torch.tensor([gamma**4, gamma**2, gamma**3]))
    assert extras["steps"].tolist() == [4, 2, 3]
    # Per-step dones are the env's own (for episode statistics): env 1's next, 2-step episode ended too.
    assert extras["step_dones"][1].tolist() == [False, True, False, True]
    assert extras["step_rewards"].shape == (3, 4) and extras["log"] == {"steps": 1.0}
    # The envs kept stepping in their new episodes: env 2's observation is 1 step after its reset.
    assert obs["policy"].squeeze(-1).tolist() == [4.0, 0.0, 1.0]


def test_second_episode_end_in_one_chunk_is_ignored():
    env = ActionChunkWrapper(CountEnv([1], [True]), horizon=3, gamma=0.9)
    _, rewards, dones, extras = env.step(torch.ones(1, 3, 1))
    assert rewards.tolist() == [1.0] and dones.tolist() == [True] and extras["steps"].tolist() == [1]
    assert extras["step_dones"].tolist() == [[True, True, True]]


def test_shapes_and_real_task():
    env = ActionChunkWrapper(make_env("pendulum", num_envs=4, episode_length=10), horizon=4, gamma=0.99)
    _, rewards, dones, _ = env.step(torch.zeros(4, 4))  # flat [N, Ta*A] is accepted
    assert rewards.shape == (4,) and not dones.any()
    with pytest.raises(ValueError, match=r"chunks of shape \[4, 4, 1\]"):
        env.step(torch.zeros(4, 3, 1))
    with pytest.raises(ValueError, match="horizon must be >= 1"):
        ActionChunkWrapper(env.env, 0, 0.99)


class RestartableCountEnv(CountEnv):
    """CountEnv whose single episodes can be restarted (as TorchTask's ``reset_envs``)."""

    def reset_envs(self, env_ids):
        self.episode_length_buf[env_ids] = 0
        return self.get_observations()


def test_restart_ended_starts_a_fresh_episode_at_the_next_decision():
    env = ActionChunkWrapper(RestartableCountEnv([10, 2, 3], [False, True, False]), horizon=4, gamma=0.5,
                             restart_ended=True)  # fmt: skip
    chunk = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 4, 1).expand(3, 4, 1)
    obs, rewards, dones, extras = env.step(chunk)
    # Rewards, dones and discounts of the decision are those without restarting ...
    torch.testing.assert_close(rewards, torch.tensor([1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4, 1 + 0.5 * 2, 1 + 1 + 0.75]))
    assert dones.tolist() == [False, True, True] and extras["restarted"].tolist() == [False, True, True]
    # ... but envs 1 and 2 are at the first step of a fresh episode, not driven into it by the old chunk.
    assert obs["policy"].squeeze(-1).tolist() == [4.0, 0.0, 0.0]
    assert env.env.episode_length_buf.tolist() == [4, 0, 0]
    _, _, dones, extras = env.step(chunk)  # env 2's fresh 3-step episode ends inside the next chunk again
    assert dones.tolist() == [False, True, True] and extras["steps"].tolist() == [4, 2, 3]


def test_restart_ended_needs_reset_envs():
    with pytest.raises(ValueError, match="reset_envs"):
        ActionChunkWrapper(CountEnv([3], [True]), horizon=4, gamma=0.9, restart_ended=True)
    env = ActionChunkWrapper(CountEnv([3], [True]), horizon=4, gamma=0.9)
    assert env.step(torch.ones(1, 4, 1))[3]["restarted"].tolist() == [False]
