"""Any Gymnasium env as a :class:`~rslkit.envs.VecEnv`: ``--task gym:<EnvId>`` (e.g. ``gym:Hopper-v5``).

``num_envs`` copies run in a ``gymnasium.vector.SyncVectorEnv`` with same-step auto-reset: the observation returned
at a done step is already the first one of the next episode, the last one of the finished episode is reported in
``extras["final_obs"]`` and truncations (time limits) in ``extras["time_outs"]``. Box actions are taken in the
policy's ``[-1, 1]`` range and rescaled to the env's bounds; Discrete actions are indices ``[N, 1]``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.vec_env import VecEnv

GYM_PREFIX = "gym:"


@dataclass
class GymEnvCfg:
    """Settings of a wrapped Gymnasium env. CLI: ``--env.<field>``."""

    env_id: str = "Pendulum-v1"
    """Gymnasium id (``gymnasium.make`` name)."""
    num_envs: int = 8
    """Copies stepped in sequence by a ``SyncVectorEnv``."""
    seed: int = 0
    """Copy ``i`` is reset with seed ``seed + i``."""
    episode_length: int = 0
    """Time limit in steps; 0 keeps the env's registered ``max_episode_steps``."""
    check_actions: bool = True
    """Raise on wrong-shape or non-finite actions."""


def _to_policy_space(space: gym.Space) -> tuple[gym.Space, int]:
    """The action space the policy sees and its action dimension."""
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(-1.0, 1.0, (int(np.prod(space.shape)),), np.float32), int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.Discrete(int(space.n)), 1
    raise ValueError(
        f"Gymnasium action space {space} is not supported; rslkit wraps Box (continuous) and Discrete action spaces."
    )


