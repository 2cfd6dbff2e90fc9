"""Unitree Go2 velocity-command tracking on rough terrain with a terrain-level curriculum (legged_gym's rough task).

``go2-flat`` on a heightfield (:mod:`rslkit.envs.terrain`): the same robot, commands, rewards, randomization and
backends, plus spawning on the tiles of each env's level, the curriculum, a height scan around the robot and
privileged observations for a teacher policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import mujoco
import torch
from tensordict import TensorDict

from rslkit.envs.task_spec import TaskSpec
from rslkit.envs.tasks.go2_flat import LEGS, SPAWN_HEIGHT, Go2FlatCfg, Go2FlatTask
from rslkit.envs.terrain.curriculum import CurriculumCfg, TerrainCurriculum
from rslkit.envs.terrain.generator import TerrainCfg, generate_terrain
from rslkit.envs.terrain.height_field import HeightField, scan_grid
from rslkit.envs.terrain.mjcf import set_terrain

if TYPE_CHECKING:
    from rslkit.envs.mujoco.go2 import Go2ModelCfg

FORCE_SCALE = 0.01
"""Foot contact forces are observed in units of 100 N (the standing Go2 puts ~40 N on each foot)."""
HEIGHT_SCALE = 5.0
"""Height samples are observed x5, clipped to +-5 (legged_gym)."""


@dataclass
class Go2RoughCfg(Go2FlatCfg):
    """``go2-flat``'s settings plus the terrain, its curriculum and the height scan."""

    terrain: TerrainCfg = field(default_factory=TerrainCfg)
    """Tiles, levels and layout (``--env.terrain.<field>``), generated from ``terrain.seed``."""
    curriculum: CurriculumCfg = field(default_factory=CurriculumCfg)
    """When envs change level (``--env.curriculum.<field>``)."""
    scan_length: float = 1.6
    """Height scan: extent along the robot's heading (metres), centred on the trunk."""
    scan_width: float = 1.0
    """Height scan: extent sideways (metres)."""
    scan_spacing: float = 0.1
    """Height scan: metres between samples (1.6 x 1.0 at 0.1: legged_gym's 187 points)."""
    scan_offset: float = 0.3
    """A height sample reads ``5 clip(base_z - scan_offset - ground_z, -1, 1)`` (0 under a trunk at 0.3 m)."""
    height_noise: float = 0.1
    """Noise on the teacher's height samples, uniform in ``+-height_noise`` metres (times ``noise_level``)."""
    spawn_jitter: float = 0.5
    """Spawn points: the tile's centre +- this (metres, per axis; keep it inside ``terrain.platform / 2``)."""


