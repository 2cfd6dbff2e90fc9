"""SO-101 arm grasping a cube on the floor and lifting it, simulated by a batched MuJoCo backend."""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.camera_cfg import CameraTaskCfg
from rslkit.envs.columns import Columns
from rslkit.envs.expert import GoalDistance, Observation
from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.tasks.so101_arm import ARM_JOINTS, GRIPPER, SO101ArmTask, import_mujoco
from rslkit.envs.tasks.so101_lift_expert import SO101LiftExpert

CAMERAS = ("front", "wrist", "table")
"""Cameras ``--env.cameras`` may name (``rslkit.envs.mujoco.models.add_so101_cameras``)."""
CUBE_HALF_SIZE = 0.02
"""Half edge of the pick scene's cube (metres): resting on the floor its centre is this high."""


@dataclass
class SO101LiftCfg(CameraTaskCfg):
    """Control, cube placement and reward weights of ``so101-lift``."""

    available_cameras = CAMERAS

    episode_length: int = 100
    """Control steps per episode (2 s at the default 50 Hz)."""
    sim: str = "mujoco"
    """Physics backend (``--env.sim``), see :func:`rslkit.envs.mujoco.factory.make_backend`."""
    sim_threads: int = 0
    """Threads stepping the simulations (0: all CPU cores)."""
    decimation: int = 10
    """Physics substeps of 2 ms per control step (10: 50 Hz control)."""
    gripper_open: float = 1.0
    """Gripper joint target (rad) when the gripper action is > 0 (fingertip pads ~85 mm apart; the cube is 40 mm)."""
    gripper_closed: float = -0.17
    """Gripper joint target (rad) when the gripper action is <= 0: fully closed, so the servo squeezes the cube at
    its force limit (3.35 N m)."""
    cube_x: tuple[float, float] = (0.2, 0.28)
    """Range of the cube's initial x (metres in front of the base; the gripper hangs at x = 0.39 in the home pose)."""
    cube_y: tuple[float, float] = (-0.05, 0.05)
    cube_yaw: float = math.pi / 8
    """Initial yaw of the cube is uniform in ``[-cube_yaw, cube_yaw]`` (rad)."""
    init_noise: float = 0.05
    """Initial arm joint positions: mid-range (the home pose) +- this fraction of the half-range; gripper open."""
    lift_height: float = 0.05
    """Success: the cube's centre is this far (metres) above its resting height."""
    max_cube_travel: float = 0.25
    """The episode terminates when the cube is pushed this far (metres, horizontally) from where it started."""
    reach_weight: float = 1.0
    """``+w * (1 - tanh(d / reach_scale))``, ``d``: cube centre to the midpoint of the fingertip pads."""
    reach_scale: float = 0.05
    grasp_weight: float = 2.0
    """``+w`` per step in which the cube is held: the gripper is commanded closed, both jaws touch the cube and its
    centre is within ``grasp_radius`` of the midpoint of the fingertip pads. Each condition closed an exploit that a
    policy found: contact alone (a cube pressed by the outside of closed jaws), contact near the pads with the
    gripper wide open (a cube wedged and tilted between open jaws)."""
    grasp_radius: float = 0.02
    """Metres; a cube held between the pads sits ~3 mm from their midpoint, one pressed by closed jaws ~45 mm."""
    open_weight: float = 0.25
    """``+w`` per step in which the gripper is commanded open while the cube is farther than ``2 * grasp_radius``
    from the pads: approach with open jaws, close at the cube."""
    lift_weight: float = 10.0
    """``+w * clip((height - lift_min) / (lift_height - lift_min), 0, 1)`` while the cube is grasped, ``height``: of
    the cube above its resting height. Only a held cube counts: an ungated term taught a first policy to tip the cube
    onto an edge (+8 mm), and a floor of 15 mm instead (``lift_min``) left policies that held the cube with no signal
    towards lifting it."""
    lift_min: float = 0.0
    """Heights below this earn no lift reward (metres)."""
    success_weight: float = 10.0
    """``+w`` per step in which the cube is at least ``lift_height`` up (the sparse success signal)."""
    action_rate_weight: float = 0.01
    """``-w * |a_t - a_{t-1}|^2``."""
    joint_vel_weight: float = 0.0005
    """``-w * |qd_arm|^2`` (rad/s)."""


