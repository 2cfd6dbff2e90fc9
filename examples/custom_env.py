"""Train PPO on your own environment written against rsl_rl's VecEnv interface.

Run: .venv/bin/python examples/custom_env.py

The env below is ordinary batched torch code: a 1-D point that should move to the origin. Anything with
``num_envs``, ``num_actions``, ``max_episode_length``, ``episode_length_buf``, ``device``, ``cfg``,
``get_observations()`` and ``step()`` works, including Isaac Lab's ``RslRlVecEnvWrapper`` and mjlab envs.
"""

import torch
from tensordict import TensorDict

from rslkit.models import PolicyCfg
from rslkit.runners import OnPolicyRunner, PPORunnerCfg


class PointEnv:
    """Move a point on a line to 0. Observation groups: ``policy`` (position) and ``critic`` (+ time)."""

    def __init__(self, num_envs: int = 256, device: str = "cpu") -> None:
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, 1, 50
        self.device, self.cfg = device, {"name": "point"}
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.x = torch.rand(num_envs, device=device) * 4 - 2

    def get_observations(self) -> TensorDict:
        t = self.episode_length_buf.float() / self.max_episode_length
        return TensorDict(
            {"policy": self.x[:, None], "critic": torch.stack((self.x, t), -1)},
            batch_size=[self.num_envs],
            device=self.device,
        )

    def step(self, actions: torch.Tensor):
        self.x = (self.x + 0.1 * actions[:, 0].clamp(-1, 1)).clamp(-3, 3)
        rewards = -self.x.abs()
        self.episode_length_buf += 1
        time_outs = self.episode_length_buf >= self.max_episode_length
        ids = time_outs.nonzero().squeeze(-1)
        self.x[ids] = torch.rand(len(ids), device=self.device) * 4 - 2
        self.episode_length_buf[ids] = 0
        extras = {"time_outs": time_outs, "log": {"/distance": self.x.abs().mean()}}
        return self.get_observations(), rewards, time_outs.clone(), extras


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = PPORunnerCfg(
        policy=PolicyCfg(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32)),
        num_steps_per_env=50,
        max_iterations=40,
        save_interval=20,
    )
    runner = OnPolicyRunner(PointEnv(), cfg, log_dir="logs/examples/point", device="cpu")
    runner.learn()
    print("mean return of the last episodes:", runner.stats.summary()["Train/mean_return"])
