"""Distillation runner: a student trained on its own rollouts (the shared loop of
:mod:`rslkit.runners.rollout_runner`) to act as a PPO teacher does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.algorithms.distillation import Distillation
from rslkit.envs.vec_env import VecEnv
from rslkit.models.actor_critic import ActorCritic, PolicyCfg
from rslkit.models.student_teacher import StudentTeacher
from rslkit.models.student_teacher_recurrent import make_student_teacher
from rslkit.runners.distillation_config import DistillationRunnerCfg
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.rollout_runner import RolloutRunner
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.checkpoint import load_checkpoint
from rslkit.utils.config import from_dict, to_dict
from rslkit.utils.distributed import DistInfo

TEACHER_ALGORITHM = "ppo"
"""The algorithm whose checkpoints are teachers."""


def read_teacher(path: str | Path, device: torch.device) -> tuple[PolicyCfg, dict[str, torch.Tensor]]:
    """The policy settings and weights of the PPO checkpoint ``path`` (``--agent.teacher_checkpoint``).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not a PPO checkpoint (or not an rslkit checkpoint at all).
    """
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"--agent.teacher_checkpoint '{path}' does not exist; pass a model_<iter>.pt of a PPO run of this task "
            "(train one with train.py --task TASK --algo ppo)."
        )
    data = load_checkpoint(path, device)
    if data.get("algorithm") != TEACHER_ALGORITHM:
        raise ValueError(
            f"--agent.teacher_checkpoint '{path}' was written by '{data.get('algorithm')}'; the teacher is a "
            f"{TEACHER_ALGORITHM} checkpoint (train one with train.py --task TASK --algo {TEACHER_ALGORITHM})."
        )
    return from_dict(PolicyCfg, data["agent_cfg"]["policy"]), data["alg"]["policy"]


def build_teacher(
    obs: TensorDict, num_actions: int, cfg: PolicyCfg, weights: dict[str, torch.Tensor] | None
) -> ActorCritic:
    """The teacher actor-critic of ``cfg`` for this env, with ``weights`` (None: untrained, to be loaded).

    Raises:
        ValueError: the teacher has discrete actions, reads an observation group this env lacks, or its weights do
            not fit this env's sizes (names the group or tensor and ``--agent.teacher_checkpoint``).
    """
    flag = "--agent.teacher_checkpoint"
    if cfg.distribution == "categorical":
        raise ValueError(f"The teacher ({flag}) has discrete actions; distillation regresses continuous actions.")
    for g in cfg.actor_obs_groups:
        if g not in obs.keys():
            raise ValueError(
                f"The teacher ({flag}) reads observation group '{g}', which this env does not provide (it has "
                f"{sorted(obs.keys())}); distill on the task and env settings the teacher was trained with."
            )
    teacher = ActorCritic(obs, num_actions, cfg)
    if weights is None:
        return teacher
    own = teacher.state_dict()
    for name, value in weights.items():
        if name in own and own[name].shape != value.shape:
            raise ValueError(
                f"The teacher ({flag}) does not fit this env: its '{name}' has shape {list(value.shape)}, this env "
                f"needs {list(own[name].shape)} (groups {dict((g, obs[g].shape[-1]) for g in cfg.actor_obs_groups)}, "
                f"{num_actions} actions). Distill with the task and env settings the teacher was trained with."
            )
    teacher.load_state_dict(weights)
    return teacher


class DistillationRunner(RolloutRunner[DistillationRunnerCfg, Distillation]):
    """Distils a PPO teacher into a student policy (same interface as :class:`~rslkit.runners.OnPolicyRunner`).

    The student acts in the env (with ``student.noise_std`` noise); the teacher, on the groups it was trained on,
    labels each state; :class:`~rslkit.algorithms.distillation.Distillation` regresses the student onto the labels.
    Checkpoints are self-contained: they hold the teacher and store ``teacher_checkpoint = ""`` in their config,
    with the origin under ``teacher_from``, so ``--resume``, ``play.py`` and export need no teacher file.

    Args:
        env: the environment (rslkit task or any rsl_rl-style env).
        cfg: agent config.
        log_dir: run directory for checkpoints and logs; None for no files.
        device: training device.
        dist_info: distillation runs in one process.
        run_info: extra checkpoint entries (task name, env config).
    """

    algorithm_name = "distillation"

    def __init__(
        self,
        env: VecEnv,
        cfg: DistillationRunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        obs = env.get_observations().to(self.device)
        self._teacher_from = cfg.teacher_checkpoint
        """Where the teacher came from (``teacher_from`` in checkpoints; kept across resumes)."""
        weights = None
        if cfg.teacher_checkpoint:
            cfg.teacher, weights = read_teacher(cfg.teacher_checkpoint, self.device)
        self.teacher_loaded = weights is not None
        """Whether the teacher holds trained weights (from ``teacher_checkpoint`` or :meth:`load`)."""
        teacher = build_teacher(obs, env.num_actions, cfg.teacher, weights)
        policy = make_student_teacher(obs, env.num_actions, cfg.student, teacher)
        self.alg = Distillation(policy, cfg.algorithm, cfg.num_steps_per_env, obs, self.device)
        self.stats = EpisodeStats(env.num_envs, self.device, cfg.episode_stats_window)
        self.rollout_env = env
        self.total_env_steps = 0
        self._obs = obs

    @property
    def policy(self) -> StudentTeacher:
        """The student (with its teacher): what export writes (the student alone)."""
        return self.alg.policy

    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """The student's deterministic actions (its memory reset on episode ends by :meth:`reset_inference`)."""
        self.policy.eval()
        self.policy.reset()
        return self.policy.act_inference

    def reset_inference(self, dones: torch.Tensor) -> None:
        """Clear the student's memory of finished episodes during evaluation."""
        self.policy.reset(dones)

    # ------------------------------------------------------------------ training loop
    def _start_learning(self) -> None:
        if not self.teacher_loaded:
            raise ValueError(
                "Distillation needs a trained teacher: pass --agent.teacher_checkpoint PATH (a ppo checkpoint of this "
                "task; or train.py --checkpoint PATH), or resume a distillation run."
            )
        if self.cfg.init_at_random_ep_len and self.iteration == 0:
            self._spread_episode_starts()
        self.policy.train()
        self._obs = self.env.get_observations().to(self.device)

    def _update(self) -> dict[str, float]:
        return self.alg.update()

    def _env_steps(self) -> int:
        return self.cfg.num_steps_per_env * self.env.num_envs

    def _policy_metrics(self, obs: TensorDict) -> dict[str, float]:
        return {"Loss/learning_rate": self.alg.learning_rate}

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> dict[str, Any]:
        """Student, teacher, optimizer, config (without ``teacher_checkpoint``, whose path is kept as
        ``teacher_from``), env steps, RNG, env state and the memory states: a self-contained checkpoint."""
        agent_cfg = to_dict(self.cfg)
        agent_cfg["teacher_checkpoint"] = ""
        return {
            "total_env_steps": self.total_env_steps,
            "alg": self.alg.state_dict(),
            "agent_cfg": agent_cfg,
            "teacher_from": self._teacher_from,
            **capture_run_state(self.env, self.stats),
            "hidden": (self.policy.hidden, self.policy.teacher.actor_hidden),
        }

    def load(self, path: str | Path, weights_only: bool = False) -> dict[str, Any]:
        """Resume from a distillation checkpoint (with ``weights_only``: take its student and teacher), or, given a
        PPO checkpoint, take it as the teacher (rsl_rl's ``runner.load(teacher)``; ``train.py --checkpoint``).

        Raises:
            ValueError: a checkpoint of another algorithm, or one that does not fit this env and config.
        """
        data = load_checkpoint(path, self.device)
        if data.get("algorithm") == TEACHER_ALGORITHM:
            self._set_teacher(*read_teacher(path, self.device))
            self._teacher_from, self.teacher_loaded = str(path), True
            return data
        if data.get("algorithm") == self.algorithm_name:  # its teacher, whatever this runner was built with
            self._set_teacher(from_dict(PolicyCfg, data["agent_cfg"]["teacher"]), None)
        data = super().load(path, weights_only)
        self.teacher_loaded = True
        return data

    def _set_teacher(self, cfg: PolicyCfg, weights: dict[str, torch.Tensor] | None) -> None:
        """Replace the teacher with one of ``cfg`` (and ``weights``; None: to be loaded with the checkpoint)."""
        self.cfg.teacher = cfg
        obs = self.env.get_observations().to(self.device)
        teacher = build_teacher(obs, self.env.num_actions, cfg, weights).to(self.device)
        self.policy.teacher = teacher.requires_grad_(False).eval()

    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        self.policy.load_state_dict(alg_state["policy"])

    def _restore(self, data: dict[str, Any]) -> None:
        self.total_env_steps = data.get("total_env_steps", 0)
        self._teacher_from = str(data.get("teacher_from", ""))  # a resumed run keeps its origin
        restore_run_state(data, self.env, self.stats)
        self.policy.hidden, self.policy.teacher.actor_hidden = data.get("hidden", (None, None))
