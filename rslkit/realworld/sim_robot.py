"""A simulated robot that behaves like a real one: a VecEnv paced in wall-clock time, with latency, costly resets,
and episodes that start from recorded states (return-and-explore).

:class:`RealTimeRobot` wraps a one-env VecEnv and keeps its interface, so an actor drives it exactly as it would
drive the ROS 2 node of a real arm:

- ``step()`` returns at the next tick of a wall-clock schedule (``time.monotonic``) at the control rate. A caller
  later than a tick (plus ``max_tick_lateness_s``) misses it: the miss is counted and the schedule restarts from
  now, never bursting to catch up. The simulation pauses while the caller is late, where a real arm keeps moving
  with its last command: the count is what the emulation gives.
- Actuation latency: the env applies the action commanded ``ceil(action_latency_s / period)`` ticks earlier (a
  FIFO; latency is quantized up to whole ticks, since a VecEnv step cannot switch actions mid-step). Until the first
  command of an episode has come through, the env repeats that first command.
- Observation latency: ``step()`` returns the observation of ``ceil(obs_latency_s / period)`` ticks earlier (a FIFO,
  filled with the episode's first observation, when the robot stood still after its reset).
- No free resets: when the env reports done, the time a real reset takes passes in wall-clock before ``step()``
  returns, and ``extras["reset_s"]`` says how long. ``home``: a scripted move home, ``max |q_end - q_home| /
  home_speed + settle_s`` (at least ``min_reset_s``), from the joints before the last step to those of the env's
  next initial state; ``wait``: ``reset_wait_s`` (a person resets the scene). The env itself auto-resets (it
  teleports), so only the time of the reset is emulated, not the motion.

Return-and-explore (VLAC mode 2): :meth:`RealTimeRobot.capture_state` records the exact simulation state of the
current step (MuJoCo's integration state and the task's variables), a :class:`StartStates` pool keeps those of
demonstrations and successful episodes, and :meth:`RealTimeRobot.start_from` begins an episode in one of them,
after the time a move to its joint pose takes. On a real robot the same is a scripted move of the arm to the
recorded joint pose (objects are where the person puts them).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import control_period
from rslkit.utils.validation import expect, finite, validate

log = logging.getLogger(__name__)

StartState = dict[str, torch.Tensor]
"""One env's task state (``TorchTask.env_state``): named rows of the physics and task tensors."""


@dataclass
class RealTimeCfg:
    """Pacing, latency and reset costs of :class:`RealTimeRobot`."""

    control_hz: float | None = None
    """Ticks per second; None: the env's control period (``step_dt`` or ``cfg.dt``)."""
    obs_latency_s: float = 0.0
    """Age of the observations ``step()`` returns (rounded up to whole ticks)."""
    action_latency_s: float = 0.0
    """Delay before a commanded action reaches the env (rounded up to whole ticks)."""
    reset: Literal["home", "wait"] = "home"
    """``home``: a timed scripted move back to the home pose; ``wait``: ``reset_wait_s`` for a person."""
    home_speed: float = 1.0
    """rad/s of the slowest joint of a scripted move (``home`` resets and :meth:`RealTimeRobot.start_from`)."""
    settle_s: float = 0.5
    """Added to every scripted move (the arm settles, the scene is checked)."""
    min_reset_s: float = 1.0
    """Shortest ``home`` reset (also the cost when the env's joints cannot be read)."""
    reset_wait_s: float = 5.0
    """Duration of a ``wait`` reset."""
    max_tick_lateness_s: float | None = None
    """A ``step()`` called more than this after its tick misses it; None: a tenth of the period."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field a robot cannot run with."""
        hz = self.control_hz
        expect(hz is None or (finite(hz) and hz > 0), "control_hz", f"must be None or > 0, got {hz}")
        for name in ("obs_latency_s", "action_latency_s", "settle_s", "min_reset_s", "reset_wait_s"):
            value = getattr(self, name)
            expect(finite(value) and value >= 0, name, f"must be a finite number >= 0 (seconds), got {value}")
        expect(self.reset in ("home", "wait"), "reset", f"must be 'home' or 'wait', got {self.reset!r}")
        speed = self.home_speed
        expect(finite(speed) and speed > 0, "home_speed", f"must be > 0 (rad/s), got {speed}")
        late = self.max_tick_lateness_s
        expect(late is None or (finite(late) and late >= 0), "max_tick_lateness_s", f"must be None or >= 0, got {late}")


