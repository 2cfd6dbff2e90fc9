"""The learned-reward wrapper: value increments as rewards, the stride, episodes ended at the done threshold."""

import math

import pytest
import torch

from rslkit.envs.tasks.point_reach import PointReachCfg, PointReachTask
from rslkit.rewards.contract import ProgressScore, check_pair
from rslkit.rewards.learned_reward_env import LearnedRewardEnv
from rslkit.rewards.value import ValueCfg, value_step
from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv


class DistanceCritic:
    """Progress = half the reduction of the distance to the goal; done within ``radius``."""

    def __init__(self, radius: float = 0.05) -> None:
        self.radius, self.calls = radius, 0

    def score(self, obs_a, obs_b, goal, reference=None) -> ProgressScore:
        check_pair(obs_a, obs_b)
        if "policy" not in obs_a.keys():
            raise ValueError("needs policy")
        self.calls += 1
        da, db = (torch.linalg.vector_norm(o["policy"][:, 4:6], dim=-1) for o in (obs_a, obs_b))
        return ProgressScore(delta=((da - db) / 2).clamp(-1, 1), done=(db < self.radius).float())


def _env(n: int = 4, seed: int = 0) -> PointReachTask:
    return PointReachTask(PointReachCfg(num_envs=n, seed=seed, episode_length=30), "cpu")


def _towards_goal(obs) -> torch.Tensor:
    return (4.0 * obs["policy"][:, 4:6] - obs["policy"][:, 2:4]).clamp(-1, 1)


@pytest.mark.parametrize("accumulate", ["vlac", "sum"])
def test_rewards_are_value_increments_and_the_true_reward_is_kept(accumulate):
    cfg = ValueCfg(dead_band=0.0, accumulate=accumulate)
    env, twin = LearnedRewardEnv(_env(), DistanceCritic(), "reach the goal", cfg), _env()
    obs = env.get_observations()
    value = torch.zeros(4)
    for _ in range(10):
        before = obs.clone()
        actions = _towards_goal(obs)
        obs, rewards, dones, extras = env.step(actions)
        _, true_reward, _, _ = twin.step(actions)
        assert not dones.any()
        da = torch.linalg.vector_norm(before["policy"][:, 4:6], dim=-1)
        db = torch.linalg.vector_norm(obs["policy"][:, 4:6], dim=-1)
        new_value = value_step(value, ((da - db) / 2).clamp(-1, 1), accumulate)
        assert torch.allclose(rewards, new_value - value, atol=1e-6)
        assert torch.allclose(extras["true_reward"], true_reward)
        assert "Learned_Reward/true_reward" in extras["log"]
        value = new_value
    assert (value > 0).all(), "moving towards the goal accumulates value"


def test_stride_scores_every_kth_step_only():
    critic = DistanceCritic()
    env = LearnedRewardEnv(_env(), critic, "reach the goal", ValueCfg(stride=3, dead_band=0.0))
    calls, rewards = critic.calls, []
    obs = env.get_observations()
    for _ in range(6):
        obs, r, _, _ = env.step(_towards_goal(obs))
        rewards.append(r)
    assert critic.calls - calls == 2
    assert all((rewards[k] == 0).all() for k in (0, 1, 3, 4)) and (rewards[2] != 0).any()


def test_done_threshold_ends_the_episode_as_a_termination():
    env = LearnedRewardEnv(_env(n=2), DistanceCritic(radius=0.3), "reach the goal", ValueCfg(done_threshold=0.5))
    obs, ended = env.get_observations(), None
    for _ in range(29):
        obs, _, dones, extras = env.step(_towards_goal(obs))
        if dones.any():
            ended = dones.nonzero().squeeze(-1)
            break
    assert ended is not None, "the critic's done ends an episode before the 30-step time-out"
    assert not extras["time_outs"][ended].any()
    assert (env.episode_length_buf[ended] == 0).all()
    assert float(extras["log"]["Learned_Reward/critic_terminations"]) == len(ended)
    final = torch.linalg.vector_norm(extras["final_obs"]["policy"][ended, 4:6], dim=-1)
    assert (final < 0.3).all(), "final_obs holds the state the critic judged done"


def test_bad_envs_and_observations_are_refused():
    class NoFinalObs:
        num_envs = 1

    with pytest.raises(ValueError, match="request_final_obs"):
        LearnedRewardEnv(NoFinalObs(), DistanceCritic(), "g")  # type: ignore[arg-type]

    class NeedsCamera(DistanceCritic):
        def score(self, obs_a, obs_b, goal, reference=None):
            raise ValueError("Observations lack camera group 'camera_front'")

    with pytest.raises(ValueError, match="camera_front"):
        LearnedRewardEnv(_env(), NeedsCamera(), "g")