class Go2RoughTask(Go2FlatTask):
    """Walk the Unitree Go2 at commanded planar velocity and yaw rate over a grid of terrain tiles.

    Everything of :class:`~rslkit.envs.tasks.go2_flat.Go2FlatTask` (actions, rewards, randomization, pushes) holds;
    what changes:

    - **Terrain.** The floor is a heightfield of ``terrain.num_rows`` levels by ``terrain.columns`` tile types.
      Env ``k`` walks column ``k mod num_cols`` and spawns at the centre of its level's tile.
    - **Curriculum.** At the end of an episode a robot farther than ``curriculum.promote_distance`` tile sides from
      its spawn point moves a level up; one that walked less than ``curriculum.demote_fraction`` of its commanded
      distance moves down; past the top level it restarts on a random level. ``extras["log"]`` carries the mean
      level as ``Curriculum/terrain_level``.
    - **Termination.** Also when the trunk comes within 1 m of the heightfield's edge (no penalty).

    Observation groups (names in :attr:`observation_names`; noise on ``policy`` and ``teacher``):

    - ``policy`` ``[N, 48]`` (45 without ``policy_lin_vel``): proprioception, as go2-flat's ``policy``; what a
      blind student policy runs on.
    - ``teacher`` ``[N, 48 + P + 6]``: ``policy``, then ``P`` height samples (187 at the defaults: a
      ``scan_length x scan_width`` grid in the trunk's heading frame, ``x`` major, each
      ``5 clip(base_z - scan_offset - ground_z, -1, 1)``, ground heights read from the terrain grid), foot friction,
      added trunk mass, and the four foot contact forces (x0.01, N): what the PPO teacher sees.
    - ``critic`` ``[N, 55 + P + 4]``: go2-flat's noiseless ``critic`` (base height over the ground here), the
      noiseless height samples and the foot contact forces.
    """

    cfg: Go2RoughCfg

    def __init__(self, cfg: Go2RoughCfg, device: str | torch.device = "cpu") -> None:
        # The terrain and the envs' levels exist before go2-flat's constructor builds the model and resets.
        self.terrain = generate_terrain(cfg.terrain)
        self.height_field = HeightField(self.terrain, device)
        start = torch.Generator(device=device).manual_seed(cfg.seed)
        rows, cols = self.terrain.num_rows, self.terrain.num_cols
        self.curriculum = TerrainCurriculum(cfg.curriculum, cfg.num_envs, rows, cols, cfg.terrain.tile_size, start)
        self._tile_origins = torch.as_tensor(self.terrain.tile_origins, device=device)
        self.spawn_xy = torch.zeros(cfg.num_envs, 2, device=device)
        self.commanded_distance = torch.zeros(cfg.num_envs, device=device)
        """Distance (metres) the commands of the running episode asked for so far, ``[N]``."""
        self._scan_points = scan_grid(cfg.scan_length, cfg.scan_width, cfg.scan_spacing).to(device)
        super().__init__(cfg, device)
        self._force_cols = torch.stack([self._sensor_range(f"{leg}_foot_force") for leg in LEGS])
        noise = cfg.noise_level * cfg.height_noise * HEIGHT_SCALE
        self._height_noise = torch.full((self._scan_points.shape[0],), noise, device=self.device)

    def _model_spec(self, model_cfg: Go2ModelCfg) -> mujoco.MjSpec:
        """go2-flat's robot with the terrain as its floor and a contact-force sensor (3 values) per foot."""
        from rslkit.envs.mujoco.go2 import CONTACT_FORCE, FLOOR, add_floor_contact_sensor

        spec = super()._model_spec(model_cfg)
        set_terrain(spec, self.terrain, FLOOR)
        for leg in LEGS:
            add_floor_contact_sensor(spec, f"{leg}_foot_force", mujoco.mjtObj.mjOBJ_GEOM, leg, CONTACT_FORCE)
        return spec

    def _sensor_range(self, name: str) -> torch.Tensor:
        """Indices into ``sensordata`` of every value of sensor ``name``."""
        cols = self.backend.sensor_slice(name)
        return torch.arange(cols.start, cols.stop, device=self.device)

    # ----------------------------------------------------------------- state
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {
            **super()._state_tensors(),
            "terrain_level": self.curriculum.levels,
            "spawn_xy": self.spawn_xy,
            "commanded_distance": self.commanded_distance,
        }

    def _refresh(self, read_sensors: bool = True) -> None:
        """go2-flat's state, with the base height measured from the ground under the trunk."""
        super()._refresh(read_sensors)
        qpos = self.backend.qpos.to(self.device, torch.float32)
        self.base_xy = qpos[:, :2]
        self.base_z = qpos[:, 2]
        self.base_height = self.base_z - self.height_field.height(self.base_xy[:, 0], self.base_xy[:, 1])

    def foot_forces(self) -> torch.Tensor:
        """``[N, 4]``: magnitude (N) of each foot's contact force against the terrain at the last physics step."""
        return torch.linalg.vector_norm(self.sensors[:, self._force_cols], dim=-1)

    # ----------------------------------------------------------------- resets and curriculum
    def _reset_envs(self, env_ids: torch.Tensor) -> None:
        """Move the finished envs' levels (:class:`TerrainCurriculum`), then reset them on their new tiles."""
        xy = self.backend.qpos[env_ids.to(self.backend.qpos.device), :2].to(self.device, torch.float32)
        walked = torch.linalg.vector_norm(xy - self.spawn_xy[env_ids], dim=-1)
        self.curriculum.update(env_ids, walked, self.commanded_distance[env_ids], self.generator)
        self.commanded_distance[env_ids] = 0.0
        super()._reset_envs(env_ids)

    def _spawn_positions(self, env_ids: torch.Tensor) -> torch.Tensor:
        """The centres of the envs' tiles (level, column) +- ``spawn_jitter``, ``SPAWN_HEIGHT`` above the ground."""
        origin = self._tile_origins[self.curriculum.levels[env_ids], self.curriculum.columns[env_ids]]
        jitter = self.cfg.spawn_jitter
        xy = origin[:, :2] + self.rand(env_ids.numel(), 2, low=-jitter, high=jitter)
        self.spawn_xy[env_ids] = xy
        z = self.height_field.height(xy[:, 0], xy[:, 1]).clamp(min=origin[:, 2]) + SPAWN_HEIGHT
        return torch.cat((xy, z.unsqueeze(-1)), -1)

    def _pre_step(self) -> None:
        super()._pre_step()
        self.commanded_distance += torch.linalg.vector_norm(self.commands[:, :2], dim=-1) * self.dt

    def _terminated(self) -> torch.Tensor:
        x0, y0, x1, y1 = self.terrain.extent
        x, y = self.base_xy[:, 0], self.base_xy[:, 1]
        off = (x < x0 + 1.0) | (x > x1 - 1.0) | (y < y0 + 1.0) | (y > y1 - 1.0)
        return super()._terminated() | off

    # ----------------------------------------------------------------- observations
    def height_scan(self) -> torch.Tensor:
        """``[N, P]``: ``5 clip(base_z - scan_offset - ground_z, -1, 1)`` at the scan points around each trunk
        (in the trunk's heading frame), read from the terrain grid."""
        w, x, y, z = self.backend.qpos[:, 3:7].to(self.device, torch.float32).unbind(-1)
        yaw = torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        cos, sin = torch.cos(yaw).unsqueeze(-1), torch.sin(yaw).unsqueeze(-1)
        px, py = self._scan_points[:, 0], self._scan_points[:, 1]
        wx = self.base_xy[:, :1] + cos * px - sin * py
        wy = self.base_xy[:, 1:] + sin * px + cos * py
        ground = self.height_field.height(wx, wy)
        return HEIGHT_SCALE * (self.base_z.unsqueeze(-1) - self.cfg.scan_offset - ground).clamp(-1.0, 1.0)

    def _observation_groups(self) -> dict[str, torch.Tensor]:
        groups = super()._observation_groups()
        heights = self.height_scan()
        forces = FORCE_SCALE * self.foot_forces()
        privileged = torch.cat((self.friction.unsqueeze(-1), self.added_mass.unsqueeze(-1), forces), -1)
        noisy_heights = self._with_noise(heights, self._height_noise)
        teacher = torch.cat((groups["policy"], noisy_heights, privileged), -1)
        critic = torch.cat((groups["critic"], heights, forces), -1)
        return {"policy": groups["policy"], "teacher": teacher, "critic": critic}

    def _observation_names(self) -> dict[str, list[str]]:
        """Column names of ``policy``, ``teacher`` and ``critic`` (exported with the policy)."""
        names = super()._observation_names()
        scan = [f"height_x5.x{float(x):+.2f}_y{float(y):+.2f}" for x, y in self._scan_points.tolist()]
        forces = [f"foot_force_x0.01.{leg}" for leg in LEGS]
        teacher = names["policy"] + scan + ["friction", "added_mass"] + forces
        return {"policy": names["policy"], "teacher": teacher, "critic": names["critic"] + scan + forces}

    # ----------------------------------------------------------------- logging
    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """As go2-flat's step, adding the mean terrain level (``Curriculum/terrain_level``) to ``extras["log"]``."""
        obs, rewards, dones, extras = super().step(actions)
        extras["log"]["Curriculum/terrain_level"] = self.curriculum.mean_level()
        return obs, rewards, dones, extras


TASK = TaskSpec(
    name="go2-rough",
    env_cfg=Go2RoughCfg,
    make_env=Go2RoughTask,
    description="Unitree Go2 velocity tracking on rough terrain with a level curriculum (MuJoCo; --sim mujoco|warp)",
)
