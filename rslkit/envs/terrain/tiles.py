"""Tile shapes of the terrain grid: pure numpy functions ``(difficulty, size, cfg, rng) -> heights [size, size]``.

Every tile is a square of ``size x size`` height samples (metres), laid out as MuJoCo's heightfield rows (``y``) by
columns (``x``). Its edges sit at height 0 so that neighbouring tiles meet without a step, and its centre holds a
flat platform (``TileCfg.platform``) where robots spawn. ``difficulty`` runs from 0 (easiest row) to 1 (hardest).
"Up" and "down" are as seen by a robot that starts on the centre platform and walks outwards: on ``slope_up`` and
``stairs_up`` the centre is a pit, on ``slope_down`` and ``stairs_down`` a summit (legged_gym's pyramids).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class TileCfg:
    """How hard each tile type gets, from difficulty 0 to 1 (defaults sized for a Go2, ~0.3 m standing height)."""

    horizontal_scale: float = 0.1
    """Metres between height samples (legged_gym: 0.1)."""
    platform: float = 2.0
    """Side of the flat square at the centre of every tile (metres): the spawn area."""
    rough_amplitude: tuple[float, float] = (0.01, 0.08)
    """Random rough: heights uniform in ``+-amplitude`` (metres), from difficulty 0 to 1."""
    rough_cell: float = 0.2
    """Random rough: metres between the random heights (linearly interpolated in between)."""
    slope: tuple[float, float] = (0.0, 0.4)
    """Slopes: rise per metre (tan of the incline), from difficulty 0 to 1."""
    step_height: tuple[float, float] = (0.02, 0.16)
    """Stairs: height of one step (metres), from difficulty 0 to 1."""
    step_width: float = 0.3
    """Stairs: depth of one step (metres)."""
    obstacle_height: tuple[float, float] = (0.02, 0.14)
    """Discrete obstacles: the tallest box (metres; boxes stand up or sink down by up to this), difficulty 0 to 1."""
    obstacle_size: tuple[float, float] = (0.4, 1.0)
    """Discrete obstacles: side of a box (metres), drawn uniformly."""
    obstacles_per_tile: int = 30


def _lerp(span: tuple[float, float], difficulty: float) -> float:
    return span[0] + difficulty * (span[1] - span[0])


def _ring_distance(size: int, cfg: TileCfg) -> np.ndarray:
    """``[size, size]``: metres from each sample to the tile's edge (Chebyshev), 0 on the border."""
    idx = np.arange(size)
    to_edge = np.minimum(idx, size - 1 - idx) * cfg.horizontal_scale
    return np.minimum(to_edge[:, None], to_edge[None, :])


def _platform_mask(size: int, cfg: TileCfg) -> np.ndarray:
    """``[size, size]`` bool: the centre platform's samples."""
    centre = (size - 1) / 2.0
    idx = np.abs(np.arange(size) - centre) * cfg.horizontal_scale
    half = cfg.platform / 2.0
    return (idx[:, None] <= half) & (idx[None, :] <= half)


def random_rough(difficulty: float, size: int, cfg: TileCfg, rng: np.random.Generator) -> np.ndarray:
    """Uniform random heights every ``rough_cell`` metres, interpolated bilinearly between; the edges fade to 0."""
    amp = _lerp(cfg.rough_amplitude, difficulty)
    coarse_n = max(2, round((size - 1) * cfg.horizontal_scale / cfg.rough_cell) + 1)
    coarse = rng.uniform(-amp, amp, (coarse_n, coarse_n))
    at = np.linspace(0.0, coarse_n - 1, size)
    lo = np.minimum(at.astype(np.int64), coarse_n - 2)
    frac = at - lo
    rows = coarse[lo] * (1 - frac)[:, None] + coarse[lo + 1] * frac[:, None]
    heights = rows[:, lo] * (1 - frac)[None, :] + rows[:, lo + 1] * frac[None, :]
    fade = np.clip(_ring_distance(size, cfg) / max(cfg.rough_cell, cfg.horizontal_scale), 0.0, 1.0)
    return heights * fade


def _pyramid(size: int, cfg: TileCfg, profile: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Heights ``profile(distance to the edge)`` held constant over the centre platform."""
    dist = _ring_distance(size, cfg)
    plateau = dist[_platform_mask(size, cfg)].min()
    return profile(np.minimum(dist, plateau))


def slope(difficulty: float, size: int, cfg: TileCfg, sign: float) -> np.ndarray:
    """A pyramid of four inclines of ``slope`` rise per metre: ``sign`` +1 a summit, -1 a pit at the centre."""
    rise = _lerp(cfg.slope, difficulty)
    return _pyramid(size, cfg, lambda dist: sign * rise * dist)


def stairs(difficulty: float, size: int, cfg: TileCfg, sign: float) -> np.ndarray:
    """Concentric steps of ``step_height`` every ``step_width`` metres: ``sign`` +1 up to, -1 down to the centre."""
    height = _lerp(cfg.step_height, difficulty)
    return _pyramid(size, cfg, lambda dist: sign * height * np.floor(dist / cfg.step_width))


def discrete_obstacles(difficulty: float, size: int, cfg: TileCfg, rng: np.random.Generator) -> np.ndarray:
    """Flat ground with ``obstacles_per_tile`` boxes standing up or sunk down by up to ``obstacle_height``."""
    top = _lerp(cfg.obstacle_height, difficulty)
    heights = np.zeros((size, size))
    lo, hi = (max(1, round(s / cfg.horizontal_scale)) for s in cfg.obstacle_size)
    for _ in range(cfg.obstacles_per_tile):
        w, d = rng.integers(lo, hi + 1, size=2)
        r, c = rng.integers(0, size - d + 1), rng.integers(0, size - w + 1)
        heights[r : r + d, c : c + w] = rng.uniform(-top, top)
    heights[_platform_mask(size, cfg)] = 0.0
    border = _ring_distance(size, cfg) < cfg.horizontal_scale / 2
    heights[border] = 0.0
    return heights


TileFn = Callable[[float, int, TileCfg, np.random.Generator], np.ndarray]

TILE_TYPES: dict[str, TileFn] = {
    "rough": random_rough,
    "slope_up": lambda d, n, cfg, rng: slope(d, n, cfg, -1.0),
    "slope_down": lambda d, n, cfg, rng: slope(d, n, cfg, 1.0),
    "stairs_up": lambda d, n, cfg, rng: stairs(d, n, cfg, -1.0),
    "stairs_down": lambda d, n, cfg, rng: stairs(d, n, cfg, 1.0),
    "obstacles": discrete_obstacles,
}
"""Tile type name (``--env.terrain.columns``) -> shape function."""
