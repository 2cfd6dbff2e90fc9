"""Unitree Go2 velocity-command tracking on flat ground (legged_gym / MuJoCo Playground style), batched MuJoCo."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.tasks import go2_rewards as rw
from rslkit.envs.torch_task import TaskCfg, TorchTask

if TYPE_CHECKING:
    import mujoco

    from rslkit.envs.mujoco.go2 import Go2ModelCfg

NUM_JOINTS = 12
LEGS = ("FL", "FR", "RL", "RR")
HOME = (0.0, 0.9, -1.8) * 4
"""Standing joint targets (per leg: hip, thigh, calf; the model's ``home`` keyframe), radians."""
SPAWN_HEIGHT = 0.30
"""Trunk height above the ground at a reset (metres; it settles to ~0.27 standing)."""


@dataclass
class Go2FlatCfg(TaskCfg):
    """Physics, commands, randomization, noise and reward weights of ``go2-flat``.

    Reward weights are rates per second (the step reward is ``weight * term * dt``, legged_gym's convention),
    except ``termination_weight``, paid once when an episode ends in a fall.
    """

    num_envs: int = 512
    """512 suits 2 CPU cores (more PPO updates per sample); on a GPU use 4096 (``--num_envs 4096``)."""
    episode_length: int = 1000
    """Control steps per episode (20 s at 50 Hz)."""
    sim: str = "mujoco"
    """Physics backend (``--sim``): ``mujoco`` (C MuJoCo on CPU threads) or ``warp`` (MuJoCo Warp)."""
    sim_threads: int = 0
    """Threads stepping the simulations on the mujoco backend (0: all CPU cores)."""
    timestep: float = 0.005
    """Physics step (seconds): 200 Hz."""
    decimation: int = 4
    """Physics steps per control step (4 x 5 ms: 50 Hz PD targets)."""
    kp: float = 25.0
    kd: float = 0.6
    joint_frictionloss: bool = False
    """Model the joints' 0.2 N m dry friction (12 extra constraint rows; ~20 % slower physics)."""
    action_scale: float = 0.25
    """Joint target = home pose + ``action_scale * action`` (radians)."""
    action_clip: float = 4.0
    # Commands (vx, vy in m/s, yaw rate in rad/s), drawn uniformly at every reset.
    lin_vel_x_range: tuple[float, float] = (-1.0, 1.0)
    lin_vel_y_range: tuple[float, float] = (-0.5, 0.5)
    yaw_rate_range: tuple[float, float] = (-1.0, 1.0)
    still_fraction: float = 0.05
    """Fraction of episodes commanded to stand still."""
    # Domain randomization, re-drawn per env at every reset.
    friction_range: tuple[float, float] = (0.4, 1.25)
    """Sliding friction of the feet against the floor."""
    added_mass_range: tuple[float, float] = (-1.0, 2.0)
    """Mass added to the trunk (kg; the model's trunk is 6.9 kg)."""
    push_interval_s: float = 8.0
    """Every this many seconds of an episode, the base gets a random horizontal velocity kick (0: never)."""
    push_velocity: float = 0.5
    """Kicks are uniform in ``+-push_velocity`` m/s per horizontal axis."""
    init_joint_noise: float = 0.1
    """Initial joint positions: home +- this (radians)."""
    noise_level: float = 1.0
    """Scales the observation noise (0: none)."""
    policy_lin_vel: bool = True
    """Give the policy the base linear velocity (as legged_gym; on a real robot it comes from a state estimator)."""
    max_tilt: float = 1.0
    """Fall: the base is tilted more than this (radians) from upright."""
    # Reward weights.
    track_lin_vel_weight: float = 1.5
    track_ang_vel_weight: float = 0.75
    tracking_sigma: float = 0.25
    lin_vel_z_weight: float = -2.0
    ang_vel_xy_weight: float = -0.05
    orientation_weight: float = -2.0
    torques_weight: float = -2e-4
    joint_acc_weight: float = -2.5e-7
    action_rate_weight: float = -0.01
    feet_air_time_weight: float = 1.0
    air_time_target: float = 0.25
    undesired_contacts_weight: float = -1.0
    termination_weight: float = -2.0


class Go2FlatTask(TorchTask):
    """Walk the Unitree Go2 at commanded planar velocity and yaw rate on flat ground.

    Actions ``[N, 12]`` (clipped to ``+-action_clip``) offset the standing pose by ``action_scale`` radians per
    unit; PD servos (``kp``, ``kd``, torque limits of the motors) track the targets at 200 Hz physics.

    Observation groups (noise on ``policy`` only):

    - ``policy`` ``[N, 48]`` (``[N, 45]`` without ``policy_lin_vel``): base linear velocity x2 (3), base angular
      velocity x0.25 (3), gravity in the base frame (3), command x(2, 2, 0.25) (3), joint positions - home (12),
      joint velocities x0.05 (12), last action (12).
    - ``critic`` ``[N, 55]``: the noiseless policy terms with linear velocity, foot contacts (4), base height (1),
      foot friction and added trunk mass (2).

    Reward terms (logged per term as ``Episode_Reward/<name>``): ``track_lin_vel``, ``track_ang_vel``,
    ``lin_vel_z``, ``ang_vel_xy``, ``orientation``, ``torques``, ``joint_acc``, ``action_rate``,
    ``feet_air_time``, ``undesired_contacts``, ``termination``. Terminations: the trunk touches the floor or
    tilts more than ``max_tilt``. ``extras["log"]`` also carries ``Metrics/survival`` (fraction of finished
    episodes that reached the time-out), ``Metrics/lin_vel_error`` (mean ``|v*_xy - v_xy|``, m/s) and
    ``Metrics/ang_vel_error``.
    """

    cfg: Go2FlatCfg

    def __init__(self, cfg: Go2FlatCfg, device: str | torch.device = "cpu") -> None:
        from rslkit.envs.mujoco.backend import MujocoBackendCfg
        from rslkit.envs.mujoco.factory import make_backend
        from rslkit.envs.mujoco.go2 import Go2ModelCfg

        super().__init__(cfg, num_actions=NUM_JOINTS, device=device)
        self.action_space = gym.spaces.Box(-cfg.action_clip, cfg.action_clip, (NUM_JOINTS,), np.float32)
        self.joint_names = [f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "thigh", "calf")]
        self.action_names = [f"{j}.position_offset" for j in self.joint_names]
        self.observation_names = self._observation_names()
        model_cfg = Go2ModelCfg(timestep=cfg.timestep, kp=cfg.kp, kd=cfg.kd, joint_frictionloss=cfg.joint_frictionloss)
        self.model = self._model_spec(model_cfg).compile()
        backend_cfg = MujocoBackendCfg(sim_threads=cfg.sim_threads, decimation=cfg.decimation)
        self.backend = make_backend(self.model, self.num_envs, backend_cfg, sim=cfg.sim, device=device)
        self.dt = cfg.timestep * cfg.decimation
        self._push_steps = round(cfg.push_interval_s / self.dt) if cfg.push_interval_s > 0 else 0
        self._foot_geoms = [self.model.geom(leg).id for leg in LEGS]
        self._trunk = self.model.body("base").id
        self._trunk_mass = float(self.model.body_mass[self._trunk])
        # Columns of sensordata (every sensor used here is one value wide).
        self._foot_cols = self._sensor_cols([f"{leg}_foot_contact" for leg in LEGS])
        self._base_col = self._sensor_cols(["base_contact"])
        self._thigh_cols = self._sensor_cols([f"{leg}_thigh_contact" for leg in LEGS])
        self._torque_cols = self._sensor_cols([f"{leg}_{p}_torque" for leg in LEGS for p in ("hip", "thigh", "calf")])
        self.home = torch.tensor(HOME, device=self.device)
        self._noise_scale = self._make_noise_scale()
        n, dev = self.num_envs, self.device
        self.commands = torch.zeros(n, 3, device=dev)
        self.friction = torch.full((n,), model_cfg.foot_friction, device=dev)
        self.added_mass = torch.zeros(n, device=dev)
        self.last_action = torch.zeros(n, NUM_JOINTS, device=dev)
        self._prev_action = torch.zeros_like(self.last_action)
        self.air_time = torch.zeros(n, 4, device=dev)
        self.last_contacts = torch.zeros(n, 4, dtype=torch.bool, device=dev)
        self._prev_joint_vel = torch.zeros(n, NUM_JOINTS, device=dev)
        self.sensors = torch.zeros(n, self.model.nsensordata, device=dev)
        """Sensor readings ``[N, nsensordata]`` (float32) after the last step or reset."""
        self._randomize_model = self._model_randomizer()
        self._reset_all()

    def _model_spec(self, model_cfg: Go2ModelCfg) -> mujoco.MjSpec:
        """The robot and its ground as an ``MjSpec`` (flat: :func:`~rslkit.envs.mujoco.go2.go2_spec`'s floor plane)."""
        from rslkit.envs.mujoco.go2 import go2_spec

        return go2_spec(model_cfg)

    # ----------------------------------------------------------------- state
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {
            "physics": self.backend.state,
            "commands": self.commands,
            "last_action": self.last_action,
            "air_time": self.air_time,
            "last_contacts": self.last_contacts,
            "friction": self.friction,
            "added_mass": self.added_mass,
            "sensors": self.sensors,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a state saved by :meth:`state_dict` (physics, commands, randomized friction and mass, sensors).

        The contact and torque sensors are acceleration-stage values of the last physics substep, which
        ``backend.forward()`` does not recompute, so they come from the saved state rather than the backend.
        """
        super().load_state_dict(state)
        self._randomize_model(self._all_envs, self.friction, self.added_mass)
        self.backend.forward()
        self._refresh(read_sensors=False)

    def _refresh(self, read_sensors: bool = True) -> None:
        """Read the physics state into float32 task tensors (base frame quantities, contacts, torques).

        Args:
            read_sensors: take :attr:`sensors` ``[N, nsensordata]`` from the backend (False: keep the current ones).
        """
        qpos = self.backend.qpos.to(self.device, torch.float32)
        qvel = self.backend.qvel.to(self.device, torch.float32)
        if read_sensors:
            self.sensors = self.backend.sensordata().to(self.device, torch.float32)
        sensors = self.sensors
        quat = qpos[:, 3:7]
        self.base_height = qpos[:, 2]
        self.lin_vel = rw.quat_rotate_inverse(quat, qvel[:, :3])
        self.ang_vel = qvel[:, 3:6]  # a free joint's angular velocity is already in the body frame
        gravity = torch.tensor([0.0, 0.0, -1.0], device=self.device).expand_as(self.lin_vel)
        self.projected_gravity = rw.quat_rotate_inverse(quat, gravity)
        self.joint_pos = qpos[:, 7:]
        self.joint_vel = qvel[:, 6:]
        self.foot_contacts = sensors[:, self._foot_cols] > 0.5
        self.base_contact = sensors[:, self._base_col].squeeze(-1) > 0.5
        self.thigh_contacts = sensors[:, self._thigh_cols] > 0.5
        self.torque = sensors[:, self._torque_cols]

    def _sensor_cols(self, names: list[str]) -> torch.Tensor:
        """Indices into ``sensordata`` of one-value sensors ``names``."""
        return torch.tensor([self.backend.sensor_slice(name).start for name in names], device=self.device)

    # ----------------------------------------------------------------- domain randomization
    def _model_randomizer(self):
        """Per-env foot friction and trunk mass, written into the backend's per-simulation model fields.

        ``mujoco.batch.Batch`` (mujoco 4.0, the C backend's stepper) takes one model but gives any model field
        per-simulation values on request (``Batch.expand``); mass feeds ``mj_setConst``, which then reruns for the
        reset envs only. The Warp backend offers the same as ``expand_model_field`` / ``set_const``. A backend with
        neither is refused unless randomization is off (single-valued ranges).
        """
        batch = getattr(self.backend, "batch", None)
        expand = getattr(self.backend, "expand_model_field", None) or getattr(batch, "expand", None)
        set_const = getattr(self.backend, "set_const", None) or getattr(batch, "set_const", None)
        c = self.cfg
        if expand is None or set_const is None:
            if c.friction_range[0] == c.friction_range[1] and c.added_mass_range == (0.0, 0.0):
                return lambda env_ids, friction, mass: None
            raise ValueError(
                f"The '{c.sim}' backend cannot give envs their own friction and mass; use --sim mujoco, or turn "
                "randomization off with --env.friction_range 0.8,0.8 --env.added_mass_range 0,0."
            )
        geom_friction = torch.as_tensor(expand("geom_friction"))  # [N, ngeom, 3], a live view
        body_mass = torch.as_tensor(expand("body_mass"))  # [N, nbody]

        def apply(env_ids: torch.Tensor, friction: torch.Tensor, mass: torch.Tensor) -> None:
            ids = env_ids.to(geom_friction.device)
            for geom in self._foot_geoms:
                geom_friction[ids, geom, 0] = friction[env_ids].to(geom_friction)
            body_mass[ids, self._trunk] = self._trunk_mass + mass[env_ids].to(body_mass)
            set_const(env_ids.cpu().numpy().astype(np.int32))

        return apply

    # ----------------------------------------------------------------- rendering (play.py --video)
    @property
    def step_dt(self) -> float:
        """Simulated seconds per :meth:`step` (0.02 at the defaults)."""
        return self.dt

    def render_frame(self, env_id: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB image ``[height, width, 3]`` of env ``env_id`` from a camera following the trunk."""
        from rslkit.envs.mujoco.go2 import Go2ModelCfg
        from rslkit.envs.mujoco.render import BackendRenderer

        renderer = getattr(self, "_renderer", None)
        if renderer is None or renderer.size != (width, height):
            c = self.cfg
            visual_cfg = Go2ModelCfg(timestep=c.timestep, joint_frictionloss=c.joint_frictionloss, visual=True)
            visual = self._model_spec(visual_cfg).compile()
            renderer = self._renderer = BackendRenderer(visual, self.backend, width, height, camera="track")
        return renderer.render(env_id)

    # ----------------------------------------------------------------- resets
    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        c, k = self.cfg, env_ids.numel()
        self.commands[env_ids] = torch.stack(
            (
                self.rand(k, low=c.lin_vel_x_range[0], high=c.lin_vel_x_range[1]),
                self.rand(k, low=c.lin_vel_y_range[0], high=c.lin_vel_y_range[1]),
                self.rand(k, low=c.yaw_rate_range[0], high=c.yaw_rate_range[1]),
            ),
            -1,
        )
        self.commands[env_ids] *= (self.rand(k) >= c.still_fraction).float().unsqueeze(-1)
        self.friction[env_ids] = self.rand(k, low=c.friction_range[0], high=c.friction_range[1])
        self.added_mass[env_ids] = self.rand(k, low=c.added_mass_range[0], high=c.added_mass_range[1])
        self._randomize_model(env_ids, self.friction, self.added_mass)
        qpos = torch.zeros(k, 7 + NUM_JOINTS, device=self.device)
        qpos[:, :3] = self._spawn_positions(env_ids)
        qpos[:, 3:7] = rw.yaw_quat(self.rand(k, low=-math.pi, high=math.pi))
        joints = self.home + self.rand(k, NUM_JOINTS, low=-c.init_joint_noise, high=c.init_joint_noise)
        qpos[:, 7:] = joints
        qvel = torch.zeros(k, 6 + NUM_JOINTS, device=self.device)
        qvel[:, :6] = self.rand(k, 6, low=-0.3, high=0.3)
        self.backend.set_joint_state(env_ids.cpu(), qpos, qvel, ctrl=joints)
        self.last_action[env_ids] = 0.0
        self.air_time[env_ids] = 0.0
        self.last_contacts[env_ids] = False
        self._refresh()
        self._prev_joint_vel[env_ids] = self.joint_vel[env_ids]

    def _spawn_positions(self, env_ids: torch.Tensor) -> torch.Tensor:
        """World positions ``[K, 3]`` of the trunks of ``env_ids`` at a reset (flat: 0.30 m above the origin)."""
        spawn = torch.zeros(env_ids.numel(), 3, device=self.device)
        spawn[:, 2] = SPAWN_HEIGHT
        return spawn

    # ----------------------------------------------------------------- stepping
    def _pre_step(self) -> None:
        self._prev_action.copy_(self.last_action)
        self._prev_joint_vel.copy_(self.joint_vel)
        if self._push_steps:
            ids = ((self.episode_length_buf + 1) % self._push_steps == 0).nonzero().squeeze(-1)
            if ids.numel() > 0:
                kick = self.rand(ids.numel(), 2, low=-self.cfg.push_velocity, high=self.cfg.push_velocity)
                cpu_ids = ids.cpu()
                self.backend.qvel[cpu_ids, :2] += kick.to(self.backend.qvel)

    def _apply_actions(self, actions: torch.Tensor) -> None:
        a = actions.clamp(-self.cfg.action_clip, self.cfg.action_clip).detach()
        self.backend.step(self.home + self.cfg.action_scale * a)
        self.last_action = a.clone()
        self._refresh()
        self._update_air_time()

    def _update_air_time(self) -> None:
        contact = self.foot_contacts | self.last_contacts  # contact flags flicker at touchdown
        self.first_contact = (self.air_time > 0.0) & contact
        self.air_time += self.dt
        self._air_time_at_touchdown = self.air_time.clone()
        self.air_time *= ~contact
        self.last_contacts = self.foot_contacts.clone()

    def _terminated(self) -> torch.Tensor:
        return self._fallen()

    def _fallen(self) -> torch.Tensor:
        """``[N]`` bool: trunk on the floor or tilted beyond ``max_tilt``."""
        return self.base_contact | (self.projected_gravity[:, 2] > -math.cos(self.cfg.max_tilt))

    # ----------------------------------------------------------------- observations
    def _make_noise_scale(self) -> torch.Tensor:
        lin = [0.1 * 2.0] * 3 if self.cfg.policy_lin_vel else []
        scale = lin + [0.2 * 0.25] * 3 + [0.05] * 3 + [0.0] * 3 + [0.01] * 12 + [1.5 * 0.05] * 12 + [0.0] * 12
        return self.cfg.noise_level * torch.tensor(scale, device=self.device)

    def _observation_names(self) -> dict[str, list[str]]:
        """Column names of the ``policy`` and ``critic`` groups (exported with the policy)."""
        j = self.joint_names or []
        proprio = (
            [f"ang_vel_x0.25.{a}" for a in "xyz"]
            + [f"projected_gravity.{a}" for a in "xyz"]
            + ["command.vx_x2", "command.vy_x2", "command.yaw_rate_x0.25"]
            + [f"{n}.pos_minus_home" for n in j]
            + [f"{n}.vel_x0.05" for n in j]
            + [f"last_action.{n}" for n in j]
        )
        lin_vel = [f"lin_vel_x2.{a}" for a in "xyz"]
        policy = lin_vel + proprio if self.cfg.policy_lin_vel else proprio
        critic = lin_vel + proprio + [f"foot_contact.{leg}" for leg in LEGS] + ["base_height", "friction", "added_mass"]
        return {"policy": policy, "critic": critic}

    def _proprioception(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lin_vel [N, 3], proprio [N, 45])``, noiseless and scaled: base linear velocity x2 and the other
        proprioceptive terms (angular velocity, gravity, command, joints, last action) of :meth:`_observations`."""
        cmd_scale = torch.tensor([2.0, 2.0, 0.25], device=self.device)
        proprio = torch.cat(
            (
                0.25 * self.ang_vel,
                self.projected_gravity,
                self.commands * cmd_scale,
                self.joint_pos - self.home,
                0.05 * self.joint_vel,
                self.last_action,
            ),
            -1,
        )
        return 2.0 * self.lin_vel, proprio

    def _with_noise(self, obs: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """``obs [N, D]`` plus uniform noise in ``+-scale [D]`` (none when ``noise_level`` is 0)."""
        if self.cfg.noise_level <= 0:
            return obs
        return obs + scale * (2.0 * self.rand(*obs.shape) - 1.0)

    def _observation_groups(self) -> dict[str, torch.Tensor]:
        """The ``policy`` (noisy) and ``critic`` (noiseless, privileged) groups, ``{name: [N, D]}``."""
        lin_vel, proprio = self._proprioception()
        policy = torch.cat((lin_vel, proprio), -1) if self.cfg.policy_lin_vel else proprio
        privileged = torch.stack((self.base_height, self.friction, self.added_mass), -1)
        critic = torch.cat((lin_vel, proprio, self.foot_contacts.float(), privileged), -1)
        return {"policy": self._with_noise(policy, self._noise_scale), "critic": critic}

    def _observations(self) -> TensorDict:
        groups = self._observation_groups()
        return TensorDict(groups, batch_size=[self.num_envs], device=self.device)

    # ----------------------------------------------------------------- rewards
    def _reward_terms(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        c, dt = self.cfg, self.dt
        self._lin_vel_error = torch.linalg.vector_norm(self.commands[:, :2] - self.lin_vel[:, :2], dim=-1)
        self._ang_vel_error = (self.commands[:, 2] - self.ang_vel[:, 2]).abs()
        air = rw.feet_air_time(self._air_time_at_touchdown, self.first_contact, self.commands, c.air_time_target)
        return {
            "track_lin_vel": c.track_lin_vel_weight
            * dt
            * rw.track_lin_vel_xy(self.commands, self.lin_vel, c.tracking_sigma),
            "track_ang_vel": c.track_ang_vel_weight
            * dt
            * rw.track_ang_vel_z(self.commands, self.ang_vel, c.tracking_sigma),
            "lin_vel_z": c.lin_vel_z_weight * dt * rw.lin_vel_z(self.lin_vel),
            "ang_vel_xy": c.ang_vel_xy_weight * dt * rw.ang_vel_xy(self.ang_vel),
            "orientation": c.orientation_weight * dt * rw.orientation(self.projected_gravity),
            "torques": c.torques_weight * dt * rw.torques(self.torque),
            "joint_acc": c.joint_acc_weight * dt * rw.joint_acc(self.joint_vel, self._prev_joint_vel, dt),
            "action_rate": c.action_rate_weight * dt * rw.action_rate(self.last_action, self._prev_action),
            "feet_air_time": c.feet_air_time_weight * dt * air,
            "undesired_contacts": c.undesired_contacts_weight * dt * rw.undesired_contacts(self.thigh_contacts.float()),
            "termination": c.termination_weight * self._fallen().float(),
        }

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """As :meth:`TorchTask.step`, adding ``Metrics/*`` (survival, velocity tracking errors) to ``extras["log"]``."""
        obs, rewards, dones, extras = super().step(actions)
        log = extras["log"]
        log["Metrics/lin_vel_error"] = self._lin_vel_error.mean()
        log["Metrics/ang_vel_error"] = self._ang_vel_error.mean()
        if bool(dones.any()):
            log["Metrics/survival"] = extras["time_outs"][dones].float().mean()
        return obs, rewards, dones, extras


def _make(cfg: Go2FlatCfg, device: str) -> Go2FlatTask:
    return Go2FlatTask(cfg, device)


TASK = TaskSpec(
    name="go2-flat",
    env_cfg=Go2FlatCfg,
    make_env=_make,
    description="Unitree Go2 velocity tracking on flat ground (MuJoCo; --sim mujoco|warp)",
)