def mujoco_joint_reader(env: Any) -> Callable[[], np.ndarray] | None:
    """``() -> [J]`` positions of the env's ``joint_names`` in env 0, for MuJoCo tasks (``env.backend`` with a
    ``model`` and ``qpos``); None when the env has no such joints."""
    names, backend = getattr(env, "joint_names", None), getattr(env, "backend", None)
    model = getattr(backend, "model", None)
    qpos = getattr(backend, "qpos", None)
    if not names or model is None or qpos is None:
        return None
    try:
        adr = [int(model.jnt_qposadr[model.joint(name).id]) for name in names]
    except KeyError:
        return None
    return lambda: backend.qpos[0, adr].detach().cpu().numpy().astype(np.float64)  # type: ignore[union-attr]


class _Schedule:
    """Tick deadlines on a monotonic clock: sleep until each, count the ones a late caller missed."""

    def __init__(self, period: float, tolerance: float, clock: Callable[[], float], sleep: Callable[[float], None]):
        self.period, self.tolerance, self.clock, self.sleep = period, tolerance, clock, sleep
        self.deadline: float | None = None
        self.ticks = self.missed = 0
        self.lateness_sum = self.lateness_max = 0.0
        self.on_time = 0
        self._late = False

    def begin(self) -> None:
        """At a ``step()`` call: a caller past its deadline misses it (and every one after), re-anchored at now."""
        now, deadline = self.clock(), self.deadline
        self._late = False
        if deadline is None:
            self.deadline = now + self.period
        elif now > deadline + self.tolerance:
            self.missed += int((now - deadline) // self.period) + 1
            self.deadline = now + self.period
            self._late = True

    def end(self) -> None:
        """Sleep until the deadline, record how late the tick came, and set the next deadline."""
        deadline = self.deadline if self.deadline is not None else self.clock()
        remaining = deadline - self.clock()
        if remaining > 0:
            self.sleep(remaining)
        lateness = max(self.clock() - deadline, 0.0)
        self.ticks += 1
        if not self._late:
            self.on_time += 1
            self.lateness_sum += lateness
            self.lateness_max = max(self.lateness_max, lateness)
        self.deadline = deadline + self.period

    def pause(self, seconds: float) -> None:
        """Spend ``seconds`` (a reset); the schedule restarts after it."""
        end = self.clock() + seconds
        while (remaining := end - self.clock()) > 0:
            self.sleep(remaining)
        self.deadline = self.clock() + self.period


class RealTimeRobot:
    """A one-env VecEnv paced in wall-clock time, with latency and costly resets (see the module docstring).

    Keeps the VecEnv interface (``num_envs``, ``num_actions``, ``device``, ``cfg`` (the env's), ``max_episode_length``,
    ``episode_length_buf``, ``get_observations``, ``step``); other attributes (``action_space``,
    ``observation_space``, ``joint_names``, ``request_final_obs``, ...) are the env's.

    Args:
        env: a VecEnv with ``num_envs == 1``.
        cfg: pacing, latency and resets (default :class:`RealTimeCfg`).
        clock, sleep: a monotonic clock and its sleep (tests inject a fake pair).
        joint_positions: ``() -> [J]`` joint positions (rad) for the duration of scripted moves; default
            :func:`mujoco_joint_reader`.
    """

    def __init__(
        self,
        env: Any,
        cfg: RealTimeCfg | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        joint_positions: Callable[[], np.ndarray] | None = None,
    ) -> None:
        cfg = cfg or RealTimeCfg()
        validate(cfg, "realtime")
        if env.num_envs != 1:
            raise ValueError(f"RealTimeRobot paces one robot: the env has num_envs={env.num_envs}; build it with 1.")
        period = 1.0 / cfg.control_hz if cfg.control_hz else control_period(env)
        if period is None:
            raise ValueError(f"{type(env).__name__} does not say its control period: set --actor.robot.control_hz.")
        self.env, self.realtime_cfg, self.period_s = env, cfg, period
        self.obs_delay_ticks = math.ceil(cfg.obs_latency_s / period - 1e-9)
        self.action_delay_ticks = math.ceil(cfg.action_latency_s / period - 1e-9)
        tolerance = 0.1 * period if cfg.max_tick_lateness_s is None else cfg.max_tick_lateness_s
        self._schedule = _Schedule(period, tolerance, clock, sleep)
        self._joints = joint_positions or mujoco_joint_reader(env)
        if self._joints is None and cfg.reset == "home":
            log.warning("Cannot read the joints of %s: home resets take min_reset_s.", type(env).__name__)
        self.reset_time_s = 0.0
        self.resets = 0
        self._begin_episode(env.get_observations())

    # ----------------------------------------------------------------- VecEnv interface
    @property
    def num_envs(self) -> int:
        return 1

    @property
    def num_actions(self) -> int:
        return int(self.env.num_actions)

    @property
    def device(self) -> Any:
        return self.env.device

    @property
    def cfg(self) -> Any:
        return self.env.cfg

    @property
    def max_episode_length(self) -> Any:
        return self.env.max_episode_length

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.env.episode_length_buf

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (during __init__): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def missed_ticks(self) -> int:
        """Ticks a late caller missed."""
        return self._schedule.missed

    def get_observations(self) -> TensorDict:
        """The observations the last ``step()`` returned (``obs_latency_s`` old)."""
        return self._obs_fifo[0]

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Command ``actions [1, A]`` and return at the next tick (after a reset's time, if the episode ended)."""
        self._schedule.begin()
        applied = self._delayed_action(actions)
        q_end = self._joints() if self._joints is not None and self.realtime_cfg.reset == "home" else None
        obs, rewards, dones, extras = self.env.step(applied)
        self._schedule.end()
        extras = dict(extras)
        if not bool(dones.reshape(-1)[0]):
            self._obs_fifo.append(obs.clone())
            return self._obs_fifo[0], rewards, dones, extras
        if "final_obs" in extras:  # the final observation, as old as every other
            self._obs_fifo.append(extras["final_obs"].clone())
            extras["final_obs"] = self._obs_fifo[0]
        extras["reset_s"] = self._spend(self._reset_seconds(q_end))
        self._begin_episode(obs)
        return self._obs_fifo[0], rewards, dones, extras

    # ----------------------------------------------------------------- return-and-explore
    def capture_state(self) -> StartState:
        """The env's exact state now (``env.env_state(0)``), for :class:`StartStates`."""
        return self._state_method("env_state")(0)

    def start_from(self, state: StartState) -> TensorDict:
        """Begin the current episode at ``state`` instead (call it at an episode start: after construction or a step
        that returned done), after the time a scripted move to its joint pose takes (``wait``: ``reset_wait_s``).

        Returns the new observations.
        """
        if int(self.env.episode_length_buf.reshape(-1)[0]) != 0:
            raise RuntimeError("start_from begins an episode: call it right after a step that returned done.")
        q_from = self._joints() if self._joints is not None else None
        obs = self._state_method("start_episode_from")(0, state)
        self._spend(self._move_seconds(q_from))
        self._begin_episode(obs)
        return self._obs_fifo[0]

    def _state_method(self, name: str) -> Callable[..., Any]:
        method = getattr(self.env, name, None)
        if method is None:
            raise NotImplementedError(
                f"{type(self.env).__name__} has no {name}(): return-and-explore needs a task with exact state "
                "(rslkit's TorchTask); on a real robot, move the arm to the recorded joint pose instead."
            )
        return method

    # ----------------------------------------------------------------- statistics
    def stats(self) -> dict[str, float]:
        """``ticks``, ``missed_ticks``, ``reset_time_s`` (total), ``resets``, ``mean_lateness_s`` and
        ``max_lateness_s`` (how late ``step()`` returned after its tick, over ticks not missed)."""
        s = self._schedule
        return {
            "ticks": float(s.ticks),
            "missed_ticks": float(s.missed),
            "reset_time_s": self.reset_time_s,
            "resets": float(self.resets),
            "mean_lateness_s": s.lateness_sum / max(s.on_time, 1),
            "max_lateness_s": s.lateness_max,
        }

    # ----------------------------------------------------------------- helpers
    def _begin_episode(self, obs: TensorDict) -> None:
        first = obs.clone()
        self._obs_fifo: deque[TensorDict] = deque([first] * (self.obs_delay_ticks + 1), maxlen=self.obs_delay_ticks + 1)
        self._action_fifo: deque[torch.Tensor] = deque()

    def _delayed_action(self, actions: torch.Tensor) -> torch.Tensor:
        self._action_fifo.append(actions.detach().clone())
        if len(self._action_fifo) > self.action_delay_ticks:
            return self._action_fifo.popleft()
        return self._action_fifo[0]  # the episode's first command, until it has come through

    def _reset_seconds(self, q_end: np.ndarray | None) -> float:
        if self.realtime_cfg.reset == "wait":
            return self.realtime_cfg.reset_wait_s
        return max(self._move_seconds(q_end), self.realtime_cfg.min_reset_s)

    def _move_seconds(self, q_from: np.ndarray | None) -> float:
        """A scripted move from ``q_from`` to the env's joints now (``wait`` mode: ``reset_wait_s``)."""
        cfg = self.realtime_cfg
        if cfg.reset == "wait":
            return cfg.reset_wait_s
        if q_from is None or self._joints is None:
            return max(cfg.settle_s, cfg.min_reset_s)
        return float(np.abs(self._joints() - q_from).max(initial=0.0)) / cfg.home_speed + cfg.settle_s

    def _spend(self, seconds: float) -> float:
        self._schedule.pause(seconds)
        self.reset_time_s += seconds
        self.resets += 1
        return seconds


class StartStates:
    """A pool of recorded start states for return-and-explore: episodes begin in one with ``probability``.

    Fill it with the states of demonstrations and of successful episodes (``robot.capture_state()`` at each step,
    :meth:`add_episode` when the episode succeeded); at each episode start, ``state = pool.sample()`` and, unless
    None, ``robot.start_from(state)``. The oldest states are dropped beyond ``capacity``.
    """

    def __init__(self, probability: float = 0.5, capacity: int = 10_000, seed: int = 0) -> None:
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {probability}.")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}.")
        self.probability = probability
        self._states: deque[StartState] = deque(maxlen=capacity)
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self._states)

    def add(self, state: Mapping[str, torch.Tensor]) -> None:
        """Keep one state (a copy)."""
        self._states.append({k: v.detach().cpu().clone() for k, v in state.items()})

    def add_episode(self, states: Sequence[Mapping[str, torch.Tensor]], stride: int = 1, skip_last: int = 1) -> None:
        """Keep every ``stride``-th state of an episode, except its last ``skip_last`` (already at the goal)."""
        if stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}.")
        for state in list(states)[: max(len(states) - skip_last, 0) : stride]:
            self.add(state)

    def sample(self) -> StartState | None:
        """A uniformly drawn state with ``probability`` (seeded), else None (a normal reset); None when empty."""
        if not self._states or self._rng.random() >= self.probability:
            return None
        return self._states[self._rng.randrange(len(self._states))]
