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
from rslkit.envs.torch_task import TorchTask

if TYPE_CHECKING:
    from rslkit.envs.mujoco.cameras import CameraRenderer
    from rslkit.envs.mujoco.render import BackendRenderer

# The five arm joints the policy drives (the gripper is held still); kept here so that importing this module
# (which registers the task) needs no MuJoCo.
ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
CAMERAS = ("front", "wrist")
"""Cameras ``--env.cameras`` may name (``rslkit.envs.mujoco.models.add_so101_cameras``)."""


def _import_mujoco():
    """MuJoCo and the backend, imported when a task is built (registration must work without MuJoCo)."""
    try:
        import mujoco

        from rslkit.envs.mujoco.backend import MujocoBackend, MujocoBackendCfg
        from rslkit.envs.mujoco.factory import make_backend
        from rslkit.envs.mujoco.models import SO101_EE_SITE, load_so101
    except ImportError as err:
        raise ImportError(
            f"so101-reach needs MuJoCo >= 4.0 ({err}); install it with `pip install -e '.[mujoco]'`."
        ) from err
    return mujoco, MujocoBackend, MujocoBackendCfg, make_backend, SO101_EE_SITE, load_so101


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


class SO101ReachTask(TorchTask):
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
        mujoco, MujocoBackend, MujocoBackendCfg, make_backend, ee_site_name, load_so101 = _import_mujoco()
        super().__init__(cfg, num_actions=len(ARM_JOINTS), device=device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,), np.float32)
        model = load_so101()
        backend_cfg = MujocoBackendCfg(sim_threads=cfg.sim_threads, decimation=cfg.decimation)
        self.backend = make_backend(model, self.num_envs, backend_cfg, sim=cfg.sim, device=self.device)
        # A second batch, never stepped, turns sampled joint targets into reachable end-effector targets. It stays
        # C MuJoCo whatever --sim says: it only runs forward kinematics at resets (microseconds per env on the CPU,
        # no kernels to compile), and float64 kinematics give the same targets on every backend.
        self._probe = MujocoBackend(model, self.num_envs, MujocoBackendCfg(sim_threads=cfg.sim_threads, decimation=1))
        self._ee_site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, ee_site_name)
        # Joint and control constants live where the backend keeps its tensors (CPU, or the GPU for --sim warp).
        sim_device = self.backend.qpos.device
        act_ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, j) for j in ARM_JOINTS]
        self._arm_act = torch.tensor(act_ids, device=sim_device)
        qpos_adr = [int(model.jnt_qposadr[model.actuator_trnid[a, 0]]) for a in act_ids]
        self._arm_qpos = torch.tensor(qpos_adr, device=sim_device)
        self._arm_dof = torch.tensor(
            [int(model.jnt_dofadr[model.actuator_trnid[a, 0]]) for a in act_ids], device=sim_device
        )
        ctrl_range = torch.as_tensor(model.actuator_ctrlrange, dtype=torch.float64, device=sim_device)
        self._ctrl_low, self._ctrl_high = ctrl_range[:, 0], ctrl_range[:, 1]
        self._ctrl_mid = 0.5 * (self._ctrl_low + self._ctrl_high)
        self._ctrl_half = 0.5 * (self._ctrl_high - self._ctrl_low)
        self._ctrl = self._ctrl_mid.repeat(self.num_envs, 1)
        self.target = torch.zeros(self.num_envs, 3, device=self.device)
        self.ee_pos = torch.zeros(self.num_envs, 3, device=self.device)
        self.last_action = torch.zeros(self.num_envs, self.num_actions, device=self.device)
        self._prev_action = self.last_action.clone()
        self._cameras = self._build_cameras() if cfg.cameras else None
        self._renderer: BackendRenderer | None = None
        """``render_frame``'s renderer, built at its first call."""
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

    def load_state_dict(self, state: dict) -> None:
        """Restore a state saved by :meth:`state_dict`, MuJoCo's integration state included (exact resume)."""
        super().load_state_dict(state)
        self.backend.forward()
        self._refresh()

    def _after_state_rows_written(self, env_ids: torch.Tensor) -> None:
        """After :meth:`start_episode_from`: derived MuJoCo fields of ``env_ids``, then the task's cached reads."""
        self.backend.forward(env_ids.cpu())
        self._refresh()

    def _refresh(self) -> None:
        self.ee_pos = self.backend.site_xpos()[:, self._ee_site].to(self.device, torch.float32)
        self._ctrl = self.backend.ctrl.to(self._ctrl_mid, copy=True)  # float64 (warp: float32 view)

    # ----------------------------------------------------------------- resets
    def _sample_joints(self, n: int, fraction: float) -> torch.Tensor:
        """Joint positions ``[n, nq]`` around mid-range: arm joints within ``fraction`` of their half-range."""
        q = self._ctrl_mid.repeat(n, 1)
        u = self.rand(n, self.num_actions, low=-fraction, high=fraction).to(q)
        q[:, self._arm_act] += u * self._ctrl_half[self._arm_act]
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
    def _pre_step(self) -> None:
        self._prev_action.copy_(self.last_action)

    def _apply_actions(self, actions: torch.Tensor) -> None:
        a = actions.clamp(-1.0, 1.0)
        a64 = a.detach().to(self._ctrl_mid)
        arm = self._arm_act
        ctrl = self._ctrl.clone()
        if self.cfg.action_mode == "absolute":
            ctrl[:, arm] = self._ctrl_mid[arm] + a64 * self._ctrl_half[arm]
        else:
            ctrl[:, arm] += a64 * self.cfg.delta_scale * self._ctrl_half[arm]
        ctrl = torch.minimum(torch.maximum(ctrl, self._ctrl_low), self._ctrl_high)
        self.backend.step(ctrl)
        self.last_action = a.detach().clone()
        self._refresh()

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
        q = self.backend.qpos[:, self._arm_qpos]
        arm = self._arm_act
        q_norm = ((q - self._ctrl_mid[arm]) / self._ctrl_half[arm]).to(self.device, torch.float32)
        qd = (0.1 * self.backend.qvel[:, self._arm_dof]).to(self.device, torch.float32)
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
    @property
    def step_dt(self) -> float:
        """Simulated seconds per :meth:`step`."""
        return self.cfg.decimation * float(self.backend.model.opt.timestep)

    def render_frame(self, env_id: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB image ``[height, width, 3]`` (uint8) of env ``env_id``, its target drawn as a green sphere."""
        from rslkit.envs.mujoco.models import load_so101_visual
        from rslkit.envs.mujoco.render import BackendRenderer, CameraPose, Marker

        if self._renderer is None or self._renderer.size != (width, height):
            if self._renderer is not None:
                self._renderer.close()
            camera = CameraPose(lookat=(0.15, 0.0, 0.12), distance=0.75, azimuth=140.0, elevation=-25.0)
            self._renderer = BackendRenderer(load_so101_visual(), self.backend, width, height, camera)
        return self._renderer.render(env_id, markers=[Marker(self.target[env_id].cpu().numpy())])

    def close(self) -> None:
        """Free the GL contexts (cameras, ``render_frame``) and the physics."""
        for renderer in (self._cameras, self._renderer):
            if renderer is not None:
                renderer.close()
        self._cameras = self._renderer = None
        self.backend.close()
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
