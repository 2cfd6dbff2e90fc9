"""SO-101 arm reaching random end-effector targets, simulated by a batched MuJoCo backend (``--sim mujoco|warp``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.camera_cfg import CameraTaskCfg
from rslkit.envs.columns import Columns
from rslkit.envs.expert import GoalDistance, Observation, batched
from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.tasks.arm_kinematics import ArmKinematics
from rslkit.envs.tasks.so101_arm import ARM_JOINTS, SO101ArmTask, import_mujoco

if TYPE_CHECKING:
    from rslkit.envs.mujoco.cameras import CameraRenderer

CAMERAS = ("front", "wrist")
"""Cameras ``--env.cameras`` may name (``rslkit.envs.mujoco.models.add_so101_cameras``)."""


@dataclass
class SO101ReachCfg(CameraTaskCfg):
    """Control, target sampling and reward weights of ``so101-reach``."""

    available_cameras = CAMERAS

    episode_length: int = 60
    """Control steps per episode (1.2 s at the default 50 Hz; the servos settle in well under a second, and short
    episodes give PPO more resets per sample: 100-step episodes learned ~2x slower per wall-clock second)."""
    sim: str = "mujoco"
    """Physics backend (``--sim``): ``mujoco`` (C MuJoCo on CPU threads) or ``warp`` (MuJoCo Warp, float32, on the
    task's device: ``--sim warp --device cuda``)."""
    sim_threads: int = 0
    """Threads stepping the simulations on the ``mujoco`` backend, and the target probe (0: all CPU cores)."""
    decimation: int = 10
    """Physics substeps of 2 ms per control step (10: 50 Hz control)."""
    action_mode: str = "absolute"
    """``absolute``: action in [-1, 1] maps linearly onto each joint's control range (0 = mid-range, the home pose).
    ``delta``: the position target moves by ``action * delta_scale * half_range`` per step, clipped to the range."""
    delta_scale: float = 0.05
    target_range: float = 0.7
    """Targets are the end-effector positions of joint configurations drawn uniformly from this fraction of each
    arm joint's range around mid-range (so every target is reachable)."""
    min_target_height: float = 0.05
    """Targets lower than this (metres above the base) are redrawn."""
    init_noise: float = 0.1
    """Initial joint positions: mid-range +- this fraction of the half-range."""
    success_radius: float = 0.02
    """Success: the end effector is this close (metres) to the target when the episode ends."""
    distance_weight: float = 1.0
    """``-w * distance`` (metres)."""
    proximity_weight: float = 1.0
    """``+w * (1 - tanh(distance / proximity_scale))``: a sharper pull near the target."""
    proximity_scale: float = 0.05
    reach_weight: float = 1.0
    """``+w`` per step within ``success_radius``."""
    action_rate_weight: float = 0.01
    """``-w * |a_t - a_{t-1}|^2``."""


class SO101ReachTask(SO101ArmTask):
    """Move the SO-101 gripper frame to a random target resampled every episode.

    Actions ``[N, 5]`` in ``[-1, 1]`` (clipped) set position targets of the five arm joints (shoulder pan, shoulder
    lift, elbow flex, wrist flex, wrist roll; see :class:`SO101ReachCfg.action_mode`); the gripper is held at
    mid-range. The arm's position actuators (kp 17.8, force limit 3.35 N m) track the targets.

    Observation group ``policy`` ``[N, 24]``: arm joint positions normalized to ``[-1, 1]`` by their ranges (5),
    joint velocities / 10 (5), end-effector position (3), target (3), target - end effector (3), last action (5).
    With ``cfg.cameras``: a group ``camera_<name>`` ``[N, H, W, 3]`` uint8 per camera, the target a green sphere.

    Reward terms (logged per term as ``Episode_Reward/<name>``): ``distance``, ``proximity``, ``reach``,
    ``action_rate``. ``extras["success"]``: within ``success_radius`` of the target (read where ``dones``).
    No terminations; episodes end by time-out.
    """

    cfg: SO101ReachCfg

    def __init__(self, cfg: SO101ReachCfg, device: str | torch.device = "cpu") -> None:
        if cfg.action_mode not in ("absolute", "delta"):
            raise ValueError(f"action_mode must be 'absolute' or 'delta', got '{cfg.action_mode}'.")
        mujoco = import_mujoco("so101-reach")
        from rslkit.envs.mujoco.backend import MujocoBackend, MujocoBackendCfg
        from rslkit.envs.mujoco.models import SO101_EE_SITE, load_so101

        super().__init__(cfg, num_actions=len(ARM_JOINTS), device=device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,), np.float32)
        model = load_so101()
        self._build_arm(model, ARM_JOINTS, cfg.sim, cfg.sim_threads, cfg.decimation)
        # A second batch, never stepped, turns sampled joint targets into reachable end-effector targets. It stays
        # C MuJoCo whatever --sim says: it only runs forward kinematics at resets (microseconds per env on the CPU,
        # no kernels to compile), and float64 kinematics give the same targets on every backend.
        self._probe = MujocoBackend(model, self.num_envs, MujocoBackendCfg(sim_threads=cfg.sim_threads, decimation=1))
        self._ee_site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, SO101_EE_SITE)
        self.target = torch.zeros(self.num_envs, 3, device=self.device)
        self.ee_pos = torch.zeros(self.num_envs, 3, device=self.device)
        self._cameras = self._build_cameras() if cfg.cameras else None
        self._reset_all()

    def _build_cameras(self) -> CameraRenderer:
        from rslkit.envs.mujoco import models
        from rslkit.envs.mujoco.cameras import task_cameras
        from rslkit.envs.mujoco.render import Marker

        spec = models.so101_scene_spec(visual=self.cfg.camera_quality == "visual")
        models.add_so101_cameras(spec)
        return task_cameras(spec, self.backend, self.cfg, Marker((0.0, 0.0, 0.0), 0.02, (0.1, 0.9, 0.2, 1.0)))

    # ----------------------------------------------------------------- state
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"physics": self.backend.state, "target": self.target, "last_action": self.last_action}

    def _refresh(self) -> None:
        self.ee_pos = self.backend.site_xpos()[:, self._ee_site].to(self.device, torch.float32)

    # ----------------------------------------------------------------- resets
    def _sample_joints(self, n: int, fraction: float) -> torch.Tensor:
        """Joint positions ``[n, nq]`` around mid-range: arm joints within ``fraction`` of their half-range."""
        q = self._ctrl_mid.repeat(n, 1)
        u = self.rand(n, self.num_actions, low=-fraction, high=fraction).to(q)
        q[:, self._act] += u * self._ctrl_half[self._act]
        return q

    def _sample_targets(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Reachable end-effector targets ``[K, 3]``, redrawn (up to 10 times) while below the minimum height."""
        ids = env_ids.cpu()
        targets = torch.zeros(ids.numel(), 3, dtype=torch.float64)
        todo = torch.arange(ids.numel())
        for _ in range(10):
            sub = ids[todo]
            self._probe.set_joint_state(sub, self._sample_joints(todo.numel(), self.cfg.target_range))
            targets[todo] = self._probe.site_xpos()[sub, self._ee_site]
            todo = todo[targets[todo, 2] < self.cfg.min_target_height]
            if todo.numel() == 0:
                break
        return targets

    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        self.target[env_ids] = self._sample_targets(env_ids).to(self.device, torch.float32)
        ids = env_ids.cpu()
        q = self._sample_joints(ids.numel(), self.cfg.init_noise)
        self.backend.set_joint_state(ids, q, ctrl=q)
        self.last_action[env_ids] = 0.0
        self._refresh()

    # ----------------------------------------------------------------- stepping
    def _apply_actions(self, actions: torch.Tensor) -> None:
        a = actions.clamp(-1.0, 1.0)
        a64 = a.detach().to(self._ctrl_mid)
        arm = self._act
        ctrl = self._controls()
        if self.cfg.action_mode == "absolute":
            ctrl[:, arm] = self._ctrl_mid[arm] + a64 * self._ctrl_half[arm]
        else:
            ctrl[:, arm] += a64 * self.cfg.delta_scale * self._ctrl_half[arm]
        self._step_controls(ctrl, a)

    def distance(self) -> torch.Tensor:
        """End-effector distance to the target ``[N]`` (metres)."""
        return torch.linalg.vector_norm(self.target - self.ee_pos, dim=-1)

    action_names = [f"{j}.position_target" for j in ARM_JOINTS]
    joint_names = list(ARM_JOINTS)
    observation_names = {
        "policy": [f"{j}.pos_normalized" for j in ARM_JOINTS]
        + [f"{j}.vel_x0.1" for j in ARM_JOINTS]
        + [f"ee.{a}" for a in "xyz"]
        + [f"target.{a}" for a in "xyz"]
        + [f"target_minus_ee.{a}" for a in "xyz"]
        + [f"last_action.{j}" for j in ARM_JOINTS]
    }

    def _observations(self) -> TensorDict:
        q_norm, qd = self._joint_observations()
        obs = torch.cat((q_norm, qd, self.ee_pos, self.target, self.target - self.ee_pos, self.last_action), -1)
        groups = {"policy": obs, **(self._cameras.render(self.target) if self._cameras is not None else {})}
        return TensorDict(groups, batch_size=[self.num_envs], device=self.device)

    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        c = self.cfg
        dist = self.distance()
        return {
            "distance": -c.distance_weight * dist,
            "proximity": c.proximity_weight * (1.0 - torch.tanh(dist / c.proximity_scale)),
            "reach": c.reach_weight * (dist < c.success_radius).float(),
            "action_rate": -c.action_rate_weight * (self.last_action - self._prev_action).square().sum(-1),
        }

    def _success(self) -> torch.Tensor:
        return self.distance() < self.cfg.success_radius

    def _terminated(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    # ----------------------------------------------------------------- rendering (rslkit.envs.mujoco.render)
    def render_frame(self, env_id: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB image ``[height, width, 3]`` (uint8) of env ``env_id``, its target drawn as a green sphere."""
        from rslkit.envs.mujoco.models import load_so101_visual
        from rslkit.envs.mujoco.render import CameraPose, Marker

        camera = CameraPose(lookat=(0.15, 0.0, 0.12), distance=0.75, azimuth=140.0, elevation=-25.0)
        marker = Marker(self.target[env_id].cpu().numpy())
        return self._render(env_id, (width, height), load_so101_visual, camera, [marker])

    def close(self) -> None:
        """Free the GL contexts (cameras, ``render_frame``), the physics and the target probe."""
        super().close()
        self._probe.close()


POLICY = Columns(SO101ReachTask.observation_names["policy"])
"""The ``policy`` group's columns by name."""


class SO101ReachExpert:
    """The scripted expert (``action_mode="absolute"``): damped least-squares inverse kinematics of the gripper
    frame onto the target, with gravity compensation (the position servos sag under load by ``gravity torque /
    kp``). Reads the normalized arm joints and the target by name."""

    def __init__(self, cfg: SO101ReachCfg | None = None) -> None:
        from rslkit.envs.mujoco.models import SO101_EE_SITE, load_so101

        if cfg is not None and cfg.action_mode != "absolute":
            raise ValueError("The so101-reach expert commands absolute joint targets: use --env.action_mode absolute.")
        self.kin = ArmKinematics(load_so101(), ARM_JOINTS, [SO101_EE_SITE], SO101_EE_SITE)
        self._joints = POLICY[",".join(f"{j}.pos_normalized" for j in ARM_JOINTS)]
        self._target = POLICY["target.*"]
        self._call = batched(self._one)

    def _one(self, obs: np.ndarray) -> np.ndarray:
        POLICY.check(obs.shape[-1], "The so101-reach expert")
        q_goal = self.kin.solve(self.kin.joints(obs[self._joints]), obs[self._target], n=len(ARM_JOINTS))
        return self.kin.action(self.kin.hold(q_goal))

    def __call__(self, obs: Observation) -> np.ndarray:
        return self._call(obs)


def reach_distance(cfg: SO101ReachCfg | None = None) -> GoalDistance:
    """The task's success test on one observation: gripper frame to target beyond ``success_radius`` (metres)."""
    radius = (cfg or SO101ReachCfg()).success_radius
    error = POLICY["target_minus_ee.*"]
    return lambda obs: max(float(np.linalg.norm(np.asarray(obs["policy"])[error])) - radius, 0.0)


def _make(cfg: SO101ReachCfg, device: str) -> SO101ReachTask:
    return SO101ReachTask(cfg, device)


TASK = TaskSpec(
    name="so101-reach",
    env_cfg=lambda: SO101ReachCfg(num_envs=512),
    make_env=_make,
    description="SO-101 arm reaching random end-effector targets (MuJoCo; --sim mujoco|warp)",
    expert=SO101ReachExpert,
    goal_distance=reach_distance,
)