class SO101LiftTask(SO101ArmTask):
    """Grasp the cube in front of the SO-101 and lift it by ``lift_height``.

    Actions ``[N, 6]`` in ``[-1, 1]`` (clipped): the first five set absolute position targets of the arm joints
    (0 = mid-range, the home pose; +-1 = the ends of each joint's control range), the sixth opens (> 0) or closes
    (<= 0) the gripper. Position servos (kp 17.8, force limit 3.35 N m) track the targets.

    Observation group ``policy`` ``[N, 33]``: joint positions normalized to ``[-1, 1]`` by their ranges (6),
    joint velocities / 10 (6), midpoint of the fingertip pads (3), cube position (3), cube - pad midpoint (3),
    cube orientation quaternion (4), jaw-cube contact flags (2), last action (6). With ``cfg.cameras``: a group
    ``camera_<name>`` ``[N, H, W, 3]`` uint8 per camera.

    Reward terms (logged per term as ``Episode_Reward/<name>``): ``reach``, ``grasp``, ``open``, ``lift``,
    ``success``, ``action_rate``, ``joint_vel``. ``extras["success"]``: the cube is ``lift_height`` above its
    resting height (read where ``dones``). Episodes terminate when the cube is pushed away (``max_cube_travel``),
    else time out.
    Renders with :meth:`render_frame` (see :mod:`rslkit.envs.mujoco.render`).
    """

    cfg: SO101LiftCfg

    def __init__(self, cfg: SO101LiftCfg, device: str | torch.device = "cpu") -> None:
        if cfg.grasp_radius <= 0.0:
            raise ValueError(f"grasp_radius must be > 0 (metres), got {cfg.grasp_radius}.")
        if not 0.0 <= cfg.lift_min < cfg.lift_height:
            raise ValueError(f"Need 0 <= lift_min < lift_height (metres), got {cfg.lift_min} and {cfg.lift_height}.")
        if not (cfg.cube_x[0] <= cfg.cube_x[1] and cfg.cube_y[0] <= cfg.cube_y[1]):
            raise ValueError(f"cube_x and cube_y must be (low, high) ranges, got {cfg.cube_x} and {cfg.cube_y}.")
        mujoco = import_mujoco("so101-lift")
        from rslkit.envs.mujoco import models

        super().__init__(cfg, num_actions=len(ARM_JOINTS) + 1, device=device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,), np.float32)
        model = models.load_so101_lift()
        self._build_arm(model, (*ARM_JOINTS, GRIPPER), cfg.sim, cfg.sim_threads, cfg.decimation)

        def obj(kind, name: str) -> int:
            return int(mujoco.mj_name2id(model, kind, name))

        cube_joint = int(model.body_jntadr[obj(mujoco.mjtObj.mjOBJ_BODY, models.SO101_CUBE)])
        self._cube_qpos = int(model.jnt_qposadr[cube_joint])
        self._tip_sites = [obj(mujoco.mjtObj.mjOBJ_SITE, s) for s in models.SO101_JAW_TIPS]
        self._touch_cols = [self.backend.sensor_slice(s).start for s in models.SO101_JAW_SENSORS]
        self._qpos0 = torch.as_tensor(model.qpos0, dtype=torch.float64, device=self.backend.qpos.device)
        n = self.num_envs
        self.cube_start = torch.zeros(n, 3, device=self.device)
        self.cube_pos = torch.zeros(n, 3, device=self.device)
        self.cube_quat = torch.zeros(n, 4, device=self.device)
        self.grasp_point = torch.zeros(n, 3, device=self.device)
        self.touch = torch.zeros(n, 2, device=self.device)
        if cfg.cameras:
            from rslkit.envs.mujoco.cameras import task_cameras

            spec = models.so101_lift_spec(visual=cfg.camera_quality == "visual")
            models.add_so101_cameras(spec)
            self._cameras = task_cameras(spec, self.backend, cfg)
        self._reset_all()

    # ----------------------------------------------------------------- state
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"physics": self.backend.state, "cube_start": self.cube_start, "last_action": self.last_action}

    def _refresh(self) -> None:
        """Read the cube, fingertips and contacts of every env from the backend."""
        qpos = self.backend.qpos
        c = self._cube_qpos
        self.cube_pos = qpos[:, c : c + 3].to(self.device, torch.float32)
        self.cube_quat = qpos[:, c + 3 : c + 7].to(self.device, torch.float32)
        tips = self.backend.site_xpos()[:, self._tip_sites]
        self.grasp_point = tips.mean(1).to(self.device, torch.float32)
        sensors = self.backend.sensordata()
        self.touch = (sensors[:, self._touch_cols] > 0).to(self.device, torch.float32)

    # ----------------------------------------------------------------- resets
    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        c, k = self.cfg, env_ids.numel()
        q = self._qpos0.repeat(k, 1)
        arm = self._act[:-1]
        q[:, self._qpos_ids[:-1]] = (
            self._ctrl_mid[arm] + self._rand64(k, 5, -c.init_noise, c.init_noise) * self._ctrl_half[arm]
        )
        q[:, self._qpos_ids[-1]] = c.gripper_open
        x = self._rand64(k, 1, *c.cube_x)
        y = self._rand64(k, 1, *c.cube_y)
        half_yaw = 0.5 * self._rand64(k, 1, -c.cube_yaw, c.cube_yaw)
        zeros = torch.zeros_like(x)
        cube = torch.cat((x, y, zeros + CUBE_HALF_SIZE, half_yaw.cos(), zeros, zeros, half_yaw.sin()), -1)
        q[:, self._cube_qpos : self._cube_qpos + 7] = cube
        ctrl = q[:, self._qpos_ids].clone()
        self.backend.set_joint_state(env_ids.cpu(), q, ctrl=ctrl)
        self.cube_start[env_ids] = cube[:, :3].to(self.device, torch.float32)
        self.last_action[env_ids] = 0.0
        self._refresh()

    def _rand64(self, n: int, d: int, low: float, high: float) -> torch.Tensor:
        return self.rand(n, d, low=low, high=high).to(self._qpos0)

    # ----------------------------------------------------------------- stepping
    def _apply_actions(self, actions: torch.Tensor) -> None:
        a = actions.clamp(-1.0, 1.0)
        a64 = a.detach().to(self._ctrl_mid)
        arm = self._act[:-1]
        ctrl = self._controls()
        ctrl[:, arm] = self._ctrl_mid[arm] + a64[:, :-1] * self._ctrl_half[arm]
        ctrl[:, self._act[-1]] = torch.where(a64[:, -1] > 0, self.cfg.gripper_open, self.cfg.gripper_closed)
        self._step_controls(ctrl, a)

    def joint_ranges(self) -> tuple[list[float], list[float]]:
        """Lower and upper limits of :attr:`joint_names` (radians): the ranges that map the observed positions (the
        ``pos_normalized`` columns) and the arm's position targets to ``[-1, 1]``. On a robot these are the ROS 2
        node's ``position_lower`` / ``position_upper``; their midpoints its ``default_positions`` and half-widths
        its ``action_scale``."""
        return self._ctrl_low[self._act].tolist(), self._ctrl_high[self._act].tolist()

    def joint_positions(self) -> torch.Tensor:
        """Measured positions ``[N, 6]`` of :attr:`joint_names` (radians)."""
        return self.backend.qpos[:, self._qpos_ids].to(self.device, torch.float32)

    def lift(self) -> torch.Tensor:
        """Height of the cube above its resting height ``[N]`` (metres)."""
        return self.cube_pos[:, 2] - CUBE_HALF_SIZE

    def grasp_distance(self) -> torch.Tensor:
        """``[N]`` distance (metres) of the cube's centre from the midpoint of the fingertip pads."""
        return torch.linalg.vector_norm(self.cube_pos - self.grasp_point, dim=-1)

    def grasped(self) -> torch.Tensor:
        """``[N]`` bool: the gripper is commanded closed on a cube between the pads (within ``grasp_radius`` of their
        midpoint) and both jaws touch it."""
        closing = self.last_action[:, -1] <= 0
        return closing & (self.touch.sum(-1) >= 2) & (self.grasp_distance() < self.cfg.grasp_radius)

    action_names = [f"{j}.position_target" for j in ARM_JOINTS] + [f"{GRIPPER}.open_close"]
    joint_names = [*ARM_JOINTS, GRIPPER]
    observation_names = {
        "policy": [f"{j}.pos_normalized" for j in (*ARM_JOINTS, GRIPPER)]
        + [f"{j}.vel_x0.1" for j in (*ARM_JOINTS, GRIPPER)]
        + [f"grasp_point.{a}" for a in "xyz"]
        + [f"cube.{a}" for a in "xyz"]
        + [f"cube_minus_grasp_point.{a}" for a in "xyz"]
        + [f"cube_quat.{a}" for a in "wxyz"]
        + ["touch.fixed_jaw", "touch.moving_jaw"]
        + [f"last_action.{j}" for j in (*ARM_JOINTS, GRIPPER)]
    }

    def _observations(self) -> TensorDict:
        q_norm, qd = self._joint_observations()
        rel = self.cube_pos - self.grasp_point
        parts = (q_norm, qd, self.grasp_point, self.cube_pos, rel, self.cube_quat, self.touch, self.last_action)
        groups = {"policy": torch.cat(parts, -1), **(self._cameras.render() if self._cameras is not None else {})}
        return TensorDict(groups, batch_size=[self.num_envs], device=self.device)

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        c = self.cfg
        dist = self.grasp_distance()
        height = self.lift()
        far_and_open = (self.last_action[:, -1] > 0) & (dist > 2.0 * c.grasp_radius)
        qd = self.backend.qvel[:, self._dof_ids[:-1]].to(self.device, torch.float32)
        return {
            "reach": c.reach_weight * (1.0 - torch.tanh(dist / c.reach_scale)),
            "grasp": c.grasp_weight * self.grasped().float(),
            "open": c.open_weight * far_and_open.float(),
            "lift": c.lift_weight
            * self.grasped().float()
            * ((height - c.lift_min) / (c.lift_height - c.lift_min)).clamp(0.0, 1.0),
            "success": c.success_weight * self._success().float(),
            "action_rate": -c.action_rate_weight * (self.last_action - self._prev_action).square().sum(-1),
            "joint_vel": -c.joint_vel_weight * qd.square().sum(-1),
        }

    def _success(self) -> torch.Tensor:
        return self.lift() >= self.cfg.lift_height

    def _terminated(self) -> torch.Tensor:
        travel = torch.linalg.vector_norm(self.cube_pos[:, :2] - self.cube_start[:, :2], dim=-1)
        return travel > self.cfg.max_cube_travel

    # ----------------------------------------------------------------- rendering
    def render_frame(self, env_id: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB image ``[height, width, 3]`` (uint8) of env ``env_id`` with the visual meshes, seen from the front left.

        The first call builds an offscreen renderer (see :mod:`rslkit.envs.mujoco.render` for the GL set-up).
        """
        from rslkit.envs.mujoco.models import load_so101_lift
        from rslkit.envs.mujoco.render import CameraPose

        camera = CameraPose(lookat=(0.2, 0.0, 0.08), distance=0.65, azimuth=140.0, elevation=-25.0)
        return self._render(env_id, (width, height), lambda: load_so101_lift(visual=True), camera)


POLICY = Columns(SO101LiftTask.observation_names["policy"])
"""The ``policy`` group's columns by name."""


def lift_expert(cfg: SO101LiftCfg | None = None) -> SO101LiftExpert:
    """The task's scripted expert (:mod:`rslkit.envs.tasks.so101_lift_expert`) for ``cfg`` (default the task's)."""
    return SO101LiftExpert(cfg or SO101LiftCfg(), POLICY.names, CUBE_HALF_SIZE)


def lift_distance(cfg: SO101LiftCfg | None = None) -> GoalDistance:
    """The task's success test on one observation: the height the cube lacks to ``lift_height`` plus, until it is
    up, pads to cube (metres)."""
    lift_height = (cfg or SO101LiftCfg()).lift_height
    cube, pads = POLICY["cube.*"], POLICY["grasp_point.*"]

    def distance(obs: Observation) -> float:
        x = np.asarray(obs["policy"])
        lacking = max(CUBE_HALF_SIZE + lift_height - float(x[cube[2]]), 0.0)
        return lacking + float(np.linalg.norm(x[cube] - x[pads])) if lacking > 0 else 0.0

    return distance


def _make(cfg: SO101LiftCfg, device: str) -> SO101LiftTask:
    return SO101LiftTask(cfg, device)


TASK = TaskSpec(
    name="so101-lift",
    env_cfg=lambda: SO101LiftCfg(num_envs=512),
    make_env=_make,
    description="SO-101 arm grasping and lifting a cube (MuJoCo, batched on CPU threads)",
    expert=lift_expert,
    goal_distance=lift_distance,
)