def test_done_bonus_pays_for_holding_the_goal():
    critic = DistanceCritic(radius=10.0)  # every state counts as done: the bonus is paid every scored step
    env = LearnedRewardEnv(_env(), critic, "g", ValueCfg(dead_band=1.0 - 1e-6, done_bonus=0.5), end_on_done=False)
    obs = env.get_observations()
    for _ in range(3):
        obs, rewards, dones, _ = env.step(_towards_goal(obs))
        assert torch.allclose(rewards, torch.full((4,), 0.5)), "dead-band kills the increments, the bonus remains"
        assert not dones.any()
    with pytest.raises(ValueError, match="done_bonus"):
        ValueCfg(done_bonus=-1.0)
    # the classifier's reward alone: increments weighted 0, the critic's deltas still drive the value
    cfg = ValueCfg(dead_band=0.0, done_bonus=0.5, progress_weight=0.0, scale=2.0)
    env = LearnedRewardEnv(_env(), critic, "g", cfg, end_on_done=False)
    obs = env.get_observations()
    for _ in range(3):
        obs, rewards, _, _ = env.step(_towards_goal(obs))
        assert torch.allclose(rewards, torch.full((4,), 1.0))
    assert (env.value > 0).all()
    # VICE's log-odds: a certain done pays log((1 - eps) / eps) per scored step
    cfg = ValueCfg(dead_band=0.0, done_bonus=1.0, progress_weight=0.0, done_term="log_odds")
    env = LearnedRewardEnv(_env(), critic, "g", cfg, end_on_done=False)
    _, rewards, _, _ = env.step(_towards_goal(env.get_observations()))
    assert torch.allclose(rewards, torch.full((4,), math.log((1 - 1e-4) / 1e-4)), atol=1e-4)
    with pytest.raises(ValueError, match="needs done_bonus > 0"):
        ValueCfg(progress_weight=0.0)
    with pytest.raises(ValueError, match="progress_weight must be >= 0"):
        ValueCfg(progress_weight=-1.0, done_bonus=1.0)


def test_end_on_done_false_leaves_episode_ends_to_the_task():
    cfg = ValueCfg(done_threshold=0.5, end_on_done=False)
    env = LearnedRewardEnv(_env(n=2), DistanceCritic(radius=10.0), "reach the goal", cfg)
    obs = env.get_observations()
    for _ in range(29):
        obs, _, dones, extras = env.step(_towards_goal(obs))
        assert not dones.any() and float(extras["log"]["Learned_Reward/critic_terminations"]) == 0
    _, _, dones, _ = env.step(_towards_goal(obs))
    assert dones.all(), "the 30-step time-out still ends the episode"


def test_state_dict_resumes_the_values_of_running_episodes():
    cfg = ValueCfg(dead_band=0.0, stride=2)
    env = LearnedRewardEnv(_env(), DistanceCritic(), "g", cfg)
    obs = env.get_observations()
    for _ in range(5):
        obs, _, _, _ = env.step(_towards_goal(obs))
    saved = env.state_dict()
    twin = LearnedRewardEnv(_env(seed=3), DistanceCritic(), "g", cfg)
    twin.load_state_dict(saved)
    assert torch.equal(twin.value, env.value) and torch.equal(twin._since, env._since)
    actions = _towards_goal(env.get_observations())
    _, r_env, _, _ = env.step(actions)
    _, r_twin, _, _ = twin.step(actions)
    assert torch.allclose(r_env, r_twin, atol=1e-6) and (r_env != 0).any()


class _InstructedPoint(InstructedPointEnv):
    """The instructed point env with what the wrapper needs (final observations are the post-reset ones here)."""

    def request_final_obs(self) -> None:
        pass


class GoalRecorder:
    """Scores no progress; records the goal given for each scored pair with the instruction index of its pair."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, int]] = []

    def score(self, obs_a, obs_b, goal, reference=None) -> ProgressScore:
        check_pair(obs_a, obs_b)
        goals = [goal] * obs_a.batch_size[0] if isinstance(goal, str) else list(goal)
        self.pairs += list(zip(goals, obs_a["goal"].reshape(-1).tolist()))
        return ProgressScore(delta=torch.zeros(obs_a.batch_size[0]), done=torch.zeros(obs_a.batch_size[0]))


def test_goal_none_scores_each_episode_against_its_own_instruction():
    critic = GoalRecorder()
    env = LearnedRewardEnv(_InstructedPoint(num_envs=6, seed=3), critic, None, ValueCfg(stride=3), end_on_done=False)
    critic.pairs.clear()
    for _ in range(35):  # 3 episodes of 10 steps and more: new instructions drawn at each reset
        env.step(torch.zeros(6, 2))
    assert len(critic.pairs) > 60
    assert all(text == INSTRUCTIONS[index] for text, index in critic.pairs)
    assert {text for text, _ in critic.pairs} == set(INSTRUCTIONS)
    with pytest.raises(ValueError, match="--reward.goal"):
        LearnedRewardEnv(_env(), DistanceCritic(), None, end_on_done=False)


def test_reset_envs_restarts_the_values_of_those_envs():
    env = LearnedRewardEnv(_env(n=3), DistanceCritic(), "reach the goal", ValueCfg(dead_band=0.0), end_on_done=False)
    obs = env.get_observations()
    for _ in range(5):
        obs = env.step(_towards_goal(obs))[0]
    assert (env.value > 0).all()
    before = env.value.clone()
    obs = env.reset_envs(torch.tensor([1]))
    assert env.env.episode_length_buf.tolist()[1] == 0
    assert env.value[1] == 0 and env.value[0] == before[0] and env.value[2] == before[2]
    torch.testing.assert_close(env._anchor["policy"][1], obs["policy"][1])
    with pytest.raises(ValueError, match="reset_envs"):
        LearnedRewardEnv.reset_envs(type("Bare", (), {"env": object()})(), torch.tensor([0]))
