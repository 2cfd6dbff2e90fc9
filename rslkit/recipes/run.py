"""Build a run, or rebuild one from a checkpoint: the one place every entry point gets its env and runner.

``build_run(task, algo, overrides)`` makes a fresh run from the task's env config and the recipe's agent config;
``load_run(checkpoint)`` rebuilds the run a checkpoint came from (its task, env config and agent config) and loads
it, to resume (``resume=True``) or to use its policy (play, record, export, evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rslkit.envs.registry import TaskSpec, get_task
from rslkit.envs.vec_env import VecEnv
from rslkit.recipes.algorithms import get_algorithm
from rslkit.recipes.catalog import agent_cfg as recipe_agent_cfg
from rslkit.recipes.catalog import env_settings
from rslkit.recipes.dataset_run import DATASET_SPEC_KEY, load_dataset_run
from rslkit.recipes.learned_reward import RewardChoice, wrap_env
from rslkit.runners.base import BaseRunner
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint
from rslkit.utils.config import apply_overrides, apply_settings, from_dict, to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.seeding import seed_everything
from rslkit.utils.validation import validate

SIM_BACKENDS = ("mujoco", "warp")
"""Physics backends of MuJoCo tasks (``--sim``); see :mod:`rslkit.envs.mujoco.factory`."""


def task_dir_name(task: str) -> str:
    """Directory name of a task's runs (``gym:Hopper-v5`` -> ``gym_Hopper-v5``: no colons in paths)."""
    return task.replace(":", "_").replace("/", "_")


def latest_run(logdir: str | Path, task: str) -> Path:
    """The newest run directory of ``task`` under ``logdir`` that holds a checkpoint.

    Raises:
        FileNotFoundError: when there is none (says where it looked).
    """
    task_dir = Path(logdir) / task_dir_name(task)
    runs = sorted(p for p in task_dir.glob("*") if p.is_dir() and any(p.glob("model_*.pt")))
    if not runs:
        raise FileNotFoundError(f"--resume found no run with checkpoints under '{task_dir}'; pass --checkpoint PATH.")
    return runs[-1]


def apply_sim(env_cfg: Any, sim: str | None, task: str) -> None:
    """Set ``env_cfg.sim`` to ``sim`` (nothing when None).

    Raises:
        ValueError: the task's config has no ``sim`` field (not a MuJoCo task), or ``sim`` is not a known backend.
    """
    if sim is None:
        return
    if not hasattr(env_cfg, "sim"):
        raise ValueError(
            f"--sim applies to MuJoCo tasks (their config has a 'sim' field); task '{task}' "
            f"({type(env_cfg).__name__}) simulates its own physics. Drop --sim."
        )
    if sim not in SIM_BACKENDS:
        raise ValueError(f"--sim must be one of {', '.join(SIM_BACKENDS)}, got '{sim}'.")
    env_cfg.sim = sim


def _set_num_envs(env_cfg: Any, num_envs: int | None) -> None:
    """``--num_envs``: set it (None: keep the config's), refusing values below 1."""
    if num_envs is not None:
        if num_envs < 1:
            raise ValueError(f"--num_envs must be >= 1, got {num_envs}.")
        env_cfg.num_envs = num_envs


def _assemble(
    spec: TaskSpec,
    env_cfg: Any,
    agent: Any,
    runner_cls: Callable[..., BaseRunner],
    *,
    seed: int,
    num_envs: int | None,
    sim: str | None,
    overrides: Sequence[str],
    max_iterations: int | None,
    agent_fields: dict[str, Any] | None,
    algo: str,
    device: str | torch.device,
    log_dir: str | Path | None,
    dist_info: DistInfo | None,
    reward: RewardChoice | None = None,
    env_defaults: dict[str, Any] | None = None,
) -> tuple[VecEnv, BaseRunner]:
    dist = dist_info or DistInfo()
    apply_settings(env_cfg, env_defaults or {}, "env")  # the recipe's, before the command line's
    _set_num_envs(env_cfg, num_envs)
    if max_iterations is not None:
        agent.max_iterations = max_iterations
    for path in agent_fields or {}:
        if not hasattr(agent, path.split(".")[0]):
            raise ValueError(f"--{path} does not apply to --algo {algo}.")
    apply_settings(agent, agent_fields or {}, "agent")  # typed, before the command line's overrides
    env_cfg.seed = seed + dist.rank
    apply_sim(env_cfg, sim, spec.name)  # another backend than the checkpoint's is fine: the state layout is shared
    roots: dict[str, Any] = {"env": env_cfg, "agent": agent}
    if reward is not None:
        roots["reward"] = reward.cfg
    apply_overrides(roots, list(overrides))
    if reward is not None:
        reward.check()
    seed_everything(seed + dist.rank)
    env = spec.make_env(env_cfg, str(device))
    run_info = {"task": spec.name, "seed": seed, "env_cfg": to_dict(env_cfg)}
    if reward is not None and reward.learned:
        env = wrap_env(env, reward, str(device))
        run_info["reward"] = reward.to_dict()
    runner = runner_cls(env, agent, log_dir, device, dist, run_info)
    return env, runner


