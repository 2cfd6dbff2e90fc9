"""Terrain-level curriculum (legged_gym's): each env has a level (a row of the terrain grid) and a column (a tile
type); at the end of an episode a robot that walked far moves one level up, one that walked much less than it was
commanded to moves one level down, and one that passes the top level starts again on a random level."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rslkit.utils.validation import expect


@dataclass
class CurriculumCfg:
    """When robots change level (``--env.curriculum.<field>``)."""

    enabled: bool = True
    """False: every env keeps a level drawn uniformly over all rows (training on every difficulty at once)."""
    max_init_level: int = 2
    """Envs start on levels drawn uniformly in ``[0, max_init_level]`` (legged_gym: 5 of 10)."""
    promote_distance: float = 0.5
    """Promote when the robot ends an episode farther than this fraction of a tile's side from its spawn point."""
    demote_fraction: float = 0.5
    """Demote when it walked less than this fraction of its commanded distance (``|v*_xy|`` x time), unpromoted."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for fractions outside ``(0, 1]`` or a negative level."""
        expect(self.max_init_level >= 0, "max_init_level", f"must be >= 0, got {self.max_init_level}")
        expect(0 < self.promote_distance, "promote_distance", f"must be > 0, got {self.promote_distance}")
        expect(0 <= self.demote_fraction <= 1, "demote_fraction", f"must be in [0, 1], got {self.demote_fraction}")


class TerrainCurriculum:
    """Levels ``[N]`` and columns ``[N]`` of ``num_envs`` envs on a ``num_rows x num_cols`` terrain grid.

    Columns are fixed (env ``k`` walks column ``k mod num_cols``); levels change in :meth:`update`. Initial levels
    come from ``generator``; :meth:`update` draws from the generator it is given (the task's, which checkpoints
    save).
    """

    def __init__(
        self,
        cfg: CurriculumCfg,
        num_envs: int,
        num_rows: int,
        num_cols: int,
        tile_size: float,
        generator: torch.Generator,
    ) -> None:
        self.cfg = cfg
        self.num_rows = num_rows
        self.tile_size = tile_size
        device = generator.device
        self.columns = torch.arange(num_envs, device=device) % num_cols
        top = min(cfg.max_init_level, num_rows - 1) if cfg.enabled else num_rows - 1
        self.levels = torch.randint(0, top + 1, (num_envs,), generator=generator, device=device)
        """Level (row of the terrain grid) of every env, ``[N]`` long."""

    def update(
        self, env_ids: torch.Tensor, walked: torch.Tensor, commanded: torch.Tensor, generator: torch.Generator
    ) -> None:
        """Move the envs ``env_ids [K]`` whose episodes ended, from their distances from spawn ``walked [K]`` and the
        distances their commands asked for ``commanded [K]`` (metres); envs past the top level get a random level
        from ``generator``. Does nothing with the curriculum off."""
        if not self.cfg.enabled or env_ids.numel() == 0:
            return
        promote = walked > self.cfg.promote_distance * self.tile_size
        demote = (walked < self.cfg.demote_fraction * commanded) & ~promote
        levels = self.levels[env_ids] + promote.long() - demote.long()
        restart = torch.randint(0, self.num_rows, levels.shape, generator=generator, device=levels.device)
        self.levels[env_ids] = torch.where(levels >= self.num_rows, restart, levels.clamp(min=0))

    def mean_level(self) -> torch.Tensor:
        """Mean level over all envs (a 0-d float tensor; logged as ``Curriculum/terrain_level``)."""
        return self.levels.float().mean()
