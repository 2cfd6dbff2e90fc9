"""Base class for tasks written as batched torch code: auto-reset, time-outs and per-term reward logging."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import gymnasium as gym
import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv
from rslkit.utils.validation import expect, validate


@dataclass
class TaskCfg:
    """Settings every torch-native task has."""

    num_envs: int = 4096
    """Number of parallel environments."""
    episode_length: int = 200
    """Steps before an episode is truncated (reported in ``extras["time_outs"]``)."""
    seed: int = 0
    """Seed of the task's own random generator (initial states, goals)."""
    check_actions: bool = True
    """Raise on wrong-shape or non-finite actions (names the offending env indices)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field no task can run with."""
        for name in ("num_envs", "episode_length"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")


class TorchTask(VecEnv):
    """A task as pure functions over batched state tensors, on any device.

    Subclasses implement :meth:`_reset_envs`, :meth:`_apply_actions`, :meth:`_observations`,
    :meth:`_reward_terms` and :meth:`_terminated`; this class handles episode bookkeeping, time-outs,
    auto-reset, per-term reward logging and action checks. The task owns a ``torch.Generator`` so that its
    randomness is reproducible and can be checkpointed.
    """

    action_space: gym.Space
    action_names: list[str] | None = None
    """What each action drives (exported with the policy); None: unnamed."""
    joint_names: list[str] | None = None
    """Robot joints commanded by the actions, in action order (the ROS 2 node's default joint order)."""
    observation_names: dict[str, list[str]] | None = None
    """Observation group -> a name per column (exported with the policy)."""

    def __init__(self, cfg: TaskCfg, num_actions: int, device: str | torch.device = "cpu") -> None:
        validate(cfg, "env")
        self.cfg = cfg
        self.device = torch.device(device)
        self.num_envs = cfg.num_envs
        self.num_actions = num_actions
        self.max_episode_length = cfg.episode_length
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.seed)
        self._term_sums: dict[str, torch.Tensor] = {}
        self._report_final_obs = False
        self._obs: TensorDict | None = None
        """Observations of the last step (None: not computed since the last reset); see :meth:`get_observations`."""
        self._all_envs = torch.arange(self.num_envs, device=self.device)

    # ----------------------------------------------------------------- subclass API
    @abstractmethod
    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        """Sample fresh initial state for ``env_ids``."""

    @abstractmethod
    def _apply_actions(self, actions: torch.Tensor) -> None:
        """Advance the physics of all envs by one control step under ``actions [N, A]``."""

    @abstractmethod
    def _observations(self) -> TensorDict:
        """Observation groups of the current state, batch ``[N]``."""

    @abstractmethod
    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Weighted reward terms ``{name: [N]}`` for the transition just taken; the reward is their sum."""

    @abstractmethod
    def _terminated(self) -> torch.Tensor:
        """``[N]`` bool: episodes that ended in a terminal state (not a time-out)."""

    def _success(self) -> torch.Tensor | None:
        """``[N]`` bool success flags for tasks that define success, else None."""
        return None

    def _pre_step(self) -> None:
        """Hook run before the physics step (e.g. to cache the state the reward is computed from)."""

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """Named state tensors that :meth:`state_dict` saves (subclasses list their own).

        :meth:`load_state_dict` copies into these tensors in place, so observations must not alias them (return
        new tensors from :meth:`_observations`, e.g. via ``torch.stack`` or ``clone``).
        """
        return {}

    # ----------------------------------------------------------------- VecEnv API
    def reset(self) -> TensorDict:
        """Reset every env and return the observations."""
        self._reset_all()
        return self.get_observations()

    def _reset_all(self) -> None:
        self.episode_length_buf.zero_()
        self._reset_envs(self._all_envs)
        for total in self._term_sums.values():
            total.zero_()
        self._obs = None

    def get_observations(self) -> TensorDict:
        """Current observations, batch ``[N]``: those the last :meth:`step` returned (after a reset: computed once).

        Asking again returns the same observations (noise included) without drawing from the task's generator, so
        a runner that fetches them once more after a resume continues exactly as the uninterrupted run. The
        TensorDict is the task's: do not modify it in place.
        """
        if self._obs is None:
            self._obs = self._observations()
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Apply ``actions [N, A]``, reset finished episodes, and return ``(obs, rewards, dones, extras)``."""
        if self.cfg.check_actions:
            self._check_actions(actions)
        self._pre_step()
        self._apply_actions(actions)
        terms = self._reward_terms(actions)
        rewards = torch.stack(list(terms.values())).sum(0)
        self.episode_length_buf += 1
        terminated = self._terminated()
        time_outs = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        dones = terminated | time_outs
        extras: dict = {"time_outs": time_outs, "log": {}}
        success = self._success()
        if success is not None:
            extras["success"] = success
        self._accumulate_terms(terms)
        env_ids = dones.nonzero(as_tuple=False).squeeze(-1)
        if env_ids.numel() > 0:
            if self._report_final_obs:
                extras["final_obs"] = self._observations()  # before the reset: rows of done envs are their last
            self._log_episode_terms(env_ids, extras["log"])
            self.episode_length_buf[env_ids] = 0
            self._reset_envs(env_ids)
        self._obs = self._observations()
        return self._obs, rewards, dones, extras

    def reset_envs(self, env_ids: torch.Tensor) -> TensorDict:
        """End the episodes of ``env_ids [K]`` now and start new ones (a learned success detector fired, a person
        pressed reset); returns the observations ``[N]`` (other rows unchanged). Their episode terms are not logged:
        the caller reports why the episode ended."""
        env_ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device).reshape(-1)
        if env_ids.numel() > 0:
            for total in self._term_sums.values():
                total[env_ids] = 0.0
            self.episode_length_buf[env_ids] = 0
            self._reset_envs(env_ids)
            self._obs = self._observations()
        return self.get_observations()

    def request_final_obs(self) -> None:
        """From now on, steps in which an episode ends report ``extras["final_obs"]`` (batch ``[N]``): the
        observations reached before the auto-reset (rows of the other envs equal the returned observations), so
        that off-policy learners bootstrap time-outs from the true last state. Costs one extra observation pass in
        those steps."""
        self._report_final_obs = True

    # ----------------------------------------------------------------- helpers
    def _check_actions(self, actions: torch.Tensor) -> None:
        expected = (self.num_envs, self.num_actions)
        if tuple(actions.shape) != expected:
            raise ValueError(
                f"{type(self).__name__}.step expects actions of shape {list(expected)} (num_envs, num_actions), "
                f"got {list(actions.shape)}."
            )
        finite = torch.isfinite(actions).all(dim=-1)
        if not bool(finite.all()):
            bad = (~finite).nonzero().squeeze(-1).tolist()
            raise ValueError(
                f"Non-finite actions for env indices {bad[:20]}{' ...' if len(bad) > 20 else ''}; "
                "check the policy for NaN (e.g. exploding gradients or unnormalized inputs)."
            )

    def _accumulate_terms(self, terms: dict[str, torch.Tensor]) -> None:
        for name, value in terms.items():
            total = self._term_sums.get(name)
            if total is None:
                total = self._term_sums[name] = torch.zeros(self.num_envs, device=self.device)
            total += value

    def _log_episode_terms(self, env_ids: torch.Tensor, log: dict) -> None:
        for name, total in self._term_sums.items():
            log[f"Episode_Reward/{name}"] = total[env_ids].mean()
            total[env_ids] = 0.0

    def rand(self, *shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """Uniform samples in ``[low, high)`` from the task's generator."""
        u = torch.rand(*shape, generator=self.generator, device=self.device)
        return low + (high - low) * u

    def state_dict(self) -> dict:
        """Full task state (physics, episode counters, reward sums, generator, current observations) for exact
        resume."""
        return {
            "episode_length_buf": self.episode_length_buf.clone(),
            "term_sums": {k: v.clone() for k, v in self._term_sums.items()},
            "generator": self.generator.get_state(),
            "state": {k: v.clone() for k, v in self._state_tensors().items()},
            "obs": None if self._obs is None else {k: v.clone() for k, v in self._obs.items()},
        }

    def env_state(self, env_id: int) -> dict[str, torch.Tensor]:
        """One env's rows of the task's state tensors (physics, goal, last action), cloned: a start state for
        :meth:`start_episode_from` (return-and-explore). The task's generator and episode counters are not in it.

        Raises:
            NotImplementedError: the task lists no state tensors.
        """
        tensors = self._state_tensors()
        if not tensors:
            raise NotImplementedError(f"{type(self).__name__} lists no state tensors (_state_tensors).")
        return {name: tensor[env_id].clone() for name, tensor in tensors.items()}

    def start_episode_from(self, env_id: int, state: dict[str, torch.Tensor]) -> TensorDict:
        """Begin a new episode of env ``env_id`` at ``state``, taken by :meth:`env_state` from this task (any env).

        The episode counter and reward sums of the env restart from zero; the generator is left as it is. Returns
        the observations of all envs (the other envs' rows are unchanged).

        Raises:
            ValueError: ``state`` lacks a state tensor of this task, or a row has another shape.
        """
        tensors = self._state_tensors()
        missing = sorted(set(tensors) - set(state))
        if missing or not tensors:
            raise ValueError(f"Start state lacks {missing or 'everything'}; take it with env_state() of this task.")
        for name, tensor in tensors.items():
            row = state[name]
            if tuple(row.shape) != tuple(tensor.shape[1:]):
                raise ValueError(
                    f"Start state '{name}' has shape {list(row.shape)}, the task {list(tensor.shape[1:])}."
                )
            tensor[env_id] = row.to(tensor)
        self.episode_length_buf[env_id] = 0
        for total in self._term_sums.values():
            total[env_id] = 0.0
        self._after_state_rows_written(torch.tensor([env_id], device=self.device))
        self._obs = None
        return self.get_observations()

    def _after_state_rows_written(self, env_ids: torch.Tensor) -> None:
        """Hook after :meth:`start_episode_from` wrote rows of the state tensors: recompute derived quantities
        (MuJoCo tasks: forward kinematics, sensors)."""

    def load_state_dict(self, state: dict) -> None:
        """Restore a state saved by :meth:`state_dict` (same task and ``num_envs``).

        The saved observations become :meth:`get_observations` (a state saved without them, by an older rslkit,
        has them recomputed, drawing fresh observation noise).

        Raises:
            ValueError: the state has another number of envs, or lacks entries this task saves.
        """
        if state["episode_length_buf"].shape != self.episode_length_buf.shape:
            raise ValueError(
                f"Saved task state has {state['episode_length_buf'].shape[0]} envs, this task has {self.num_envs}; "
                "resume with the same --num_envs."
            )
        tensors = self._state_tensors()
        missing = sorted(set(tensors) - set(state["state"]))
        if missing:
            raise ValueError(
                f"Saved task state lacks {missing} ({type(self).__name__} saves {sorted(tensors)}): it comes from "
                "another task or an older rslkit. Load only the checkpoint's weights instead of resuming it."
            )
        self.episode_length_buf.copy_(state["episode_length_buf"])
        self._term_sums = {k: v.to(self.device).clone() for k, v in state["term_sums"].items()}
        self.generator.set_state(state["generator"])
        for name, tensor in tensors.items():
            tensor.copy_(state["state"][name])
        obs = state.get("obs")
        self._obs = None
        if obs is not None:
            groups = {k: v.to(self.device).clone() for k, v in obs.items()}
            self._obs = TensorDict(groups, batch_size=[self.num_envs], device=self.device)
