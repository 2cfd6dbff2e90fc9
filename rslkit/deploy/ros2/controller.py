"""The transport-agnostic control loop: joint states and commands in, safe joint commands out.

Events come from any transport (the rclpy node, a replayed MCAP file, a test) with their time on a monotonic
clock in seconds. Per tick: check faults (latched policy failure, a bad or missing joint, a stale state; for VLA
policies also a missing, stale or wrong-sized camera image and a missing instruction), build the observation,
run the policy (step and recurrent policies directly, chunk policies through the asynchronous chunk engine), map
the action to joint targets, rate-limit and clamp. On any fault the output holds the last
command (or, before the first command, the measured position) and the reason is logged once per fault.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from rslkit.deploy.async_engine import AsyncChunkEngine, AsyncEngineCfg, Inference
from rslkit.deploy.clock import Clock, MonotonicClock
from rslkit.deploy.future_state import FutureStateConditioner
from rslkit.deploy.inference_worker import ChunkFn, ThreadedInference
from rslkit.deploy.metadata import PolicyMetadata
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.joint_map import JointReorder
from rslkit.deploy.ros2.limits import CommandLimiter
from rslkit.deploy.ros2.observation import ObservationBuilder
from rslkit.deploy.ros2.tick_gate import TickGate
from rslkit.deploy.ros2.vla_inputs import VLAInputs
from rslkit.deploy.ros2.watchdog import Watchdog

Status = Literal["run", "hold", "startup"]
TickSource = Literal["state", "timer", "shutdown"]
InferenceFactory = Callable[[ChunkFn, Clock], Inference]


class Log(Protocol):
    """``logging.Logger`` or an rclpy node's logger."""

    def info(self, msg: str) -> Any: ...

    def warning(self, msg: str) -> Any: ...


class TickObserver(Protocol):
    """Watches the loop from the control thread (the actor mode records transitions with it); must return at once."""

    def before_policy(self, now: float, obs: np.ndarray) -> None:
        """A tick built observation ``obs [D]`` and is about to run the policy (a policy swap may happen here)."""

    def after_output(self, out: ControlOutput) -> None:
        """Every command the controller returns, runs and holds alike."""


@dataclass
class ControlOutput:
    """One joint command: ``positions [J]`` in ``joint_names`` order."""

    positions: np.ndarray
    status: Status
    """``run``: from the policy; ``hold``: holding because of ``reason``; ``startup``: holding until the first
    action chunk arrives."""
    reason: str
    tick: int
    """Control tick index (watchdog holds between ticks repeat the last index)."""
    source: TickSource
    """What produced it: a joint state, the timer, or the shutdown."""


class _EngineRobot:
    """The chunk engine's view of the controller: the current observation in, the planned action out."""

    def __init__(self) -> None:
        self.obs: Any = None
        self.action: np.ndarray | None = None

    def observe(self) -> Any:
        return self.obs

    def act(self, action: np.ndarray) -> None:
        self.action = action


SWAP_FIELDS = (
    "kind",
    "obs_groups",
    "obs_dtypes",
    "action_dim",
    "input_names",
    "output_names",
    "state_shapes",
    "chunk_length",
    "noise_shape",
    "future_state_slice",
    "max_future_offset",
)
"""What a swapped-in policy must share with the running one (the loop's observation, action and chunk layout)."""


def policy_mismatch(running: PolicyMetadata, new: PolicyMetadata) -> str | None:
    """Why a policy with metadata ``new`` cannot replace one with ``running`` (None: it can)."""
    fields = [k for k in SWAP_FIELDS if getattr(new, k) != getattr(running, k)]
    diff = [f"{k} {getattr(new, k)!r} instead of {getattr(running, k)!r}" for k in fields]
    return "it has " + ", ".join(diff) if diff else None


