"""Load a checkpoint written by train.py and run its deterministic policy in Python.

Run: .venv/bin/python examples/evaluate_checkpoint.py logs/pendulum/<run>/model_100.pt
"""

import sys

import torch

from rslkit.envs import get_task
from rslkit.runners.registry import get_runner
from rslkit.utils.checkpoint import load_checkpoint
from rslkit.utils.config import from_dict

if __name__ == "__main__":
    path = sys.argv[1]
    saved = load_checkpoint(path)
    spec = get_task(saved["task"])
    env_cfg = from_dict(type(spec.env_cfg()), saved["env_cfg"])
    env_cfg.num_envs = 16
    cfg_cls, runner_cls = get_runner(saved["algorithm"])
    env = spec.make_env(env_cfg, "cpu")
    runner = runner_cls(env, from_dict(cfg_cls, saved["agent_cfg"]), None, "cpu")
    runner.load(path, weights_only=True)
    policy = runner.inference_policy()
    obs, total = env.get_observations(), torch.zeros(env.num_envs)
    with torch.inference_mode():
        for _ in range(int(env.max_episode_length)):
            obs, rewards, dones, _ = env.step(policy(obs))
            total += rewards
    print(f"return over one episode length: {total.mean():.2f} ± {total.std():.2f}")