def build_env(
    task: str,
    overrides: Sequence[str] = (),
    *,
    num_envs: int | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    sim: str | None = None,
) -> VecEnv:
    """The task's env alone, without an agent (scripted experts, recording tools): its registry config with the
    common flags and ``--env.*`` overrides applied, the env seeded with ``seed`` and every RNG seeded.

    Raises:
        ValueError: unknown task, a bad override (including ``--agent.*``, which has no agent to apply to).
    """
    spec = get_task(task)
    env_cfg = spec.env_cfg()
    _set_num_envs(env_cfg, num_envs)
    env_cfg.seed = seed
    apply_sim(env_cfg, sim, spec.name)
    apply_overrides({"env": env_cfg}, list(overrides))
    validate(env_cfg, "env")
    seed_everything(seed)
    return spec.make_env(env_cfg, str(device))


def build_run(
    task: str,
    algo: str = "ppo",
    overrides: Sequence[str] = (),
    *,
    num_envs: int | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    sim: str | None = None,
    max_iterations: int | None = None,
    agent_fields: dict[str, Any] | None = None,
    log_dir: str | Path | None = None,
    dist_info: DistInfo | None = None,
    runner_cls: Callable[..., BaseRunner] | None = None,
    reward: RewardChoice | None = None,
) -> tuple[VecEnv, BaseRunner]:
    """A fresh run: the task's env and the runner of ``algo`` with the task's recipe (:mod:`rslkit.recipes`).

    Args:
        task: task name (registered, ``gym:<EnvId>`` or ``module:attribute``).
        algo: algorithm name (``ppo``, ``sac``, ``flow-bc``, ``reinflow``).
        overrides: command-line style overrides, ``["--env.num_envs", "64", "--agent.algorithm.gamma=0.98"]``.
        num_envs, seed, sim, max_iterations: the common flags; ``seed`` seeds the env (plus the rank) and every RNG.
        agent_fields: agent-config fields to set, typed, before ``overrides`` (``{"dataset": PATH}``, dotted paths
            such as ``{"algorithm.utd_ratio": 10}``); a field the config lacks is an error naming the algorithm.
        log_dir: run directory for checkpoints and logs (None: no files).
        dist_info: torchrun rank layout.
        runner_cls: a runner class (or factory) to use instead of ``algo``'s, taking the same arguments and config
            (the real-world learner is SAC's runner with a network-fed loop).
        reward: ``--reward learned:PATH``: the env's reward replaced by a progress critic's (recorded in the run);
            its settings take ``--reward.<field>`` overrides.

    Returns:
        ``(env, runner)``; call ``runner.learn()``.

    Raises:
        ValueError: unknown task, algorithm or field, a task without a recipe for ``algo``, a bad override.
    """
    spec = get_task(task)
    _, default_runner = get_algorithm(algo)
    agent = recipe_agent_cfg(spec.name, algo)
    return _assemble(
        spec,
        spec.env_cfg(),
        agent,
        runner_cls or default_runner,
        seed=seed,
        num_envs=num_envs,
        sim=sim,
        overrides=overrides,
        max_iterations=max_iterations,
        agent_fields=agent_fields,
        algo=algo,
        device=device,
        log_dir=log_dir,
        dist_info=dist_info,
        reward=reward,
        env_defaults=env_settings(spec.name, algo),
    )


def resolve_checkpoint(checkpoint: str | Path) -> Path:
    """``checkpoint`` itself, or the last checkpoint of a run directory.

    Raises:
        FileNotFoundError: the path does not exist, or the directory holds no checkpoint.
    """
    path = Path(checkpoint)
    return latest_checkpoint(path) if path.is_dir() else path