class PolicyController:
    """Runs an :class:`~rslkit.deploy.onnx_policy.OnnxPolicy` on joint states with limits and a watchdog.

    Args:
        policy: the exported policy (``step``, ``recurrent`` or ``chunk``; one float observation group, and for VLA
            policies uint8 camera groups and an instruction group, fed from :meth:`on_image` / the instruction).
        cfg: joints, observation terms, action mapping, limits and timing.
        logger: where fault and recovery messages go (default: this module's logger).
        clock: the chunk engine's clock (latency timestamps).
        inference_factory: builds the chunk engine's inference (default: ``cfg.chunk_in_flight`` worker threads).
        observer: sees each observation before the policy and each output (None: nothing watches).

    Raises:
        ValueError: when the policy does not fit the settings (groups, action size, observation size), or
            ``cfg.instruction`` is not one the policy knows (or the policy reads no instruction).
    """

    def __init__(
        self,
        policy: OnnxPolicy,
        cfg: ControllerCfg,
        logger: Log | None = None,
        clock: Clock | None = None,
        inference_factory: InferenceFactory | None = None,
        observer: TickObserver | None = None,
    ) -> None:
        cfg.validate()
        meta = policy.meta
        extra = {*policy.camera_groups, *([policy.instruction_group] if policy.instruction_group else [])}
        state_groups = [g for g in meta.group_names if g not in extra]
        if len(state_groups) != 1:
            raise ValueError(
                f"The policy reads observation groups {list(meta.obs_groups)}; the controller feeds one float group "
                "(plus camera images and an instruction for VLA policies). Export a policy with a single actor "
                "observation group."
            )
        self.state_group = state_groups[0]
        self.obs_dim = int(np.prod(meta.obs_groups[self.state_group]))
        n = len(cfg.joint_names)
        if meta.action_dim != n:
            raise ValueError(
                f"The policy outputs {meta.action_dim} actions but joint_names lists {n} joints; list one joint "
                "per action, in the policy's order."
            )
        if cfg.instruction and policy.instruction_group is None:
            raise ValueError(
                f"The instruction parameter ('{cfg.instruction}') is for policies that read an instruction; this "
                "policy takes none: leave it empty."
            )
        self.policy, self.cfg, self.observer = policy, cfg, observer
        self.inputs = VLAInputs(policy, cfg.image_timeout_s, cfg.instruction) if extra else None
        """Camera images and the instruction of a VLA policy (None: the policy reads the joint state only)."""
        self.log: Log = logger or logging.getLogger(__name__)
        self.clock = clock or MonotonicClock()
        self.inference_factory: InferenceFactory = inference_factory or functools.partial(
            ThreadedInference, rt_priority=cfg.chunk_worker_rt_priority, workers=cfg.chunk_in_flight
        )
        self.builder = ObservationBuilder(cfg, self.obs_dim)
        self.reorder = JointReorder(cfg.joint_names)
        self.limiter = CommandLimiter(cfg)
        self.watchdog = Watchdog(cfg.state_timeout_s)
        self.gate = TickGate(cfg.rate_hz)
        self.default = np.asarray(cfg.default_positions if cfg.default_positions is not None else np.zeros(n))
        self.scale = np.broadcast_to(np.asarray(cfg.action_scale, np.float64), (n,))
        self.position: np.ndarray | None = None
        self.velocity: np.ndarray | None = None
        self.command = np.zeros(cfg.command_dim, np.float32)
        self.command_time: float | None = None
        self.last_action = np.zeros(n, np.float32)
        self.last_command: np.ndarray | None = None
        self.state_fault: str | None = None
        self.latched: str | None = None
        self.ticks = 0
        self.counts: Counter[str] = Counter()
        """Outputs per status, holds per fault source, ignored inputs."""
        self._hold_source: str | None = None
        self._last_arrival: float | None = None
        self._warned: set[str] = set()
        self._engine: AsyncChunkEngine | None = None
        self._inference: Inference | None = None
        self._robot = _EngineRobot()
        self._engine_tick = 0
        if self.is_chunk:
            self._start_engine()

    @property
    def is_chunk(self) -> bool:
        """Whether the policy returns action chunks (run through the asynchronous engine)."""
        return self.policy.kind == "chunk"

    @property
    def holding(self) -> bool:
        """Whether the last output was a fault hold."""
        return self._hold_source is not None

    # ------------------------------------------------------------------ inputs
    def on_image(self, now: float, camera: str, encoding: str, height: int, width: int, step: int, data: Any) -> None:
        """Take an image of ``camera`` (a ``sensor_msgs/Image``'s fields) received at ``now``; a wrong size or
        encoding holds the robot until a valid image arrives (see :class:`~rslkit.deploy.ros2.vla_inputs.VLAInputs`).

        Raises:
            ValueError: when the policy reads no camera ``camera``.
        """
        self._camera_inputs(camera).on_image(now, camera, encoding, height, width, step, data)

    def on_compressed_image(self, now: float, camera: str, data: Any) -> None:
        """Take a ``sensor_msgs/CompressedImage``'s ``data`` (JPEG or PNG) of ``camera`` received at ``now``; one
        that does not decode or has the wrong size holds the robot until a valid image arrives.

        Raises:
            ValueError: when the policy reads no camera ``camera``.
        """
        self._camera_inputs(camera).on_compressed_image(now, camera, data)

    def _camera_inputs(self, camera: str) -> VLAInputs:
        """The VLA inputs, when the policy reads camera ``camera`` (else a ValueError naming its cameras)."""
        if self.inputs is None or camera not in self.inputs.cameras:
            cameras = self.inputs.cameras if self.inputs is not None else []
            raise ValueError(f"The policy reads no camera '{camera}'; its cameras are {cameras}.")
        return self.inputs

    def on_instruction(self, now: float, text: str) -> bool:
        """Follow instruction ``text`` from the next inference on (planned actions still execute). An unknown one
        is ignored (logged with the known ones, counted); returns whether it was taken."""
        if self.inputs is None or not self.inputs.takes_instruction:
            self._warn_once("instruction-none", "Ignoring an instruction: the policy takes none.")
            self.counts["ignored_instructions"] += 1
            return False
        try:
            self.inputs.set_instruction(text)
        except ValueError as err:
            self.log.warning(f"Ignoring the instruction: {err}")
            self.counts["ignored_instructions"] += 1
            return False
        self.log.info(f"Instruction: {text!r}.")
        return True

    def on_joint_state(
        self,
        now: float,
        names: Sequence[str],
        position: Sequence[float],
        velocity: Sequence[float] = (),
        stamp: float | None = None,
    ) -> ControlOutput | None:
        """Take a joint state received at ``now`` (seconds, monotonic); with ``trigger="state"`` it may run a tick.

        Args:
            stamp: the state's sample time in seconds (its header stamp) for the tick schedule; None or 0: ``now``.
                Staleness is always judged by arrival time.

        Returns:
            The command to send, when this state started a tick.
        """
        self._last_arrival = now
        self.state_fault = self._read_state(now, names, position, velocity)
        if self.cfg.trigger == "state" and self.gate.ready(stamp or now):
            return self.tick(now, "state")
        return None

    def on_command(self, now: float, values: Sequence[float]) -> None:
        """Take a command input (e.g. a velocity command ``[vx, vy, wz]``); malformed ones are ignored and logged."""
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (self.cfg.command_dim,):
            self._warn_once(
                "command-size", f"Ignoring a command with {arr.size} values; command_dim is {self.cfg.command_dim}."
            )
            self.counts["ignored_commands"] += 1
            return
        if not np.isfinite(arr).all():
            self._warn_once("command-nan", "Ignoring a command with non-finite values.")
            self.counts["ignored_commands"] += 1
            return
        self.command, self.command_time = arr.astype(np.float32), now

    def on_timer(self, now: float) -> ControlOutput | None:
        """The fixed-rate timer fired: a tick (``trigger="timer"``), or the watchdog check (``trigger="state"``).

        With ``trigger="state"`` the timer only speaks when no joint state at all arrived for ``state_timeout_s``
        (arriving states hold by themselves when they are invalid or the policy failed).
        """
        if self._last_arrival is None:
            return None  # nothing received: nothing to hold yet, no tick counted
        if self.cfg.trigger == "timer":
            return self.tick(now, "timer")
        if now - self._last_arrival <= self.cfg.state_timeout_s:
            return None
        stale = self.watchdog.fault(now) or "joint state is stale"
        return self._hold(self.latched or stale, "latched" if self.latched else "watchdog", "timer")

    def shutdown(self, now: float) -> ControlOutput | None:
        """Stop for good: close the chunk engine and return the final hold command (None: nothing to hold)."""
        self.latched = self.latched or "node shutting down"
        self._stop_engine()
        return self._hold(self.latched, "latched", "shutdown")

    # ------------------------------------------------------------------ tick
    def tick(self, now: float, source: TickSource = "timer") -> ControlOutput | None:
        """One control tick at ``now``: the policy's safe command, or a hold with its reason."""
        self.ticks += 1
        if self.latched:
            return self._hold(self.latched, "latched", source)
        if self.state_fault:
            return self._hold(self.state_fault, "state", source)
        stale = self.watchdog.fault(now)
        if stale:
            return self._hold(stale, "watchdog", source)
        missing = self.inputs.fault(now) if self.inputs is not None else None
        if missing is not None:
            return self._hold(missing[1], missing[0], source)
        assert self.position is not None
        resuming = self._hold_source is not None
        if resuming:
            self.log.info(f"Joint state valid again; resuming the policy at tick {self.ticks - 1}.")
            self._hold_source = None
        obs = self.builder(self.position, self.velocity, self._current_command(now), self.last_action)
        if self.observer is not None:
            self.observer.before_policy(now, obs)
        policy_obs: Any = obs if self.inputs is None else {self.state_group: obs, **self.inputs.groups()}
        try:
            if resuming and self.is_chunk:  # the old plan was made for a state that no longer holds
                self._stop_engine()
                self._start_engine()
            elif resuming:
                self.policy.reset()  # a recurrent policy's memory does not span the gap
            action = (
                self._chunk_action(policy_obs) if self.is_chunk else np.asarray(self.policy(policy_obs), np.float32)
            )
        except (RuntimeError, ValueError) as err:  # inference failed, or a delay beyond the trained offsets
            return self._latch(f"policy failed: {err}", source)
        if action is None:
            return self._output(self._hold_target(), "startup", "waiting for the first action chunk", source)
        bad = ~np.isfinite(action)
        if bad.any():
            joints = [j for j, b in zip(self.cfg.joint_names, bad) if b]
            return self._latch(f"policy returned non-finite actions for joints {joints}", source)
        target = self.default + self.scale * action.astype(np.float64)
        previous = self.last_command if self.last_command is not None else self.position
        command = self.limiter(target, previous)
        self.last_action, self.last_command = action, command
        return self._output(command, "run", "", source)

    def set_policy(self, policy: OnnxPolicy) -> None:
        """Run ``policy`` from the next inference on (call between ticks, on the control thread).

        Step and recurrent policies switch at once (a recurrent one starts from zero state); chunk policies compute
        their next chunk with it, while the actions already planned still execute.

        Raises:
            ValueError: when ``policy`` does not take and give what the running one does (kind, observation groups,
                action size, chunk and future-state layout).
        """
        mismatch = policy_mismatch(self.policy.meta, policy.meta)
        if mismatch:
            raise ValueError(f"Cannot swap in this policy: {mismatch}.")
        if self.inputs is not None and self.inputs.instruction is not None:
            policy.instruction_embedding(self.inputs.instruction)  # the new policy must know the current one
        self.policy = policy
        if self.inputs is not None:
            self.inputs.policy = policy

    # ------------------------------------------------------------------ pieces
    def _read_state(
        self, now: float, names: Sequence[str], position: Sequence[float], velocity: Sequence[float]
    ) -> str | None:
        if len(position) != len(names):
            return f"joint state has {len(names)} names but {len(position)} positions"
        index = self.reorder.index(names)
        if isinstance(index, list):
            return f"joint state is missing joints {index}"
        pos = self.reorder.take(index, position)
        vel = None
        if self.builder.needs_velocity:
            if len(velocity) != len(names):
                return f"joint state has {len(velocity)} velocities for {len(names)} joints (observation needs them)"
            vel = self.reorder.take(index, velocity)
        for what, values in (("positions", pos), ("velocities", vel)):
            if values is not None and not np.isfinite(values).all():
                joints = [j for j, ok in zip(self.cfg.joint_names, np.isfinite(values)) if not ok]
                return f"joint state has non-finite {what} for joints {joints}"
        self.position, self.velocity = pos, vel
        self.watchdog.feed(now)
        return None

    def _current_command(self, now: float) -> np.ndarray:
        timeout = self.cfg.command_timeout_s
        if timeout > 0 and self.command_time is not None and now - self.command_time > timeout:
            self.log.warning(f"No command for {now - self.command_time:.3f} s (timeout {timeout} s); using zeros.")
            self.command, self.command_time = np.zeros_like(self.command), None
        return self.command

    def _hold_target(self) -> np.ndarray | None:
        if self.last_command is None and self.position is not None:
            self.last_command = self.limiter.clamp(self.position.copy())
        return self.last_command

    def _hold(self, reason: str, fault_source: str, source: TickSource) -> ControlOutput | None:
        if self._hold_source != fault_source:
            self.log.warning(f"Holding position: {reason}.")
            self._hold_source = fault_source
        self.counts[f"hold:{fault_source}"] += 1
        return self._output(self._hold_target(), "hold", reason, source)

    def _latch(self, reason: str, source: TickSource) -> ControlOutput | None:
        self.latched = f"{reason} (latched until restart)"
        self._stop_engine()
        return self._hold(self.latched, "latched", source)

    def _output(
        self, positions: np.ndarray | None, status: Status, reason: str, source: TickSource
    ) -> ControlOutput | None:
        if positions is None:
            self._warn_once("nothing", "No joint state yet: nothing to command or hold.")
            return None
        self.counts[status] += 1
        out = ControlOutput(positions.copy(), status, reason, max(0, self.ticks - 1), source)
        if self.observer is not None:
            self.observer.after_output(out)
        return out

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning(message)

    # ------------------------------------------------------------------ chunk engine
    def _chunk_fn(self, obs: Any) -> np.ndarray:
        """``obs [D]`` (a VLA policy's ``{group: input}``, or a ``ConditionedObservation``) -> chunk ``[Ta, A]`` on
        the inference thread."""
        return np.asarray(self.policy(obs))

    def _start_engine(self) -> None:
        engine_cfg = AsyncEngineCfg(
            rate_hz=self.cfg.rate_hz,
            merge=self.cfg.chunk_merge,
            chunk_start="delay",
            initial_latency_s=self.cfg.chunk_initial_latency_s,
            starvation="hold",
            max_in_flight=self.cfg.chunk_in_flight,
        )
        conditioner = None
        if self.policy.meta.future_state_slice is not None:  # trained with VLASH offsets: feed the future state
            group = self.state_group if self.inputs is not None else None  # VLA: {group: input} observations
            conditioner = FutureStateConditioner.for_policy(self.policy.meta, self.cfg.future_state_mode, group)
        self._inference = self.inference_factory(self._chunk_fn, self.clock)
        validate = (lambda obs: self.policy.check_inputs(obs)) if self.inputs is not None else None
        self._engine = AsyncChunkEngine(
            self._robot, self._inference, self.clock, engine_cfg, conditioner, validate=validate
        )
        self._engine_tick = 0

    def _stop_engine(self) -> None:
        close = getattr(self._inference, "close", None)
        if close is not None:
            close()
        self._engine, self._inference = None, None

    def _chunk_action(self, obs: Any) -> np.ndarray | None:
        assert self._engine is not None
        self._robot.obs, self._robot.action = obs, None
        action = self._engine.step(self._engine_tick)
        self._engine_tick += 1
        return None if action is None else np.asarray(action, np.float32)

    @property
    def engine(self) -> AsyncChunkEngine | None:
        """The chunk engine (chunk policies; None after a latched fault or shutdown)."""
        return self._engine
