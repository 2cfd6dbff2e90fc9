"""Runner: exact resume, seeded determinism, checkpoints, and clear errors for bad input."""

from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rslkit.algorithms.ppo import PPOCfg
from rslkit.envs import make_env
from rslkit.models.actor_critic import PolicyCfg
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.utils.checkpoint import load_checkpoint
from rslkit.utils.seeding import seed_everything


def _cfg(**policy) -> PPORunnerCfg:
    return PPORunnerCfg(
        algorithm=PPOCfg(num_mini_batches=2, num_learning_epochs=2),
        policy=PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), **policy),
        num_steps_per_env=8,
        save_interval=2,
        logger=(),
    )


def _runner(log_dir, seed=0, **policy) -> OnPolicyRunner:
    seed_everything(seed)
    env = make_env("pendulum", num_envs=32, episode_length=20, seed=seed)
    return OnPolicyRunner(env, _cfg(**policy), log_dir, "cpu", run_info={"task": "pendulum"})


def _params(runner: OnPolicyRunner) -> dict:
    return {k: v.clone() for k, v in runner.policy.state_dict().items()}


@pytest.mark.parametrize("policy", [{}, {"rnn_type": "gru", "rnn_hidden_dim": 8}], ids=["mlp", "gru"])
def test_resume_reproduces_uninterrupted_run(tmp_path, policy):
    straight = _runner(tmp_path / "a", **policy)
    straight.learn(4)
    interrupted = _runner(tmp_path / "b", **policy)
    interrupted.learn(2)
    assert (tmp_path / "b" / "model_2.pt").exists()
    resumed = _runner(tmp_path / "c", seed=123, **policy)  # different seed: everything must come from the file
    resumed.load(tmp_path / "b" / "model_2.pt")
    assert resumed.iteration == 2  # the next iteration, not the last completed one
    resumed.learn(2)
    assert resumed.iteration == 4
    for key, value in _params(straight).items():
        torch.testing.assert_close(_params(resumed)[key], value, rtol=0, atol=0, msg=key)
    assert resumed.alg.learning_rate == straight.alg.learning_rate


def test_seeded_runs_are_identical_and_seeds_differ(tmp_path):
    params = []
    for seed in (0, 0, 1):
        runner = _runner(None, seed=seed)
        runner.learn(2)
        params.append(_params(runner))
    pa, pb, pc = params
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not all(torch.equal(pa[k], pc[k]) for k in pa)


def test_checkpoint_contents_and_files(tmp_path):
    r = _runner(tmp_path)
    r.learn(3)
    names = sorted(p.name for p in Path(tmp_path).iterdir())
    assert "model_2.pt" in names and "model_3.pt" in names and "metrics.csv" in names
    assert not any(n.endswith(".tmp") for n in names)
    data = load_checkpoint(tmp_path / "model_3.pt")
    assert data["iteration"] == 3
    assert "policy.mean" in str(data["alg"]["policy"].keys()) or any("normalizers" in k for k in data["alg"]["policy"])
    assert {"rng", "env_state", "agent_cfg", "alg"} <= set(data)
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(lines) == 4 and lines[0].startswith("iteration")


def test_missing_and_incompatible_checkpoints(tmp_path):
    r = _runner(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        r.load(tmp_path / "nope.pt")
    r.learn(2)
    other = OnPolicyRunner(
        make_env("pendulum", num_envs=32),
        PPORunnerCfg(policy=PolicyCfg(actor_hidden_dims=(32, 32), critic_hidden_dims=(8,)), logger=()),
        None,
    )
    with pytest.raises(ValueError, match="does not fit this policy"):
        other.load(tmp_path / "model_2.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="Could not read checkpoint"):
        r.load(tmp_path / "junk.pt")


class NaNEnv:
    """An rsl_rl-style env whose env 3 diverges at the second step."""

    def __init__(self):
        self.num_envs, self.num_actions, self.max_episode_length = 8, 2, 10
        self.device, self.cfg = "cpu", {}
        self.episode_length_buf = torch.zeros(8, dtype=torch.long)
        self.t = 0

    def get_observations(self):
        return TensorDict({"policy": torch.zeros(8, 3)}, batch_size=[8])

    def step(self, actions):
        self.t += 1
        obs = torch.zeros(8, 3)
        if self.t == 2:
            obs[3, 1] = float("nan")
        td = TensorDict({"policy": obs}, batch_size=[8])
        return td, torch.zeros(8), torch.zeros(8, dtype=torch.bool), {"time_outs": torch.zeros(8, dtype=torch.bool)}


def test_non_finite_observations_name_the_env():
    runner = OnPolicyRunner(NaNEnv(), _cfg(), None)
    with pytest.raises(ValueError, match=r"observation group 'policy' for env indices \[3\]"):
        runner.learn(1)


def test_wrong_action_shape_and_non_finite_actions():
    env = make_env("pendulum", num_envs=4)
    with pytest.raises(ValueError, match=r"expects actions of shape \[4, 1\]"):
        env.step(torch.zeros(4, 2))
    actions = torch.zeros(4, 1)
    actions[2] = float("nan")
    with pytest.raises(ValueError, match=r"env indices \[2\]"):
        env.step(actions)


def test_categorical_policy_needs_discrete_env():
    with pytest.raises(ValueError, match="Discrete action_space"):
        OnPolicyRunner(make_env("pendulum", num_envs=4), _cfg(distribution="categorical"), None)


def test_missing_observation_group_is_named():
    with pytest.raises(ValueError, match="'proprio' for the actor is not provided"):
        OnPolicyRunner(make_env("pendulum", num_envs=4), _cfg(actor_obs_groups=("proprio",)), None)


def test_shortened_first_episodes_are_not_counted():
    from rslkit.runners.episode_stats import EpisodeStats

    stats = EpisodeStats(3, torch.device("cpu"))
    stats.mark_partial()
    stats.update(torch.ones(3), torch.tensor([True, False, False]), None)  # env 0 ends its shortened episode
    assert stats.summary() == {}
    for _ in range(2):
        stats.update(torch.ones(3), torch.tensor([True, False, False]), None)
    assert stats.summary()["Train/mean_return"] == 1.0 and stats.num_finished == 2  # complete episodes only
