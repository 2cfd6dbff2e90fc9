"""Settings of the policy controller: joints, observation layout, action mapping, limits and timing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rslkit.deploy.timeline import MERGE_MODES, MergeMode

ObservationTerm = Literal["joint_pos", "joint_pos_rel", "joint_pos_normalized", "joint_vel", "command", "last_action"]
OBSERVATION_TERMS: tuple[str, ...] = (
    "joint_pos",
    "joint_pos_rel",
    "joint_pos_normalized",
    "joint_vel",
    "command",
    "last_action",
)
Trigger = Literal["state", "timer"]


@dataclass
class ControllerCfg:
    """What the controller needs beyond the policy file.

    The policy's observation vector (its one float observation group; VLA policies also take camera images and an
    instruction, which the controller adds) is the concatenation of ``observation`` terms, each in ``joint_names``
    order: ``joint_pos`` (measured positions), ``joint_pos_rel`` (positions minus ``default_positions``),
    ``joint_pos_normalized`` (positions mapped to ``[-1, 1]`` by ``[position_lower, position_upper]``, as rslkit's
    SO-101 tasks observe them), ``joint_vel``, ``command`` (the latest command input, ``command_dim`` values) and
    ``last_action`` (the previous raw policy action). The joint target of action ``a [J]`` is
    ``default_positions + action_scale * a``.
    """

    joint_names: list[str]
    """Joints in the policy's action order (action ``i`` drives ``joint_names[i]``)."""
    rate_hz: float
    """Control rate (the policy's ``control_rate_hz`` unless overridden)."""
    observation: list[str] = field(default_factory=lambda: ["joint_pos_rel", "joint_vel", "last_action"])
    default_positions: list[float] | None = None
    """Joint offsets of ``joint_pos_rel`` and of the action mapping (None: zeros)."""
    action_scale: list[float] | float = 1.0
    position_lower: list[float] | None = None
    """Lower joint limits in ``joint_names`` order (None: unlimited)."""
    position_upper: list[float] | None = None
    max_velocity: list[float] | float | None = None
    """Largest commanded joint speed (rad/s or m/s): a command moves at most ``max_velocity / rate_hz`` per tick."""
    state_timeout_s: float = 0.1
    """Hold when the newest joint state is older than this (watchdog)."""
    command_dim: int = 0
    """Size of the ``command`` observation term (0: the policy takes no command)."""
    command_timeout_s: float = 0.0
    """A command older than this falls back to zeros (0: commands never expire)."""
    trigger: Trigger = "state"
    """``state``: a tick runs when a joint state arrives (phase-locked to ``rate_hz``, lowest latency);
    ``timer``: a tick runs on a fixed-rate timer with the newest state."""
    chunk_merge: MergeMode = "replace"
    """How a new action chunk merges into the plan (chunk policies; see ``ActionTimeline``)."""
    chunk_initial_latency_s: float = 0.02
    """Inference latency assumed for chunk scheduling until measured."""
    chunk_in_flight: int = 1
    """Chunk inference requests computed at once, each on its own worker thread (``AsyncEngineCfg.max_in_flight``):
    more than 1 reacts sooner when the policy's compute leaves room for parallel requests."""
    chunk_worker_rt_priority: int | None = None
    """``SCHED_FIFO`` priority of the chunk inference worker threads (None: inherited from the process). Run the node
    under a higher one (``chrt -f 50 ...``) so that the workers stay below the control loop."""
    future_state_mode: Literal["absolute", "delta"] = "absolute"
    """Chunk policies with a ``future_state`` input (VLASH offsets): the state when the chunk starts is the last
    pending action (``absolute`` targets) or the state plus their sum (``delta``)."""
    image_timeout_s: float = 0.5
    """Policies with camera inputs: hold when a camera's newest valid image is older than this."""
    instruction: str = ""
    """Policies with an instruction input: the instruction to follow, one of those stored at export (empty: wait
    for one on the instruction topic, holding)."""

    def validate(self) -> None:
        """Check sizes and ranges.

        Raises:
            ValueError: naming the setting to fix by its node parameter (``--ros-args -p name:=value``).
        """
        n = len(self.joint_names)
        if n == 0:
            raise ValueError("joint_names is empty; list the joints in the policy's action order.")
        if len(set(self.joint_names)) != n:
            raise ValueError(f"joint_names has duplicates: {self.joint_names}.")
        if self.rate_hz <= 0:
            raise ValueError(f"The control rate must be > 0 (the control_rate_hz parameter), got {self.rate_hz}.")
        if self.state_timeout_s <= 0:
            raise ValueError(f"state_timeout_s must be > 0, got {self.state_timeout_s}.")
        if self.image_timeout_s <= 0:
            raise ValueError(f"image_timeout_s must be > 0, got {self.image_timeout_s}.")
        if self.command_dim < 0:
            raise ValueError(f"command_dim must be >= 0, got {self.command_dim}.")
        if self.command_timeout_s < 0:
            raise ValueError(
                f"command_timeout_s must be >= 0 (0: commands never expire), got {self.command_timeout_s}."
            )
        unknown = [t for t in self.observation if t not in OBSERVATION_TERMS]
        if unknown or not self.observation:
            raise ValueError(
                f"Unknown or no observation terms {unknown} in the observation parameter; use some of "
                f"{list(OBSERVATION_TERMS)}."
            )
        if "joint_pos_normalized" in self.observation and (self.position_lower is None or self.position_upper is None):
            raise ValueError(
                "The observation has a 'joint_pos_normalized' term, which maps positions to [-1, 1] by the joint "
                "ranges: set position_lower and position_upper (the ranges the policy was trained with)."
            )
        if "command" in self.observation and self.command_dim == 0:
            raise ValueError(
                "The observation has a 'command' term but no command input: set the command_type parameter ('twist' "
                "for [vx, vy, wz], or 'array' with command_dim)."
            )
        if self.trigger not in ("state", "timer"):
            raise ValueError(f"trigger must be 'state' or 'timer', got '{self.trigger}'.")
        if self.future_state_mode not in ("absolute", "delta"):
            raise ValueError(f"future_state_mode must be 'absolute' or 'delta', got '{self.future_state_mode}'.")
        if self.chunk_in_flight < 1:
            raise ValueError(f"chunk_in_flight must be >= 1, got {self.chunk_in_flight}.")
        if self.chunk_worker_rt_priority is not None and not 1 <= self.chunk_worker_rt_priority <= 99:
            raise ValueError(
                f"chunk_worker_rt_priority must be 1-99 (0: inherit the process's scheduling), got "
                f"{self.chunk_worker_rt_priority}."
            )
        if self.chunk_merge not in MERGE_MODES:
            raise ValueError(f"chunk_merge must be one of {', '.join(MERGE_MODES)}, got '{self.chunk_merge}'.")
        for name in ("default_positions", "position_lower", "position_upper"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} has {len(value)} values for {n} joints ({self.joint_names}).")
        for name in ("action_scale", "max_velocity"):
            value = getattr(self, name)
            if isinstance(value, list) and len(value) != n:
                raise ValueError(f"{name} has {len(value)} values for {n} joints; give one value or {n}.")
        if self.position_lower is not None and self.position_upper is not None:
            bad = [j for j, lo, hi in zip(self.joint_names, self.position_lower, self.position_upper) if lo > hi]
            if bad:
                raise ValueError(f"position_lower > position_upper for joints {bad}.")
            flat = [j for j, lo, hi in zip(self.joint_names, self.position_lower, self.position_upper) if lo == hi]
            if flat and "joint_pos_normalized" in self.observation:
                raise ValueError(f"joint_pos_normalized needs position_lower < position_upper; equal for {flat}.")
        mv = self.max_velocity
        if mv is not None and min(mv if isinstance(mv, list) else [mv]) <= 0:
            raise ValueError(f"max_velocity must be > 0 (or unset for no rate limit), got {mv}.")
