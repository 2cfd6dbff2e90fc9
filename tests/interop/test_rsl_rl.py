"""rslkit tasks run under rsl_rl's OnPolicyRunner; an rsl_rl-style env runs under rslkit's runner."""

import pytest
import torch
from tensordict import TensorDict

rsl_rl = pytest.importorskip("rsl_rl", reason="rsl-rl-lib is a dev dependency: pip install -e .[dev]")

from rsl_rl.env import VecEnv as RslVecEnv  # noqa: E402
from rsl_rl.runners import OnPolicyRunner as RslRunner  # noqa: E402

from rslkit.envs import make_env  # noqa: E402
from rslkit.models.actor_critic import PolicyCfg  # noqa: E402
from rslkit.runners.on_policy_runner import OnPolicyRunner  # noqa: E402
from rslkit.runners.ppo_config import PPORunnerCfg  # noqa: E402

RSL_CFG = {
    "num_steps_per_env": 8,
    "save_interval": 100,
    "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
    "algorithm": {"class_name": "PPO", "num_mini_batches": 2},
    "actor": {
        "class_name": "MLPModel",
        "hidden_dims": [16],
        "activation": "elu",
        "obs_normalization": True,
        "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"},
    },
    "critic": {"class_name": "MLPModel", "hidden_dims": [16], "activation": "elu", "obs_normalization": True},
}


def test_rslkit_task_under_rsl_rl_runner(tmp_path):
    env = make_env("pendulum", num_envs=16, episode_length=10)
    runner = RslRunner(env, {**RSL_CFG, "logger": "tensorboard"}, log_dir=str(tmp_path), device="cpu")
    before = [p.clone() for p in runner.alg.actor.parameters()]
    runner.learn(num_learning_iterations=2)
    assert runner.current_learning_iteration == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, runner.alg.actor.parameters()))
    # Its logger saw our episodes finish (10-step episodes, 16 steps per env).
    assert len(runner.logger.rewbuffer) > 0


class RslStyleEnv(RslVecEnv):
    """A 1-D point env written against rsl_rl's VecEnv only: move to 0, asymmetric critic group."""

    def __init__(self, num_envs: int = 32):
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, 1, 20
        self.device, self.cfg = "cpu", {"name": "rsl-style"}
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.x = torch.rand(num_envs) * 2 - 1

    def get_observations(self) -> TensorDict:
        return TensorDict(
            {"policy": self.x.unsqueeze(-1), "critic": torch.stack((self.x, self.episode_length_buf.float()), -1)},
            batch_size=[self.num_envs],
        )

    def step(self, actions):
        self.x = (self.x + 0.1 * actions[:, 0].clamp(-1, 1)).clamp(-2, 2)
        rewards = -self.x.abs()
        self.episode_length_buf += 1
        time_outs = self.episode_length_buf >= self.max_episode_length
        self.x[time_outs] = torch.rand(int(time_outs.sum())) * 2 - 1
        self.episode_length_buf[time_outs] = 0
        return (
            self.get_observations(),
            rewards,
            time_outs.clone(),
            {"time_outs": time_outs, "log": {"/x": self.x.abs().mean()}},
        )


@pytest.mark.slow
def test_rsl_rl_style_env_under_rslkit_runner(tmp_path):
    torch.manual_seed(0)
    cfg = PPORunnerCfg(
        policy=PolicyCfg(actor_hidden_dims=(32,), critic_hidden_dims=(32,)), num_steps_per_env=20, logger=()
    )
    runner = OnPolicyRunner(RslStyleEnv(), cfg, tmp_path, "cpu")
    assert runner.policy.obs_groups == {"actor": ["policy"], "critic": ["critic"]}  # asymmetric by default
    metrics = runner.learn(30)
    assert "Env/x" in metrics
    assert runner.stats.summary()["Train/mean_return"] > -8.0  # a random policy scores about -10
