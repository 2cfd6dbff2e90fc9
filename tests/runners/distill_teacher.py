"""A hand-made PPO teacher on point-reach and distillation runners that learn from it (shared by the distillation
tests).

The teacher is a linear actor over the privileged ``critic`` group (position, velocity, goal - position, absolute
goal, distance): ``a = (goal - pos) - 0.5 vel``, saved as an ordinary PPO checkpoint. The student reads only
``policy`` (position, velocity, goal - position: no absolute goal, no distance), from which the teacher's action
can be computed, so a student that learns matches it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rslkit.algorithms.distillation import DistillationCfg
from rslkit.envs import make_env
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.student_teacher import StudentCfg
from rslkit.runners.distillation_config import DistillationRunnerCfg
from rslkit.runners.distillation_runner import DistillationRunner
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.utils.config import to_dict
from rslkit.utils.seeding import seed_everything

TASK = "point-reach"
STUDENTS: dict[str, dict[str, Any]] = {
    "mlp": {},
    "history": {"history_length": 3},
    "gru": {"rnn_type": "gru", "rnn_hidden_dim": 16},
    "lstm": {"rnn_type": "lstm", "rnn_hidden_dim": 8, "rnn_num_layers": 2},
}
"""Student variants by test id."""


def teacher_weights() -> torch.Tensor:
    """``W [2, 9]`` of the teacher's action ``W @ critic_obs``."""
    w = torch.zeros(2, 9)
    for i in range(2):
        w[i, 6 + i], w[i, i], w[i, 2 + i] = 1.0, -1.0, -0.5  # goal, position, velocity
    return w


def teacher_checkpoint(path: Path) -> Path:
    """Save the linear point-reach teacher as a PPO checkpoint at ``path``."""
    seed_everything(0)
    env = make_env(TASK, num_envs=2, seed=0)
    policy = PolicyCfg(
        actor_hidden_dims=(), critic_hidden_dims=(8,), actor_obs_groups=("critic",), obs_normalization=False
    )
    runner = OnPolicyRunner(env, PPORunnerCfg(policy=policy, logger=()), None)
    with torch.no_grad():
        runner.policy.actor[0].weight.copy_(teacher_weights())
        runner.policy.actor[0].bias.zero_()
    runner.save(path)
    return path


def student_runner(
    teacher: Path | str | None,
    log_dir: Path | None = None,
    seed: int = 0,
    student: str = "mlp",
    num_envs: int = 16,
    **algorithm: Any,
) -> DistillationRunner:
    """A distillation runner on point-reach (episodes of 40 steps, rollouts of 12) learning from ``teacher``."""
    seed_everything(seed)
    env = make_env(TASK, num_envs=num_envs, seed=seed, episode_length=40)
    cfg = DistillationRunnerCfg(
        teacher_checkpoint=str(teacher) if teacher is not None else "",
        student=StudentCfg(hidden_dims=(32, 32), **STUDENTS[student]),
        algorithm=DistillationCfg(**{"learning_rate": 3e-3, "gradient_length": 6, **algorithm}),
        num_steps_per_env=12,
        save_interval=2,
        logger=(),
    )
    info = {"task": TASK, "seed": seed, "env_cfg": to_dict(env.cfg)}
    return DistillationRunner(env, cfg, log_dir, "cpu", run_info=info)
