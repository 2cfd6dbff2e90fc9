"""Load a checkpoint written by train.py and run its deterministic policy in Python.

Run: .venv/bin/python examples/evaluate_checkpoint.py logs/pendulum/<run>/model_100.pt
"""

import sys

import torch

from rslkit.recipes import load_run

if __name__ == "__main__":
    # load_run rebuilds the env and runner the checkpoint was trained with and loads its weights.
    env, runner, saved = load_run(sys.argv[1], num_envs=16, device="cpu")
    policy = runner.inference_policy()
    obs, total = env.get_observations(), torch.zeros(env.num_envs)
    with torch.inference_mode():
        for _ in range(int(env.max_episode_length)):
            obs, rewards, dones, _ = env.step(policy(obs))
            total += rewards
    print(f"{saved['task']}: return over one episode length: {total.mean():.2f} ± {total.std():.2f}")