def load_run(
    checkpoint: str | Path,
    *,
    num_envs: int | None = None,
    device: str | torch.device = "cpu",
    sim: str | None = None,
    seed: int | None = None,
    overrides: Sequence[str] = (),
    resume: bool = False,
    max_iterations: int | None = None,
    task: str | None = None,
    algo: str | None = None,
    log_dir: str | Path | None = None,
    dist_info: DistInfo | None = None,
    runner_cls: Callable[..., BaseRunner] | None = None,
) -> tuple[VecEnv, BaseRunner, dict[str, Any]]:
    """Rebuild the run of ``checkpoint`` (its task, env config and agent config) and load it.

    Args:
        checkpoint: a ``model_<iter>.pt`` or a run directory (its last checkpoint).
        num_envs: parallel envs (default: as trained).
        device: where the runner (and the env) live.
        sim: physics backend of a MuJoCo task (default: as trained).
        seed: env and RNG seed (default: the checkpoint's).
        overrides: ``--env.<field>`` / ``--agent.<field>`` overrides on top of the saved configs.
        resume: continue training exactly where the checkpoint stopped (optimizers, RNG, env state); otherwise
            only the network weights are loaded.
        max_iterations: new total of iterations (resume).
        task: the expected task; an error when the checkpoint was trained on another one.
        algo: the expected algorithm (``--algo`` of a resumed run); an error when it differs.
        log_dir: run directory for checkpoints and logs (default with ``resume``: the checkpoint's folder;
            without: no files).
        dist_info: torchrun rank layout.
        runner_cls: a runner class (or factory) to use instead of the checkpoint algorithm's (see :func:`build_run`).
            A run trained with ``--reward learned:PATH`` resumes with that critic; without ``resume`` (play, record,
            export) the env keeps the task's reward.

    Returns:
        ``(env, runner, saved)`` with ``saved`` the checkpoint's contents.

    Raises:
        FileNotFoundError: missing checkpoint.
        ValueError: not an rslkit checkpoint, another task or algorithm than asked for, a bad override.
    """
    path = resolve_checkpoint(checkpoint)
    saved = load_checkpoint(path)
    if algo is not None and algo != saved.get("algorithm"):
        raise ValueError(f"Checkpoint '{path}' was trained with --algo {saved.get('algorithm')}, not --algo {algo}.")
    saved_task = saved.get("task")
    if saved_task is None and saved.get(DATASET_SPEC_KEY):  # trained from a dataset alone
        spec_env, runner = load_dataset_run(
            path,
            saved,
            task=task,
            num_envs=num_envs,
            seed=seed,
            overrides=overrides,
            max_iterations=max_iterations,
            device=device,
            log_dir=path.parent if resume and log_dir is None else log_dir,
            dist_info=dist_info,
            runner_cls=runner_cls,
        )
        runner.load(path, weights_only=not resume)
        return spec_env, runner, saved
    if saved_task is None:
        if task is None:
            raise ValueError(f"Checkpoint '{path}' does not record its task; pass --task NAME.")
        saved_task = task
    if task is not None and task != saved_task:
        raise ValueError(f"Checkpoint '{path}' was trained on task '{saved_task}', not '{task}'.")
    algo = str(saved["algorithm"])
    spec = get_task(str(saved_task))
    cfg_cls, default_runner = get_algorithm(algo)
    env_cfg = from_dict(type(spec.env_cfg()), saved["env_cfg"]) if saved.get("env_cfg") else spec.env_cfg()
    agent = from_dict(cfg_cls, saved["agent_cfg"])
    if resume and log_dir is None:
        log_dir = path.parent
    env, runner = _assemble(
        spec,
        env_cfg,
        agent,
        runner_cls or default_runner,
        seed=int(saved.get("seed", 0)) if seed is None else seed,
        num_envs=num_envs,
        sim=sim,
        overrides=overrides,
        max_iterations=max_iterations,
        agent_fields=None,
        algo=algo,
        device=device,
        log_dir=log_dir,
        dist_info=dist_info,
        reward=RewardChoice.from_dict(saved["reward"]) if resume and saved.get("reward") else None,
    )
    runner.load(path, weights_only=not resume)
    return env, runner, saved