class GymVecEnv(VecEnv):
    """``num_envs`` copies of a Gymnasium env behind the rsl_rl-style VecEnv contract.

    Observation group ``policy``: the flattened Box observation as float32 ``[N, D]`` on ``device``. Rewards
    ``[N]`` float32, dones ``[N]`` bool (terminated or truncated).

    Raises:
        ValueError: for an unknown id, a missing optional dependency (e.g. MuJoCo), or unsupported spaces.
    """

    def __init__(self, cfg: GymEnvCfg, device: str | torch.device = "cpu") -> None:
        if cfg.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {cfg.num_envs}.")
        self.cfg = cfg
        self.device = torch.device(device)
        self.num_envs = cfg.num_envs
        kwargs: dict[str, Any] = {"max_episode_steps": cfg.episode_length} if cfg.episode_length > 0 else {}
        _check_env_id(cfg.env_id)
        try:
            self.vec = gym.vector.SyncVectorEnv(
                [functools.partial(gym.make, cfg.env_id, **kwargs) for _ in range(cfg.num_envs)],
                autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            )
        except gym.error.DependencyNotInstalled as err:
            raise ValueError(f"Gymnasium env '{cfg.env_id}' needs an optional dependency: {err}") from None
        obs_space, self.gym_action_space = self.vec.single_observation_space, self.vec.single_action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise ValueError(
                f"Gymnasium observation space {obs_space} is not supported; wrap the env with "
                "gymnasium.wrappers.FlattenObservation (Dict/Tuple) or use a Box observation."
            )
        self.action_space, self.num_actions = _to_policy_space(self.gym_action_space)
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)
        if isinstance(self.gym_action_space, gym.spaces.Box):
            low = self.gym_action_space.low.reshape(-1).astype(np.float64)
            high = self.gym_action_space.high.reshape(-1).astype(np.float64)
            self._bounded = np.isfinite(low) & np.isfinite(high)
            self._low, self._high = np.where(self._bounded, low, -1.0), np.where(self._bounded, high, 1.0)
        limit = self.vec.envs[0].spec.max_episode_steps if self.vec.envs[0].spec is not None else None
        self.max_episode_length = int(cfg.episode_length or limit or 2**31 - 1)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        obs, _ = self.vec.reset(seed=cfg.seed)
        self._obs = self._to_td(obs)

    # ------------------------------------------------------------------ conversions
    def _to_td(self, obs: np.ndarray) -> TensorDict:
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1), device=self.device)
        return TensorDict({"policy": x}, batch_size=[self.num_envs], device=self.device)

    def to_gym_actions(self, actions: torch.Tensor) -> np.ndarray:
        """Policy actions ``[N, A]`` -> the batch the Gymnasium vector env takes.

        Box: ``[-1, 1]`` is clipped, then mapped affinely onto ``[low, high]`` (unbounded dimensions pass through).
        Discrete: the index in column 0, as int64 ``[N]``.
        """
        a = actions.detach().to("cpu", torch.float64).numpy()
        if self._discrete:
            return np.rint(a[:, 0]).astype(np.int64)
        a = np.where(self._bounded, np.clip(a, -1.0, 1.0), a)
        scaled = self._low + 0.5 * (a + 1.0) * (self._high - self._low)
        scaled = np.where(self._bounded, scaled, a)
        shape = (self.num_envs, *(self.gym_action_space.shape or ()))
        return scaled.reshape(shape).astype(self.gym_action_space.dtype)

    def _check_actions(self, actions: torch.Tensor) -> None:
        expected = (self.num_envs, self.num_actions)
        if tuple(actions.shape) != expected:
            raise ValueError(
                f"{self.cfg.env_id}: step expects actions of shape {list(expected)} (num_envs, num_actions), "
                f"got {list(actions.shape)}."
            )
        if not bool(torch.isfinite(actions).all()):
            bad = (~torch.isfinite(actions).all(-1)).nonzero().squeeze(-1).tolist()
            raise ValueError(f"Non-finite actions for env indices {bad[:20]}; check the policy for NaN.")

    # ------------------------------------------------------------------ VecEnv API
    def get_observations(self) -> TensorDict:
        """Current observations, group ``policy`` ``[N, D]``."""
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Step every copy; finished copies reset in the same step.

        Returns:
            ``(obs, rewards [N], dones [N], extras)`` with ``extras["time_outs"]`` ``[N]`` (truncated and not
            terminated), ``extras["final_obs"]`` (batch ``[N]``: the last observation of each finished episode, the
            current observation elsewhere) and ``extras["log"]`` (empty).
        """
        if self.cfg.check_actions:
            self._check_actions(actions)
        obs, rewards, terminated, truncated, infos = self.vec.step(self.to_gym_actions(actions))
        dones = np.logical_or(terminated, truncated)
        final = np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1).copy()
        if "final_obs" in infos:
            for i in np.nonzero(infos["_final_obs"])[0]:
                final[i] = np.asarray(infos["final_obs"][i], dtype=np.float32).reshape(-1)
        self._obs = self._to_td(obs)
        dones_t = torch.as_tensor(dones, device=self.device)
        self.episode_length_buf += 1
        self.episode_length_buf[dones_t] = 0
        extras: dict[str, Any] = {
            "time_outs": torch.as_tensor(np.logical_and(truncated, ~terminated), device=self.device),
            "final_obs": self._to_td(final),
            "log": {},
        }
        return self._obs, torch.as_tensor(rewards, dtype=torch.float32, device=self.device), dones_t, extras

    @property
    def step_dt(self) -> float | None:
        """Simulated seconds per ``step`` where the Gymnasium env says (MuJoCo envs' ``dt``), else None."""
        dt = getattr(self.vec.envs[0].unwrapped, "dt", None)
        return float(dt) if isinstance(dt, (int, float)) and dt > 0 else None

    def close(self) -> None:
        """Close every copy."""
        self.vec.close()


# ---------------------------------------------------------------------- task registry hook
def _check_env_id(env_id: str) -> None:
    try:
        gym.spec(env_id)
    except gym.error.Error as err:
        raise ValueError(
            f"Unknown Gymnasium env '{env_id}' ({err}). Use a registered id such as Pendulum-v1 or Hopper-v5, "
            "e.g. --task gym:Hopper-v5 (MuJoCo envs need `pip install gymnasium[mujoco]`)."
        ) from None


@functools.cache
def is_discrete(env_id: str) -> bool:
    """Whether ``env_id`` has a Discrete action space (builds one copy once)."""
    try:
        env = gym.make(env_id)
    except gym.error.DependencyNotInstalled as err:
        raise ValueError(f"Gymnasium env '{env_id}' needs an optional dependency: {err}") from None
    try:
        return isinstance(env.action_space, gym.spaces.Discrete)
    finally:
        env.close()


def gym_task_spec(name: str) -> TaskSpec:
    """Task spec of ``gym:<EnvId>``, for :func:`rslkit.envs.registry.get_task`.

    Raises:
        ValueError: when ``name`` lacks the ``gym:`` prefix or names no registered Gymnasium env.
    """
    if not name.startswith(GYM_PREFIX) or len(name) == len(GYM_PREFIX):
        raise ValueError(f"'{name}' is not a Gymnasium task name; write gym:<EnvId>, e.g. gym:Hopper-v5.")
    env_id = name[len(GYM_PREFIX) :]
    _check_env_id(env_id)
    return TaskSpec(
        name=name,
        env_cfg=lambda: GymEnvCfg(env_id=env_id),
        make_env=lambda cfg, device: GymVecEnv(cfg, device),
        description=f"Gymnasium {env_id} ({GYM_PREFIX} adapter, SyncVectorEnv)",
    )
