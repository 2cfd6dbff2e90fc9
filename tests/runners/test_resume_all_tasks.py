"""Resume is bit-exact for every built-in (task, algorithm) recipe: 2 iterations, a checkpoint, ``load_run(...,
resume=True)`` and 2 more give the same final checkpoint (weights, optimizer, RNG, env state and observations) and
metrics as 4 iterations straight through.

Parametrized over :func:`rslkit.recipes.recipe_pairs`, so a new task or recipe is covered as soon as it is added;
a new algorithm needs its tiny settings in :data:`TINY`. All runs of a pair happen in this process, with the same
torch thread count (``tests/conftest.py``), which bit-exactness depends on.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rslkit.data import record_episodes, write_lerobot_dataset
from rslkit.envs import make_env
from rslkit.envs.mujoco.models import ModelNotFoundError
from rslkit.envs.registry import get_task, task_names
from rslkit.recipes import agent_cfg, build_env, build_run, load_run, recipe_pairs
from rslkit.record import task_of
from rslkit.utils.checkpoint import load_checkpoint

NUM_ENVS = 4
EPISODE_LENGTH = 5
"""Short episodes, so that auto-resets (and the task's generator) are part of every run."""

COMMON = ["--env.episode_length", str(EPISODE_LENGTH), "--agent.save_interval", "2", "--agent.logger="]
SAC_TINY = [
    "--agent.policy.actor_hidden_dims=16,16",
    "--agent.policy.critic_hidden_dims=16,16",
    "--agent.algorithm.batch_size=16",
    "--agent.num_steps_per_env=2",
    "--agent.random_steps=1",
    "--agent.learning_starts=1",
    "--agent.replay.capacity=64",
    "--agent.replay.save_in_checkpoint=true",
]
TINY: dict[str, list[str]] = {
    "ppo": [
        "--agent.policy.actor_hidden_dims=16,16",
        "--agent.policy.critic_hidden_dims=16,16",
        "--agent.num_steps_per_env=4",
        "--agent.algorithm.num_mini_batches=2",
        "--agent.algorithm.num_learning_epochs=2",
    ],
    "sac": SAC_TINY,
    "flow-bc": [
        "--agent.policy.horizon=2",
        "--agent.policy.num_inference_steps=2",
        "--agent.policy.hidden_dim=16",
        "--agent.policy.num_blocks=1",
        "--agent.algorithm.batch_size=16",
        "--agent.updates_per_iteration=2",
        "--agent.eval_interval=1",
    ],
    "vla-bc": [
        "--env.camera_width=16",
        "--env.camera_height=16",
        "--agent.policy.image_size=16,16",
        "--agent.policy.cnn_channels=8,16",
        "--agent.policy.token_grid=2",
        "--agent.policy.d_model=16",
        "--agent.policy.num_heads=2",
        "--agent.policy.num_layers=1",
        "--agent.policy.horizon=2",
        "--agent.policy.num_inference_steps=2",
        "--agent.algorithm.batch_size=16",
        "--agent.updates_per_iteration=2",
        "--agent.eval_interval=1",
    ],
    "reinflow": [
        "--agent.algorithm.critic_hidden_dims=16",
        "--agent.algorithm.noise_hidden_dims=16",
        "--agent.algorithm.num_mini_batches=2",
        "--agent.algorithm.num_learning_epochs=1",
        "--agent.algorithm.critic_warmup_iterations=1",
        "--agent.num_steps_per_env=3",
        "--agent.eval_interval=1",
    ],
    "vla-reinflow": [
        "--env.camera_width=16",
        "--env.camera_height=16",
        "--agent.algorithm.critic_hidden_dims=16",
        "--agent.algorithm.noise_hidden_dims=16",
        "--agent.algorithm.num_mini_batches=2",
        "--agent.algorithm.num_learning_epochs=1",
        "--agent.algorithm.critic_warmup_iterations=1",
        "--agent.num_steps_per_env=3",
        "--agent.eval_interval=1",
    ],
    "distillation": [
        "--agent.student.hidden_dims=16,16",
        "--agent.num_steps_per_env=4",
        "--agent.algorithm.gradient_length=3",
    ],
    "dsrl": SAC_TINY,  # SAC over the latent action
}
"""Per algorithm: overrides that make an iteration take milliseconds (networks of 16, a few env steps)."""
PAIRS = recipe_pairs()


def _overrides(task: str, algo: str) -> list[str]:
    if algo not in TINY:
        pytest.fail(f"Algorithm '{algo}' has a recipe but no tiny settings: add them to TINY in {__file__}.")
    sim_threads = ["--env.sim_threads=1"] if hasattr(get_task(task).env_cfg(), "sim_threads") else []
    small_cameras = ["--env.camera_width=16", "--env.camera_height=16"]  # DSRL over a tiny VLA renders its cameras
    cameras = small_cameras if algo == "dsrl" and hasattr(get_task(task).env_cfg(), "camera_width") else []
    return [*COMMON, *TINY[algo], *sim_threads, *cameras]


def _build(task: str, algo: str, out: Path, fields: dict[str, Any]):
    try:
        return build_run(
            task, algo, _overrides(task, algo), num_envs=NUM_ENVS, max_iterations=4, agent_fields=fields, log_dir=out
        )
    except ModelNotFoundError as err:
        pytest.skip(f"{task}: robot model missing ({err}); run `make models`")


def _dataset(task: str, root: Path) -> str:
    """A few short episodes of seeded random actions: enough for behaviour cloning to have something to fit."""
    try:
        env = make_env(task, num_envs=NUM_ENVS, episode_length=2 * EPISODE_LENGTH)
    except ModelNotFoundError as err:
        pytest.skip(f"{task}: robot model missing ({err}); run `make models`")
    g = torch.Generator().manual_seed(0)

    def policy(obs) -> torch.Tensor:
        return torch.rand(env.num_envs, env.num_actions, generator=g) * 2.0 - 1.0

    return str(write_lerobot_dataset(root / task, record_episodes(env, policy, NUM_ENVS), fps=20))


def _camera_dataset(task: str, root: Path) -> str:
    """A few short episodes of seeded random actions with the recipe's cameras at 16x16, each episode's instruction
    and, when the recipe's BC has a probe (``aux_state``), that group as the environment state."""
    from tests.envs.gl import require_gl

    require_gl()
    cfg = agent_cfg(task, "vla-bc")
    cameras = list(cfg.policy.cameras)
    env = build_env(task, [f"--env.cameras={','.join(cameras)}", "--env.camera_width=16", "--env.camera_height=16",
                           f"--env.episode_length={2 * EPISODE_LENGTH}"], num_envs=NUM_ENVS)  # fmt: skip
    g = torch.Generator().manual_seed(0)

    def policy(obs) -> torch.Tensor:
        return torch.rand(env.num_envs, env.num_actions, generator=g) * 2.0 - 1.0

    episodes = record_episodes(env, policy, NUM_ENVS, obs_group=cfg.policy.state_group, task=task_of(env, None, task),
                               cameras=cameras, env_state_group=cfg.aux_state or None)  # fmt: skip
    return str(write_lerobot_dataset(root / task, episodes, fps=20))


def _agent_fields(task: str, algo: str, tmp: Path) -> dict[str, Any]:
    """Inputs an algorithm needs besides the env: a dataset (flow-bc, vla-bc) or a pretrained flow-bc / vla-bc
    checkpoint (reinflow, vla-reinflow)."""
    if algo == "flow-bc":
        return {"dataset": _dataset(task, tmp / "data")}
    if algo == "vla-bc":
        return {"dataset": _camera_dataset(task, tmp / "data")}
    if algo == "reinflow":
        if (task, "flow-bc") not in PAIRS:
            pytest.skip(f"{task} has no flow-bc recipe to pretrain the ReinFlow policy with")
        return {"pretrained": _pretrain(task, "flow-bc", tmp)}
    if algo == "vla-reinflow":
        return {"pretrained": _pretrain(task, "vla-bc", tmp)}
    if algo == "distillation":
        return {"teacher_checkpoint": _teacher(task, tmp)}
    if algo == "dsrl":
        return {"pretrained": _pretrain(task, "flow-bc" if (task, "flow-bc") in PAIRS else "vla-bc", tmp)}
    return {}


def _teacher(task: str, tmp: Path) -> str:
    """One PPO iteration on the groups the task's distillation recipe expects its teacher to read."""
    groups = ",".join(agent_cfg(task, "distillation").teacher.actor_obs_groups)
    overrides = [*_overrides(task, "ppo"), f"--agent.policy.actor_obs_groups={groups}"]
    _, ppo = build_run(task, "ppo", overrides, num_envs=NUM_ENVS, max_iterations=1, log_dir=tmp / "teacher")
    ppo.learn()
    return str(tmp / "teacher" / "model_1.pt")


def _pretrain(task: str, algo: str, tmp: Path) -> str:
    """One iteration of ``algo`` (flow-bc, vla-bc) on ``task``: the checkpoint a fine-tuning run starts from."""
    _, bc = build_run(
        task,
        algo,
        _overrides(task, algo),
        num_envs=NUM_ENVS,
        max_iterations=1,
        agent_fields=_agent_fields(task, algo, tmp),
        log_dir=tmp / algo,
    )
    bc.learn()
    return str(tmp / algo / "model_1.pt")


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths at which the nested checkpoint contents ``a`` and ``b`` differ (tensors compared bit for bit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(-1), b.view(-1))
        if not same and a.is_floating_point() and a.shape == b.shape:
            return [f"{path}: max |difference| {(a - b).abs().max().item():.3g}"]
        return [] if same else [f"{path}: tensors differ"]
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return [] if a.dtype == b.dtype and np.array_equal(a, b) else [f"{path}: arrays differ"]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if type(a) is type(b) and a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.parametrize(("task", "algo"), PAIRS, ids=[f"{t}-{a}" for t, a in PAIRS])
def test_resume_reproduces_the_uninterrupted_run(tmp_path: Path, task: str, algo: str) -> None:
    fields = _agent_fields(task, algo, tmp_path)
    _, straight = _build(task, algo, tmp_path / "straight", fields)
    expected = straight.learn()
    _, part = _build(task, algo, tmp_path / "resumed", fields)
    part.learn(2)
    _, resumed, _ = load_run(tmp_path / "resumed" / "model_2.pt", resume=True, max_iterations=4)
    assert resumed.iteration == 2
    got = resumed.learn()
    assert resumed.iteration == straight.iteration == 4

    a = load_checkpoint(tmp_path / "straight" / "model_4.pt")
    b = load_checkpoint(tmp_path / "resumed" / "model_4.pt")
    untimed = [{k: v for k, v in m.items() if not k.startswith("Perf/")} for m in (expected, got)]
    diffs = _differences(a, b, "checkpoint") + _differences(*untimed, "metrics")
    assert not diffs, "\n".join(diffs)


def test_every_registered_task_is_covered() -> None:
    """A task registered without a recipe would silently escape the resume test above."""
    assert set(task_names()) <= {task for task, _ in PAIRS}
