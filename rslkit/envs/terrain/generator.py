"""The terrain grid: tiles in rows of increasing difficulty (levels) by columns of tile types, deterministic per seed.

Layout (legged_gym's curriculum grid): level ``i`` (0 = easiest) spans ``x`` in ``[i L, (i + 1) L)`` and column ``j``
(tile type ``columns[j]``) spans ``y`` in ``[j L, (j + 1) L)``, for tiles of side ``L = tile_size``; a flat border
of ``border`` metres surrounds the grid. Heights are held in MuJoCo's heightfield layout, ``[ny, nx]`` (rows along
``y``, columns along ``x``), sample ``[0, 0]`` at world ``(-border, -border)``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import numpy as np

from rslkit.envs.terrain.tiles import TILE_TYPES, TileCfg
from rslkit.utils.validation import expect, validate


@dataclass
class TerrainCfg(TileCfg):
    """Layout and tile shapes of the terrain (``--env.terrain.<field>``)."""

    tile_size: float = 8.0
    """Side of one tile (metres; legged_gym: 8)."""
    num_rows: int = 10
    """Difficulty levels, one row of tiles each; level ``i`` has difficulty ``i / (num_rows - 1)``."""
    columns: tuple[str, ...] = field(
        default_factory=lambda: ("rough", "slope_up", "slope_down", "stairs_up", "stairs_down", "obstacles")
    )
    """Tile type of each column (names in :data:`rslkit.envs.terrain.tiles.TILE_TYPES`; repeat one to weight it)."""
    border: float = 12.0
    """Flat margin around the grid (metres), so that robots on the outer tiles do not walk off the heightfield."""
    spawn_radius: float = 0.5
    seed: int = 0
    """Seed of the tile shapes (not the task's ``--seed``: runs with other seeds train on the same terrain)."""
    """Spawn heights are the highest point within this many metres (Chebyshev) of a tile's centre."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a layout that cannot be built."""
        unknown = [c for c in self.columns if c not in TILE_TYPES]
        close = difflib.get_close_matches(unknown[0], TILE_TYPES, n=1) if unknown else []
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        expect(not unknown, "columns", f"unknown tile type(s) {unknown}{hint}; choose from {', '.join(TILE_TYPES)}")
        expect(len(self.columns) > 0, "columns", "must name at least one tile type")
        expect(isinstance(self.num_rows, int) and self.num_rows >= 1, "num_rows", f"must be >= 1, got {self.num_rows}")
        expect(self.horizontal_scale > 0, "horizontal_scale", f"must be > 0, got {self.horizontal_scale}")
        expect(
            self.platform < self.tile_size and self.tile_size >= 4 * self.horizontal_scale,
            "tile_size",
            f"must exceed the platform ({self.platform} m) and 4 samples of {self.horizontal_scale} m, "
            f"got {self.tile_size}",
        )


@dataclass
class Terrain:
    """A generated terrain: heights and where each tile's robots spawn."""

    heights: np.ndarray
    """``[ny, nx]`` float32 heights (metres), MuJoCo's heightfield layout (rows along ``y``)."""
    origin: tuple[float, float]
    """World ``(x, y)`` of sample ``heights[0, 0]``."""
    horizontal_scale: float
    """Metres between samples."""
    tile_origins: np.ndarray
    """``[num_rows, num_cols, 3]`` float32: world ``(x, y, z)`` of each tile's centre, ``z`` its spawn ground height."""
    columns: tuple[str, ...]
    """Tile type of each column."""

    @property
    def num_rows(self) -> int:
        """Difficulty levels."""
        return int(self.tile_origins.shape[0])

    @property
    def num_cols(self) -> int:
        """Tile columns."""
        return int(self.tile_origins.shape[1])

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """World ``(x_min, y_min, x_max, y_max)`` covered by the heights."""
        ny, nx = self.heights.shape
        x0, y0 = self.origin
        return x0, y0, x0 + (nx - 1) * self.horizontal_scale, y0 + (ny - 1) * self.horizontal_scale


def generate_terrain(cfg: TerrainCfg) -> Terrain:
    """Build the grid of ``cfg.num_rows`` levels by ``len(cfg.columns)`` tile types; the same ``cfg.seed``, the same
    terrain.

    Every tile draws from its own generator (seeded by ``cfg.seed`` and its place in the grid), so changing one column
    leaves the other columns' tiles as they were.

    Raises:
        ConfigError: a field of ``cfg`` cannot give a terrain (named as ``--env.terrain.<field>``).
    """
    validate(cfg, "env.terrain")
    hs = cfg.horizontal_scale
    size = round(cfg.tile_size / hs)
    pad = round(cfg.border / hs)
    rows, cols = cfg.num_rows, len(cfg.columns)
    heights = np.zeros((cols * size + 2 * pad, rows * size + 2 * pad))
    origins = np.zeros((rows, cols, 3))
    reach = round(cfg.spawn_radius / hs)
    for level in range(rows):
        difficulty = level / (rows - 1) if rows > 1 else 1.0
        for col, name in enumerate(cfg.columns):
            rng = np.random.default_rng([cfg.seed, level, col])
            tile = TILE_TYPES[name](difficulty, size, cfg, rng)
            r0, c0 = pad + col * size, pad + level * size
            heights[r0 : r0 + size, c0 : c0 + size] = tile
            mid = size // 2
            ground = tile[max(0, mid - reach) : mid + reach + 1, max(0, mid - reach) : mid + reach + 1].max()
            origins[level, col] = ((c0 + mid) * hs - cfg.border, (r0 + mid) * hs - cfg.border, ground)
    return Terrain(
        heights=heights.astype(np.float32),
        origin=(-cfg.border, -cfg.border),
        horizontal_scale=hs,
        tile_origins=origins.astype(np.float32),
        columns=tuple(cfg.columns),
    )
